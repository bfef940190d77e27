"""A Django project with ``tenants`` and without ``memoryhub``: the tenancy app stands
alone. ``tests/project/test_architecture.py`` runs ``check``, ``migrate`` and ``smoke`` against
it in subprocesses, with ``TENANTS_ONLY_DATABASE_URL`` naming a scratch database."""
