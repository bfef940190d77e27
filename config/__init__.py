"""The runnable memoryhub site: settings, urls, the Celery app, wsgi/asgi.

The reusable apps (``memoryhub`` and ``tenants``) never import from here.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
