"""Services: the only place memoryhub's domain rules live.

Front doors (REST views, admin, management commands, ``memoryhub.sources``) validate
their input shape and call these functions; tasks call them too.
"""
