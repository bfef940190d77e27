"""WSGI entry point (gunicorn config.wsgi:application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

# A local embedding model loads while the server starts, not at the first query.
from memoryhub.embedders.base import warm_configured_in_background  # noqa: E402

warm_configured_in_background()
