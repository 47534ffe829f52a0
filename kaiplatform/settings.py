"""Django settings for kaiplatform, read from the environment (12-factor).

Defaults give a working *embedded* installation with no servers at all: SQLite in
``var/db.sqlite3`` and a Celery broker stored in SQLite through kombu's SQLAlchemy transport.
Production (``KAI_ENV=production``) refuses to start without an explicit ``SECRET_KEY`` and
turns DEBUG off unless asked.  Variables:

==========================  ==================================================================
KAI_ENV                     ``development`` (default) or ``production``
KAI_VAR_DIR                 state directory (SQLite DB, broker, dev secret key); default ./var
DATABASE_URL                dj-database-url URL; default ``sqlite:///<var>/db.sqlite3``
CELERY_BROKER_URL           default ``sqla+sqlite:///<var>/celery-broker.sqlite3`` (embedded)
CELERY_RESULT_BACKEND       default unset (results are not stored)
SECRET_KEY / _FILE          required in production; generated into <var> otherwise
DEBUG                       default on in development, off in production
ALLOWED_HOSTS               comma separated; default ``localhost,127.0.0.1,[::1]`` (+ ``*`` in dev)
CSRF_TRUSTED_ORIGINS        comma separated origins
KAI_CYCLE_SECONDS           scheduling cycle period for beat (used by the cycle task)
KAI_HEARTBEAT_SECONDS       period of the worker heartbeat task
KAI_MAX_QUEUE_DEPTH         deepest allowed queue tree level (top level = 1)
==========================  ==================================================================
"""
from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kaiplatform.env import (
    development_secret_key,
    envbool,
    envfloat,
    envint,
    envlist,
    envstr,
)

BASE_DIR = Path(__file__).resolve().parent.parent

KAI_ENV = (envstr("KAI_ENV", "development") or "development").strip().lower()
if KAI_ENV not in {"development", "production", "test"}:
    raise ImproperlyConfigured(f"KAI_ENV={KAI_ENV!r} must be development, production or test")
PRODUCTION = KAI_ENV == "production"

VAR_DIR = Path(envstr("KAI_VAR_DIR", str(BASE_DIR / "var")) or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

# --------------------------------------------------------------------------- security
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when KAI_ENV=production")
    SECRET_KEY = development_secret_key(VAR_DIR / "secret_key.txt")

DEBUG = envbool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] + ([] if PRODUCTION else ["*"]))
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", PRODUCTION)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = envint("SESSION_COOKIE_AGE", 8 * 3600, minimum=60)
X_FRAME_OPTIONS = "DENY"
if envbool("USE_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Django's own cap on form/JSON bodies (DRF >= 3.17.2 honours it too).
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 2 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 2000

# --------------------------------------------------------------------------- apps
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "queues_app",
    "fairshare_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kaiplatform.urls"
WSGI_APPLICATION = "kaiplatform.wsgi.application"
ASGI_APPLICATION = "kaiplatform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# --------------------------------------------------------------------------- database
DEFAULT_DATABASE_URL = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASE_URL = envstr("DATABASE_URL", DEFAULT_DATABASE_URL) or DEFAULT_DATABASE_URL
try:
    _db = dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 0, minimum=0))
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
EMBEDDED_DATABASE = _db["ENGINE"] == "django.db.backends.sqlite3"
if EMBEDDED_DATABASE:
    # IMMEDIATE: every atomic block takes SQLite's write lock at BEGIN, so two writers
    # serialize instead of failing with "database is locked" half-way (SQLite has no
    # SELECT ... FOR UPDATE).  WAL lets the web process read while the worker writes.
    _db.setdefault("OPTIONS", {})
    _db["OPTIONS"].update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": envint("SQLITE_TIMEOUT", 30, minimum=1),
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    _db.setdefault("TEST", {})
else:
    _db.setdefault("TEST", {})
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --------------------------------------------------------------------------- auth / i18n / static
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
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(BASE_DIR / "staticfiles")) or BASE_DIR / "staticfiles")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO") or "INFO"},
}

# --------------------------------------------------------------------------- DRF (the API engineer owns queues_app/api)
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
}
SPECTACULAR_SETTINGS = {"TITLE": "kaiplatform API", "VERSION": "0.1.0"}

# --------------------------------------------------------------------------- Celery
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL") or f"sqla+sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("sqla+")
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND") or None
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", 240, minimum=1)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
if EMBEDDED_BROKER:
    # The SQLAlchemy transport polls; 1 s keeps a 1 s beat period responsive.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": envfloat("CELERY_POLLING_INTERVAL", 1.0, minimum=0.05)}

# --------------------------------------------------------------------------- scheduler
KAI_CYCLE_SECONDS = envint("KAI_CYCLE_SECONDS", 10, minimum=1)
KAI_HEARTBEAT_SECONDS = envint("KAI_HEARTBEAT_SECONDS", 30, minimum=1)
KAI_MAX_QUEUE_DEPTH = envint("KAI_MAX_QUEUE_DEPTH", 8, minimum=1, maximum=64)
# Extra engine config written into every exported scenario's `config` block (scenario keys).
KAI_SCHEDULER_CONFIG: dict = {}
# Dotted path of ``f() -> {queue_name: {resource: 0..1}}`` feeding the snapshot's usage
# (fairshare_app provides it); None = no usage history.
KAI_USAGE_PROVIDER = envstr("KAI_USAGE_PROVIDER") or None
