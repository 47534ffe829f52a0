"""Django settings for kaiplatform, read from the environment (12-factor).

Defaults give a working *embedded* installation with no servers at all: SQLite in
``var/db.sqlite3`` and a Celery broker stored in SQLite through kombu's SQLAlchemy transport.
Production (``KAI_ENV=production``) refuses to start without an explicit ``SECRET_KEY`` and
turns DEBUG off unless asked.  Variables:

==========================  ==================================================================
KAI_ENV                     ``development`` (default) or ``production``
KAI_VAR_DIR                 state directory (SQLite DB, broker, dev secret key); default ./var
DATABASE_URL                dj-database-url URL; default ``sqlite:///<var>/db.sqlite3``
DB_CONN_MAX_AGE             seconds a connection is kept (checked before reuse); 60 on PostgreSQL
CELERY_BROKER_URL           default ``sqla+sqlite:///<var>/celery-broker.sqlite3`` (embedded)
CELERY_RESULT_BACKEND       default unset (results are not stored)
SECRET_KEY / _FILE          required in production; generated into <var> otherwise
DEBUG                       off unless set (``DEBUG=1``): debug pages show tracebacks and settings
ALLOWED_HOSTS               comma separated; default ``localhost,127.0.0.1,[::1]`` (+ ``*`` in dev)
CSRF_TRUSTED_ORIGINS        comma separated origins
KAI_CYCLE_SECONDS           scheduling cycle period for beat (used by the cycle task)
KAI_HEARTBEAT_SECONDS       period of the worker heartbeat task
KAI_MAX_QUEUE_DEPTH         deepest allowed queue tree level (top level = 1)
KAI_DASHBOARD_REFRESH_SECONDS  how often the admin dashboard refreshes itself (default 5)
KAI_DASHBOARD_RACK_LABELS   node labels that name a node's rack on the dashboard's node map
KAI_WORKER_PRELOAD_ENGINE   a worker on the cycle's queue loads the engine's kernels at start (default on)
==========================  ==================================================================
"""
from __future__ import annotations

import re
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
    weak_secret_key_reason,
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
elif PRODUCTION and (_weak := weak_secret_key_reason(SECRET_KEY)):
    raise ImproperlyConfigured(f"SECRET_KEY {_weak}: generate one, e.g. python -c "
                               "'import secrets; print(secrets.token_urlsafe(50))'")

# Off unless asked for (DEBUG=1), also in development: debug pages show tracebacks, settings and
# the URL list to anyone who can reach the server.
DEBUG = envbool("DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] + ([] if PRODUCTION else ["*"]))
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", PRODUCTION)
# Production is served over TLS (usually terminated at an ingress; set USE_X_FORWARDED_PROTO):
# redirect plain HTTP and send HSTS, except for the kubelet's plain-HTTP probes.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", PRODUCTION)
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
    "kaiplatform.admin.KaiAdminConfig",  # django.contrib.admin with the cluster dashboard as its index
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "queues_app",
    "fairshare_app",
]

MIDDLEWARE = [
    "kaiplatform.api_errors.ApiJsonErrorsMiddleware",  # first: every /api/ answer is JSON, errors too
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
        "DIRS": [BASE_DIR / "kaiplatform" / "templates"],  # admin/base_site.html: branding, console CSS
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
    _db = dj_database_url.parse(DATABASE_URL)
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
EMBEDDED_DATABASE = _db["ENGINE"] == "django.db.backends.sqlite3"
# Persistent connections on a database server (a new PostgreSQL connection per request cost the
# load benchmark a third of its throughput); checked before reuse, so a connection the server
# dropped (restart, pg_terminate_backend) is replaced instead of failing the request.
_db["CONN_MAX_AGE"] = envint("DB_CONN_MAX_AGE", 0 if EMBEDDED_DATABASE else 60, minimum=0)
_db["CONN_HEALTH_CHECKS"] = True
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
# Embedded / development runs serve the admin's static files straight from the apps (no
# collectstatic step); production runs `collectstatic` into STATIC_ROOT.
WHITENOISE_USE_FINDERS = envbool("WHITENOISE_USE_FINDERS", not PRODUCTION)
try:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:
    pass

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO") or "INFO"},
}

