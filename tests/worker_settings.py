"""Settings of Celery workers started by tests: the site's, plus MEMORYHUB overrides."""

import json
import os

from config.settings import *  # noqa: F403

MEMORYHUB = json.loads(os.environ.get("MEMORYHUB_TEST_SETTINGS") or "{}")
# Redelivery of a message whose worker died must not wait the default hour.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 5}
# Tests read task outcomes from the worker's log.
LOGGING["loggers"]["celery.app.trace"]["level"] = "INFO"  # noqa: F405
