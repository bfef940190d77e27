"""A foreign Django project (a "monolith") that installs memoryhub's two apps.

Nothing here comes from ``config/``: it has its own user model, URL layout, Celery app
and database settings, as an existing project would.
"""

import os

import dj_database_url

SECRET_KEY = "host-project-test-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "tests.host_project.urls"
AUTH_USER_MODEL = "accounts.Account"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.postgres",
    "tests.host_project.accounts",
    "rest_framework",
    "rest_framework_api_key",
    "tenants",
    "memoryhub",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

if os.environ.get("HOST_PROJECT_EMBEDDED_DIR"):  # the embedding guide's development database
    DATABASES = {
        "default": {
            "ENGINE": "memoryhub.contrib.embedded_postgres",
            "NAME": "app",
            "DATA_DIR": os.environ["HOST_PROJECT_EMBEDDED_DIR"],
        }
    }
else:
    DATABASES = {"default": dj_database_url.parse(os.environ["HOST_PROJECT_DATABASE_URL"])}

# The host's own, opinionated DRF defaults, for its own API: none of them may reach
# memoryhub's API (its views pin their own; the smoke test checks the contract holds).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/day"},
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.AcceptHeaderVersioning",
    "EXCEPTION_HANDLER": "tests.host_project.accounts.exceptions.host_exception_handler",
}

if os.environ.get("HOST_PROJECT_CELERY") == "unconfigured":  # tests/host/test_host_checks.py
    CELERY_TASK_ALWAYS_EAGER = False
elif os.environ.get("HOST_PROJECT_CELERY") in ("broker", "broker+beat"):
    CELERY_TASK_ALWAYS_EAGER = False
    CELERY_BROKER_URL = "memory://localhost/"
    if os.environ["HOST_PROJECT_CELERY"] == "broker+beat":
        from memoryhub.schedule import beat_schedule

        CELERY_BEAT_SCHEDULE = beat_schedule()
else:
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_BROKER_URL = "memory://localhost/"

MEMORYHUB = {"MAX_K": 20, "EMBEDDER_OPTIONS": {"dimensions": 128}}