# --------------------------------------------------------------------------- DRF (the API engineer owns queues_app/api)
# Deny by default; tokens for API clients, sessions only for the browsable API (no Basic).
# Filtering happens inside the selectors (queues_app/filters.py), not in a filter backend.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "queues_app.api.schema.KaiAutoSchema",
    "DEFAULT_FILTER_BACKENDS": [],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["queues_app.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "queues_app.api.pagination.PageNumberPagination",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "queues_app.api.negotiation.StrictFormatNegotiation",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "queues_app.api.exceptions.exception_handler",
    # Per tenant (all members share one budget), per operator user, per client IP when anonymous.
    "DEFAULT_THROTTLE_CLASSES": ["queues_app.api.throttling.TenantRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "tenant": envstr("KAI_API_RATE", "1200/min"),
        "submit": envstr("KAI_API_SUBMIT_RATE", "120/min"),
        "anon": envstr("KAI_API_ANON_RATE", "30/min"),
    },
    "NUM_PROXIES": envint("KAI_NUM_PROXIES", 0, minimum=0),
    "STRICT_JSON": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "kaiplatform API",
    "DESCRIPTION": "Tenant and operator API of the kaiplatform GPU batch scheduler.",
    "VERSION": "0.1.0",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# Throttle counters must be shared by every web process (a per-process LocMem cache
# multiplies the limit by the number of processes): set CACHE_URL=redis://... in production.
if envstr("CACHE_URL"):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": envstr("CACHE_URL")}}

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
if EMBEDDED_BROKER and CELERY_BROKER_URL.startswith("sqla+sqlite"):
    # kombu's SQLAlchemy transport hands these options to create_engine(): wait for the
    # SQLite write lock (web and worker both write the broker file) instead of failing.
    # It polls the table once per second (kombu's default polling interval).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_args": {"timeout": envint("SQLITE_TIMEOUT", 30, minimum=1)}}

# --------------------------------------------------------------------------- scheduler
KAI_CYCLE_SECONDS = envint("KAI_CYCLE_SECONDS", 5, minimum=1)  # issue #4: default 5 s
KAI_HEARTBEAT_SECONDS = envint("KAI_HEARTBEAT_SECONDS", 30, minimum=1)
KAI_MAX_QUEUE_DEPTH = envint("KAI_MAX_QUEUE_DEPTH", 8, minimum=1, maximum=64)
# The admin dashboard polls admin/dashboard.json this often; node labels naming a node's rack.
KAI_DASHBOARD_REFRESH_SECONDS = envint("KAI_DASHBOARD_REFRESH_SECONDS", 5, minimum=1, maximum=3600)
KAI_DASHBOARD_RACK_LABELS = envlist("KAI_DASHBOARD_RACK_LABELS", ["kai.scheduler/rack", "topology.kubernetes.io/rack",
                                                                 "topology.kubernetes.io/zone"])
# Extra engine config written into every exported scenario's `config` block (scenario keys).
KAI_SCHEDULER_CONFIG: dict = {}
# Dotted path of ``f() -> {queue_name: {resource: 0..1}}`` feeding the snapshot's usage
# (fairshare_app provides it); None = no usage history.
KAI_USAGE_PROVIDER = envstr("KAI_USAGE_PROVIDER") or None
# Beat period of fairshare_app's usage accounting task (the accounting interval itself is an
# operator setting in the admin; extra triggers are no-ops).  Unset KAI_USAGE_PROVIDER means
# fairshare_app's normalised usage feeds the engine.
KAI_ACCOUNTING_SECONDS = envint("KAI_ACCOUNTING_SECONDS", 30, minimum=1)
# A Celery worker that consumes the scheduling cycle's queue loads the engine's compiled kernels before
# it takes tasks (compiling them if the cache is cold), so no cycle pays for it inside its time limits.
KAI_WORKER_PRELOAD_ENGINE = envbool("KAI_WORKER_PRELOAD_ENGINE", True)

# --------------------------------------------------------------------------- kubernetes (issue #7)
# Off unless configured: ``embedded`` keeps the database as the cluster (the demo default).
# ``kubernetes`` makes the sync loop (``manage.py kube_sync``) the source of nodes and pods and the
# dispatcher task carry out binds/evictions through the API server.
KAI_CLUSTER_MODE = (envstr("KAI_CLUSTER_MODE", "embedded") or "embedded").strip().lower()
KAI_KUBE_IN_CLUSTER = envbool("KAI_KUBE_IN_CLUSTER", False)  # service-account token of the pod
KAI_KUBECONFIG = envstr("KAI_KUBECONFIG") or None  # else $KUBECONFIG / ~/.kube/config
KAI_KUBE_CONTEXT = envstr("KAI_KUBE_CONTEXT") or None
KAI_SCHEDULER_NAME = envstr("KAI_SCHEDULER_NAME", "kai-scheduler") or "kai-scheduler"
KAI_KUBE_QUEUE_LABEL = envstr("KAI_KUBE_QUEUE_LABEL", "kai.scheduler/queue") or "kai.scheduler/queue"
# Node label carrying the memory of one GPU in MiB (GPU feature discovery), else the default below.
KAI_KUBE_GPU_MEMORY_LABEL = envstr("KAI_KUBE_GPU_MEMORY_LABEL", "nvidia.com/gpu.memory") or "nvidia.com/gpu.memory"
KAI_KUBE_DEFAULT_GPU_MEMORY_MIB = envint("KAI_KUBE_DEFAULT_GPU_MEMORY_MIB", 0, minimum=0)
KAI_KUBE_REQUEST_TIMEOUT = envint("KAI_KUBE_REQUEST_TIMEOUT", 10, minimum=1)  # seconds per API call
KAI_KUBE_WATCH_TIMEOUT = envint("KAI_KUBE_WATCH_TIMEOUT", 300, minimum=1)  # server-side watch timeout
KAI_KUBE_DISPATCH_SECONDS = envint("KAI_KUBE_DISPATCH_SECONDS", 2, minimum=1)  # reconcile interval (beat)
KAI_KUBE_MAX_ATTEMPTS = envint("KAI_KUBE_MAX_ATTEMPTS", 8, minimum=1)
KAI_KUBE_STUCK_EVICTION_SECONDS = envint("KAI_KUBE_STUCK_EVICTION_SECONDS", 300, minimum=1)

# --------------------------------------------------------------------------- cluster autoscaling (issue #22)
# Kubernetes mode always writes the PodScheduled condition of waiting pods (``Unschedulable`` only
# for capacity, so cluster-autoscaler / Karpenter act on those alone).  The flag below adds what
# GPU sharing needs on top: the scale adjuster (utility pods asking for whole GPUs for the sum of
# the unschedulable fractions, beat entry ``kube-scale-adjust``) and ``karpenter.sh/do-not-disrupt``
# on the shared-GPU pods we bind.
KAI_AUTOSCALE_ENABLED = envbool("KAI_AUTOSCALE_ENABLED", False)
KAI_AUTOSCALE_NAMESPACE = (envstr("KAI_AUTOSCALE_NAMESPACE", "kai-scale-adjust") or "kai-scale-adjust").strip()
if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", KAI_AUTOSCALE_NAMESPACE):
    raise ImproperlyConfigured(f"KAI_AUTOSCALE_NAMESPACE={KAI_AUTOSCALE_NAMESPACE!r} is not a namespace name "
                               "(lower-case letters, digits and '-', at most 63 characters)")
# GPUs counted for one unschedulable pod that asks for GPU memory (the memory of the node an
# autoscaler would add is unknown in advance): KAI's --gpu-memory-to-fraction-ratio, default 0.1.
KAI_AUTOSCALE_GPU_MEMORY_FRACTION = envfloat("KAI_AUTOSCALE_GPU_MEMORY_FRACTION", 0.1, minimum=0.0)
if not 0.0 < KAI_AUTOSCALE_GPU_MEMORY_FRACTION <= 1.0:
    raise ImproperlyConfigured(f"KAI_AUTOSCALE_GPU_MEMORY_FRACTION={KAI_AUTOSCALE_GPU_MEMORY_FRACTION} must be "
                               "above 0 and at most 1")
KAI_AUTOSCALE_POD_IMAGE = (envstr("KAI_AUTOSCALE_POD_IMAGE", "registry.k8s.io/pause:3.10")
                           or "registry.k8s.io/pause:3.10").strip()
KAI_AUTOSCALE_SECONDS = envint("KAI_AUTOSCALE_SECONDS", 10, minimum=1)  # scale adjuster period (beat)
# After utility pods that got a node are removed, no new one is created for this long, so the
# scheduler can place the waiting pods on the new node first (KAI: DefaultCoolDownSeconds = 60).
KAI_AUTOSCALE_COOLDOWN_SECONDS = envint("KAI_AUTOSCALE_COOLDOWN_SECONDS", 60, minimum=0)
