"""Settings for the clinical translation service.

12-factor: every setting comes from the environment, with defaults that run
on a laptop (SQLite, Redis on localhost, the CPU engine). Production sets
``DJANGO_ENV=production`` plus ``DJANGO_SECRET_KEY`` and ``DJANGO_ALLOWED_HOSTS``.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CLINICAL_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


#: The values (lower case) an on/off setting reads as on (:func:`env_bool`).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


def env_bool(name: str, default: bool) -> bool:
    """:data:`TRUE_WORDS` (any case) is True."""
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in TRUE_WORDS


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DJANGO_ENV = os.environ.get("DJANGO_ENV", "development")
PRODUCTION = DJANGO_ENV == "production"
DEBUG = env_bool("DJANGO_DEBUG", False)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_ENV=production")
    SECRET_KEY = "dev-only-insecure-key-" + "x" * 40

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "auditlog",
    "import_export",
    "csp",
    "rest_framework",
    "rest_framework_api_key",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "clinical",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "auditlog.middleware.AuditlogMiddleware",
    # The signed-in user is the actor of the account changes a request makes.
    "clinical.web.middleware.ChangeActorMiddleware",
    # Pages and API answers can hold clinical text: no cache keeps them.
    "clinical.web.middleware.NoStoreMiddleware",
    # Last, as django-axes asks: it turns lockouts into responses.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # records logins, locks out brute force
    "django.contrib.auth.backends.ModelBackend",
]
# django-axes: lock a username at an address out after 5 failed logins for
# 15 minutes (OWASP ASVS 5.0 V6.3 asks for anti-automation on logins).
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("AXES_COOLOFF_HOURS", "0.25"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_VERBOSE = False
# The client address is REMOTE_ADDR alone: behind nginx, Daphne sets it from
# the one X-Forwarded-For hop nginx writes (clinical.serve --proxy-headers);
# an X-Forwarded-For the client sends is never read here.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
AXES_IPWARE_PROXY_COUNT = None

ROOT_URLCONF = "clinical.urls"
ASGI_APPLICATION = "clinical.asgi.application"

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
                "clinical.web.views.idle_timeout",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",  # empty = unset
        # Persistent connections: channels' database_sync_to_async closes
        # "old" connections around every call, so with 0 each socket frame
        # paid a new PostgreSQL backend (fork + auth). Health checks drop a
        # connection the server has closed before it is reused.
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file (not in-memory) test database, so a Daphne started by the tests
    # in another process sees the same rows.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("DJANGO_TEST_DB", str(VAR_DIR / "test.sqlite3"))
    }
    DATABASES["default"]["OPTIONS"] = {
        # Daphne and the re-run worker write the same file. A deferred
        # transaction that reads and then writes cannot wait for the other
        # writer (SQLite answers "database is locked" at once, without the
        # busy timeout, to avoid a deadlock), so every transaction takes the
        # write lock when it begins and waits up to ``timeout`` seconds for it
        # (Django 5.1+, docs: "Enabling WAL / transaction_mode" in the SQLite
        # notes). WAL lets readers go on while one process writes.
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"  # empty = unset
CACHE_PREFIX = os.environ.get("CACHE_PREFIX", "clinical")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": CACHE_PREFIX,
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "clinical.runtime.channel_layer.ResilientRedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": os.environ.get("CHANNEL_PREFIX", "clinical")},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Idle timeout: a session ends after SESSION_IDLE_TIMEOUT_S without a request
# (each request or "stay signed in" click restarts it); the page warns two
# minutes before. Sockets re-check the session every SESSION_CHECK_INTERVAL_S.
SESSION_IDLE_TIMEOUT_S = int(os.environ.get("SESSION_IDLE_TIMEOUT_S", "900"))
SESSION_COOKIE_AGE = SESSION_IDLE_TIMEOUT_S
SESSION_SAVE_EVERY_REQUEST = True
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_CHECK_INTERVAL_S = float(os.environ.get("SESSION_CHECK_INTERVAL_S", "30"))
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "translate"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
WHITENOISE_USE_FINDERS = True  # serve from static/ without collectstatic on a laptop

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Security headers (Django's deployment checklist; OWASP ASVS 5.0 V3) ----
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PRODUCTION
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
if PRODUCTION:
    # TLS ends at the load balancer, which sets X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", True)

# Content-Security-Policy (django-csp 4): no inline script or style, no
# third-party origin; WebSockets to this host only ('self').
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- Translation service ---------------------------------------------------
# INFERENCE_ENGINE: auto (vLLM when CUDA is present, else llama.cpp) | vllm |
# llamacpp | fake (tests). INFERENCE_MODEL: GGUF path (llama.cpp) or Hugging
# Face folder/name (vLLM); empty = the engine's default model.
INFERENCE_ENGINE = os.environ.get("INFERENCE_ENGINE", "auto")
INFERENCE_MODEL = os.environ.get("INFERENCE_MODEL", "")
INFERENCE_PRECISION = os.environ.get("INFERENCE_PRECISION", "")
INFERENCE_N_CTX = int(os.environ.get("INFERENCE_N_CTX", "4096"))
INFERENCE_THREADS = int(os.environ.get("INFERENCE_THREADS", "0"))
INFERENCE_QUANTIZATION = os.environ.get("INFERENCE_QUANTIZATION", "default")
INFERENCE_DTYPE = os.environ.get("INFERENCE_DTYPE", "")
# Requests queued or running in this process's engine before new ones get
# "busy, retry in N s" (0 = unbounded). llama.cpp serves one at a time, so
# 8 means at most ~8 requests' worth of waiting.
ENGINE_MAX_QUEUE = int(os.environ.get("ENGINE_MAX_QUEUE", "8"))
# A dead engine (vLLM's engine-core process exited, llama.cpp failed inside a
# decode) is rebuilt in-process (inference/supervisor.py): the first attempt
# ENGINE_REBUILD_BACKOFF_S after the death, then doubling after each failed
# attempt up to ENGINE_REBUILD_BACKOFF_MAX_S. A watchdog asks the engine every
# ENGINE_HEALTH_INTERVAL_S seconds (0 = only when a request or /readyz asks).
# The re-run worker uses the same backoff.
ENGINE_REBUILD_BACKOFF_S = float(os.environ.get("ENGINE_REBUILD_BACKOFF_S", "1"))
ENGINE_REBUILD_BACKOFF_MAX_S = float(os.environ.get("ENGINE_REBUILD_BACKOFF_MAX_S", "60"))
ENGINE_HEALTH_INTERVAL_S = float(os.environ.get("ENGINE_HEALTH_INTERVAL_S", "1"))
# Largest WebSocket frame the consumer accepts (bytes). 128 KiB holds a
# translate frame of MAX_INPUT_CHARS characters even when every one is
# JSON-escaped as a surrogate pair (12 bytes each).
MAX_FRAME_BYTES = int(os.environ.get("MAX_FRAME_BYTES", "131072"))
# Largest WebSocket message Daphne (autobahn) reads at all (bytes): a frame
# between MAX_FRAME_BYTES and this gets the consumer's frame_too_large error
# and the socket stays open; a larger one gets the same error frame, then a
# close with 1009 (message too big), and its bytes are discarded unread
# (clinical.serve).
WEBSOCKET_MAX_MESSAGE_BYTES = int(os.environ.get("WEBSOCKET_MAX_MESSAGE_BYTES", str(1024 * 1024)))
MAX_INPUT_CHARS = int(os.environ.get("MAX_INPUT_CHARS", "8000"))
# Translations a clinician may start from the page (clinical.translation.ratelimit);
# API clients have their own per-client rate (APIClient.throttle_rate).
TRANSLATE_RATE_PER_USER = os.environ.get("TRANSLATE_RATE_PER_USER", "30/minute")
# Frames one socket may send (any type) before further frames are refused.
SOCKET_FRAME_RATE = os.environ.get("SOCKET_FRAME_RATE", "20/second")
# Fair share (clinical.translation.concurrency; 0 = no cap): sockets a user
# may hold open (tabs of the page, detail pages following a verification),
# and translations a user or an API client may run at once, across every
# replica. Over them a socket is closed with 4429, a translation refused
# with too_many_translations (API: 429 with Retry-After).
USER_MAX_SOCKETS = int(os.environ.get("USER_MAX_SOCKETS", "6"))
USER_MAX_CONCURRENT_TRANSLATIONS = int(os.environ.get("USER_MAX_CONCURRENT_TRANSLATIONS", "2"))
API_CLIENT_MAX_CONCURRENT_TRANSLATIONS = int(os.environ.get("API_CLIENT_MAX_CONCURRENT_TRANSLATIONS", "4"))
# Seconds an API client is told (Retry-After) to wait before polling again a
# translation that is still being generated or verified. 2 s keeps a client
# that follows it at 30 requests a minute, half the default client rate.
API_POLL_AFTER_S = int(os.environ.get("API_POLL_AFTER_S", "2"))
MAX_OUTPUT_TOKENS = int(os.environ.get("MAX_OUTPUT_TOKENS", "256"))
# Source design: "if confidence < 0.85, re-run in FP32". Unset: the model's
# calibrated threshold (clinical/quality/gate_calibration.json, written by
# python -m bench gate_calibrate), else 0.85 (clinical/quality/gate.py).
CONFIDENCE_THRESHOLD = (float(os.environ["CONFIDENCE_THRESHOLD"]) if os.environ.get("CONFIDENCE_THRESHOLD")
                        else None)
# The model's own check of each output (inference.self_check): after the
# stream, the same engine is asked whether the rewrite says what the input
# says; P(yes) below the threshold calibrated for the model and prompt
# (gate_calibration.json, python -m bench self_check --write) sends it to the
# re-run instead of the confidence, and the re-run ranks its candidates by it
# (docs/quality/self-check.md: AUROC 0.83 against 0.70 for the confidence on
# hand-judged wrong texts). SELF_CHECK=0: the confidence alone, as before.
# SELF_CHECK_THRESHOLD: a site's own threshold, for any model.
SELF_CHECK = env_bool("SELF_CHECK", True)
SELF_CHECK_THRESHOLD = (float(os.environ["SELF_CHECK_THRESHOLD"]) if os.environ.get("SELF_CHECK_THRESHOLD")
                        else None)
if SELF_CHECK_THRESHOLD is not None and not 0 <= SELF_CHECK_THRESHOLD <= 1:
    # a probability: it is stored with each translation (Translation.self_check_threshold, 0-1)
    raise ImproperlyConfigured(f"SELF_CHECK_THRESHOLD must be between 0 and 1, not {SELF_CHECK_THRESHOLD}")
# SELF_CHECK_COPY: what the re-run delivers where the text it would keep is
# still doubted by the model's own check:
#   always (default): the diagnosis as written (clinical.rerun.candidates.candidate_as_written;
#     measured on laymaker-dev: wrong texts 12 -> 6 of 235 judged, SARI 36.6 -> 35.0);
#   trusted (also 1/true/yes/on): a candidate that is the diagnosis as written and that the
#     model trusts, where there is one (candidate_select; wrong 15 -> 12, SARI 37.4 -> 36.6);
#   off (also 0/false/no): the doubted text, marked. docs/decisions/deliver-as-written.md.
# The on/off words are read as trusted/off.
_SELF_CHECK_COPY_ALIASES = {**dict.fromkeys(TRUE_WORDS, "trusted"), **dict.fromkeys(("0", "false", "no"), "off")}
SELF_CHECK_COPY = os.environ.get("SELF_CHECK_COPY", "always").strip().lower() or "always"
SELF_CHECK_COPY = _SELF_CHECK_COPY_ALIASES.get(SELF_CHECK_COPY, SELF_CHECK_COPY)
if SELF_CHECK_COPY not in ("always", "trusted", "off"):
    raise ImproperlyConfigured(f"SELF_CHECK_COPY must be always, trusted or off, not {SELF_CHECK_COPY!r}")

# --- Latency benchmarks (bench/latency.py) -------------------------------------
# Generate exactly MAX_OUTPUT_TOKENS tokens, never stopping at end of sequence,
# so that the full stack and the bare engines produce outputs of the same
# fixed length. For benchmarks only; off in every real deployment.
INFERENCE_IGNORE_EOS = os.environ.get("INFERENCE_IGNORE_EOS", "") == "1"

# --- Confidence gate: full-precision re-runs on Celery ------------------------
# The worker's engine: vLLM in float32 without quantization over the same
# model's weights as a Hugging Face folder (RERUN_MODEL; empty = the
# full-precision weights of INFERENCE_MODEL, inference.weights.full_precision_model).
# A RERUN_MODEL whose architecture differs from INFERENCE_MODEL's is refused
# at worker start unless RERUN_MODEL_MISMATCH_OK=1.
RERUN_ENGINE = os.environ.get("RERUN_ENGINE", "vllm")
RERUN_MODEL = os.environ.get("RERUN_MODEL", "")
RERUN_MODEL_MISMATCH_OK = env_bool("RERUN_MODEL_MISMATCH_OK", False)
# Share of its GPU the worker's vLLM engine may take (gpu_memory_utilization);
# with a web replica on the same card the two shares must sum to <= 0.9
# (deploy/README.md, "GPU memory plan").
RERUN_GPU_MEMORY_UTILIZATION = float(os.environ.get("RERUN_GPU_MEMORY_UTILIZATION", "0.9"))
# The worker publishes its engine's state to Redis every RERUN_LANE_HEARTBEAT_S
# seconds (kept 3x as long), for /readyz, /metrics and the admin dashboard.
RERUN_LANE_HEARTBEAT_S = float(os.environ.get("RERUN_LANE_HEARTBEAT_S", "10"))
RERUN_DTYPE = os.environ.get("RERUN_DTYPE", "float32")
# The worker's CPU priority, set when it starts, before its engine loads
# (clinical/rerun/cpu_priority.py): idle (Linux SCHED_IDLE, else nice 19: the
# clinicians' engine gets the cores first, re-runs use idle time), normal, or
# auto = idle where the re-run engine runs on the CPU, normal on a CUDA host.
RERUN_CPU_PRIORITY = os.environ.get("RERUN_CPU_PRIORITY", "auto").strip().lower() or "auto"
if RERUN_CPU_PRIORITY not in ("auto", "idle", "normal"):
    raise ImproperlyConfigured(f"RERUN_CPU_PRIORITY must be auto, idle or normal, not {RERUN_CPU_PRIORITY!r}")
RERUN_SOFT_TIME_LIMIT_S = int(os.environ.get("RERUN_SOFT_TIME_LIMIT_S", "900"))
RERUN_TIME_LIMIT_S = int(os.environ.get("RERUN_TIME_LIMIT_S", "960"))
RERUN_MAX_RETRIES = int(os.environ.get("RERUN_MAX_RETRIES", "3"))
RERUN_RETRY_BACKOFF_S = int(os.environ.get("RERUN_RETRY_BACKOFF_S", "5"))
# The re-run's candidates, tried in this order (clinical/rerun/candidates/;
# docs/decisions/rerun-candidates.md): the same messages greedy (the design's FP32
# run), the prompt with retrieved examples, the input copied with its hard
# terms replaced, the same messages sampled. The first that passes both checks
# at the gate's confidence ends the search; else the best of those tried wins.
RERUN_CANDIDATES = tuple(name.strip() for name in os.environ.get(
    "RERUN_CANDIDATES", "full_precision,retrieved_examples,span_replacement,sampled").split(",") if name.strip())
# A candidate from other messages (other examples, sampling) replaces a fast
# text that passed both checks only when its confidence is more than this much
# higher (0-1; "inf": never); full_precision always may
# (clinical.rerun.candidates.Incumbent). 0: measured on both cross-fit
# halves, a larger margin chosen on one lowered SARI on the other
# (docs/decisions/rerun-candidates.md).
RERUN_REPLACE_MARGIN = float(os.environ.get("RERUN_REPLACE_MARGIN", "0"))
# A re-run whose task never reached the broker (broker unreachable when the
# translation completed; Rerun.dispatched_at empty) is sent again by the sweep
# (clinical.rerun.dispatch.reruns_redispatch, every ORPHAN_SWEEP_INTERVAL_S on each
# replica, and manage.py translations_sweep) once it is older than this many
# seconds. It must exceed the time a first dispatch may take (Celery's publish
# retries, about 1 s), so that the sweep does not race it.
RERUN_REDISPATCH_GRACE_S = float(os.environ.get("RERUN_REDISPATCH_GRACE_S", "30"))

# --- Reading level, safety check and glossary (clinical/quality/measure.py) -----------
# A failed safety check (clinical/quality/safety.py) queues the full-precision re-run
# like a low confidence does; off only for tests that isolate the confidence gate.
SAFETY_RERUN = env_bool("SAFETY_RERUN", True)
# A failed faithfulness check (clinical/quality/faithfulness/: the output
# states something the input does not) queues the re-run too.
FAITHFULNESS_RERUN = env_bool("FAITHFULNESS_RERUN", True)
# Languages whose explanations must be read by a speaker of that language
# before they are handed over: the page, the detail page and the handout say
# so (clinical/quality/display.py). Spanish from the default model was wrong
# in 4 of 10 sentences judged, none of them flagged by the checks
# (docs/decisions/spanish-review.md); empty the list for a model measured to write it well.
LANGUAGE_REVIEW_REQUIRED = env_list("LANGUAGE_REVIEW_REQUIRED", "es")
# Worked examples for English input (clinical/models.py
# translation_prompt_version), generated sentence by sentence: fewer wrong
# outputs. Off: one request with today's instructions (2026-11-22.3).
PROMPT_EXAMPLES = env_bool("PROMPT_EXAMPLES", True)
# How the examples are chosen (inference/prompts.py CLUSTER_PROMPT_VERSION):
# the shipped pool is cut into PROMPT_CLUSTERS k-means clusters, each with
# PROMPT_CLUSTER_EXAMPLES fixed examples in a prompt prefix the engine
# caches (one KV snapshot per cluster, INFERENCE_PREFIX_SNAPSHOTS), plus
# PROMPT_RETRIEVED_K examples retrieved for the sentence inside the last
# message (prefill paid by every request). PROMPT_CLUSTERS=0: 6 examples
# retrieved per sentence as turns (2026-11-25.1), about 258 more prompt
# tokens read per request (seconds of TTFT on 2 cores).
PROMPT_CLUSTERS = int(os.environ.get("PROMPT_CLUSTERS", "24"))
PROMPT_CLUSTER_EXAMPLES = int(os.environ.get("PROMPT_CLUSTER_EXAMPLES", "8"))
PROMPT_RETRIEVED_K = int(os.environ.get("PROMPT_RETRIEVED_K", "0"))
# The Human Phenotype Ontology's plain words (layperson synonyms) for the
# sentence's medical terms follow it in the last message (inference/prompts.py
# HINTS_PROMPT_VERSION; measured in docs/quality/quality-report.md).
PROMPT_HINTS = env_bool("PROMPT_HINTS", False)
# A sentence's leading section headings ("NEUROLOGIC :") are copied
# verbatim and the model gets only the findings after them (inference/prompts.py
# ClusterPrompt.headings, version suffix "h"; measured in docs/quality/quality-report.md).
PROMPT_HEADINGS = env_bool("PROMPT_HEADINGS", True)
# More sentences than this in one input: one request with today's
# instructions instead (each sentence is a request of up to
# MAX_OUTPUT_TOKENS tokens).
PROMPT_MAX_SENTENCES = int(os.environ.get("PROMPT_MAX_SENTENCES", "40"))
# After the engine starts, evaluate each cluster's prefix (English, default
# grade) as background work, so a clinician's first sentence of a cluster
# does not pay it (llama.cpp, one request at a time, only).
PROMPT_CLUSTER_WARMUP = env_bool("PROMPT_CLUSTER_WARMUP", True)
for _name in ("PROMPT_CLUSTERS", "PROMPT_CLUSTER_EXAMPLES", "PROMPT_RETRIEVED_K", "PROMPT_MAX_SENTENCES"):
    if globals()[_name] < 0:  # PROMPT_CLUSTERS above the pool's 175 rows fails at the first use
        raise ImproperlyConfigured(f"{_name} must be >= 0")
# Glossary: at most this many terms, each defined by a vetted vocabulary
# (HPO, the drug dictionary: clinical/quality/glossary.py), never by the model.
GLOSSARY_MAX_TERMS = int(os.environ.get("GLOSSARY_MAX_TERMS", "8"))

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ROUTES = {"clinical.tasks.translation_verify": {"queue": "rerun"}}
# A broker that stops answering without closing the connection (failover,
# a firewall dropping packets) must not hold the thread that publishes a
# re-run, which the translation's end waits on: each socket connect and read
# gives up after this many seconds (kombu's default is to wait forever), and
# a publish is tried at most 1 + CELERY_PUBLISH_MAX_RETRIES times, so the
# worst case is about 3 x 3 s. The re-run is then left to the sweep
# (RERUN_REDISPATCH_GRACE_S). The worker's BRPOP returns every second, well
# inside the timeout.
CELERY_BROKER_TIMEOUT_S = float(os.environ.get("CELERY_BROKER_TIMEOUT_S", "3"))
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": int(os.environ.get("CELERY_PUBLISH_MAX_RETRIES", "2")),
    "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2,
}
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": CELERY_BROKER_TIMEOUT_S,
    "socket_connect_timeout": CELERY_BROKER_TIMEOUT_S,
    # An unacknowledged task is handed to another worker after this long: it
    # must exceed the longest task (the hard time limit).
    "visibility_timeout": int(os.environ.get("RERUN_VISIBILITY_TIMEOUT_S", str(RERUN_TIME_LIMIT_S + 240))),
    "unacked_restore_interval": int(os.environ.get("CELERY_UNACKED_RESTORE_INTERVAL_S", "10")),
    "unacked_restore_throttle": int(os.environ.get("CELERY_UNACKED_RESTORE_THROTTLE", "10")),
    "global_keyprefix": os.environ.get("CELERY_KEY_PREFIX", ""),
}

# --- Replicas, health, metrics and GPU settings (README "Deployment") ----------
# This process's name in leases and logs (default <host>-<pid>).
REPLICA_ID = os.environ.get("REPLICA_ID") or f"{__import__('socket').gethostname()}-{os.getpid()}"
# SIGTERM: streams in flight get this long to finish before they are
# cancelled (recorded) and their sockets closed with 1012 (clinical.runtime.drain).
DRAIN_TIMEOUT_S = float(os.environ.get("DRAIN_TIMEOUT_S", "25"))
# Redis lease per streaming translation (clinical.runtime.replica): time to live and
# renewal period, seconds; the orphan sweep's period (0 = off) and the age a
# pending translation must reach before the sweep may finalise it.
LEASE_TTL_S = int(os.environ.get("LEASE_TTL_S", "15"))
LEASE_REFRESH_S = float(os.environ.get("LEASE_REFRESH_S", "5"))
ORPHAN_SWEEP_INTERVAL_S = float(os.environ.get("ORPHAN_SWEEP_INTERVAL_S", "30"))
SWEEP_GRACE_S = float(os.environ.get("SWEEP_GRACE_S", str(LEASE_TTL_S)))
# GET /metrics: bearer token; unset = loopback clients only (clinical.runtime.metrics).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# A connection that has not sent a request's headers (or has sent nothing)
# for this many seconds is closed (Twisted's idle timeout, default 60 s plus
# 15 s to abort; clinical/serve.py), so slow-header clients cannot hold
# connections open.
HTTP_HEADER_TIMEOUT_S = float(os.environ.get("HTTP_HEADER_TIMEOUT_S", "20"))
# A WebSocket whose opening handshake (the upgrade request until the consumer
# accepts: session and user read from the database, the socket caps in Redis)
# takes longer is dropped without an HTTP response (Autobahn's
# openHandshakeTimeout). Daphne's Server defaults it to 5 s, which a loaded
# 2-core replica exceeded with 150 sockets opening at once; Daphne's own CLI
# uses 20 s (its --websocket_connect_timeout), and so do we (clinical/serve.py).
WEBSOCKET_HANDSHAKE_TIMEOUT_S = float(os.environ.get("WEBSOCKET_HANDSHAKE_TIMEOUT_S", "20"))
# Probes and scrapes reach a replica directly over HTTP, never redirected.
SECURE_REDIRECT_EXEMPT = [r"^livez$", r"^readyz$", r"^metrics$"]
# GPU settings passed to vLLM (inference/vllm_engine.py); INFERENCE_DEVICE
# auto = CUDA when torch sees one. INFERENCE_QUANTIZATION (above): default =
# fp8 on GPU, none on CPU. Empty INFERENCE_ENFORCE_EAGER = false on GPU (CUDA
# graphs), true on CPU. INFERENCE_MAX_MODEL_LEN defaults to INFERENCE_N_CTX.
INFERENCE_DEVICE = os.environ.get("INFERENCE_DEVICE", "auto")
INFERENCE_TENSOR_PARALLEL_SIZE = int(os.environ.get("INFERENCE_TENSOR_PARALLEL_SIZE", "1"))
INFERENCE_GPU_MEMORY_UTILIZATION = float(os.environ.get("INFERENCE_GPU_MEMORY_UTILIZATION", "0.9"))
INFERENCE_MAX_MODEL_LEN = int(os.environ.get("INFERENCE_MAX_MODEL_LEN", "0")) or INFERENCE_N_CTX
INFERENCE_PREFIX_CACHING = env_bool("INFERENCE_PREFIX_CACHING", True)
INFERENCE_ENFORCE_EAGER = (None if not os.environ.get("INFERENCE_ENFORCE_EAGER", "").strip()
                           else env_bool("INFERENCE_ENFORCE_EAGER", False))
INFERENCE_SPECULATIVE_MODEL = os.environ.get("INFERENCE_SPECULATIVE_MODEL", "")
INFERENCE_NUM_SPECULATIVE_TOKENS = int(os.environ.get("INFERENCE_NUM_SPECULATIVE_TOKENS", "5"))

# --- REST API for EHR systems (clinical/api) ----------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["clinical.api.auth.APIClientAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["clinical.api.auth.HasScope"],
    "DEFAULT_THROTTLE_CLASSES": ["clinical.api.auth.APIClientRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "clinical.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Plain-language diagnosis API",
    "DESCRIPTION": "Turns a clinician's diagnosis text into a plain-language explanation for the "
                   "patient. Authenticate with `Authorization: Bearer <client token>`.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The checks' "kind" fields: one enum each, wherever a serializer uses it.
    "ENUM_NAME_OVERRIDES": {"SafetyKindEnum": "clinical.quality.safety.KINDS",
                            "FaithfulnessKindEnum": "clinical.quality.faithfulness.KINDS"},
}
API_KEY_CUSTOM_HEADER = None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "clinical.runtime.log.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s] %(message)s"}
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": "plain"}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
    },
}

# The audit export (CSV or JSON) escapes every CSV cell that starts with
# = + - @ tab or CR (clinical.admin.SpreadsheetSafeCSV, OWASP's guidance);
# this setting strips a leading = in any other django-import-export export.
IMPORT_EXPORT_ESCAPE_FORMULAE_ON_EXPORT = True
