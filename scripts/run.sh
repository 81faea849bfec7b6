#!/usr/bin/env bash
# Start the app on its embedded defaults: SQLite, a local Redis, the CPU
# engine with the default model. Set-up (scripts/setup.sh) runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
bash scripts/setup.sh
PY=.venv/bin/python
# The re-run worker's full-precision copy of the default model (fp32 for
# vLLM, ~6.2 GB, made once; about 1 min).
$PY -m inference.weights prepare --with-default-hf >/dev/null
REDIS_URL=$($PY scripts/ensure_redis.py)
export REDIS_URL
# The database and logs hold clinical text and credentials: this user only.
mkdir -p var && chmod 700 var
umask 077
$PY manage.py migrate --noinput -v0
[ -f var/db.sqlite3 ] && chmod 600 var/db.sqlite3
$PY manage.py collectstatic --noinput -v0
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
echo
echo "  Plain-language diagnosis is starting at http://$HOST:$PORT/"
echo "  Demo clinician login:"
$PY manage.py demo_user | sed 's/^/    /'
echo "  Redis: $REDIS_URL · engine: ${INFERENCE_ENGINE:-auto} · Ctrl-C stops it"
echo
# The confidence gate's worker: full-precision re-runs on the "rerun" queue.
mkdir -p var
.venv/bin/celery -A clinical worker -Q rerun --pool solo --concurrency 1 \
  --loglevel INFO >>var/celery-rerun.log 2>&1 &
WORKER_PID=$!
trap 'kill $WORKER_PID 2>/dev/null; wait $WORKER_PID 2>/dev/null' EXIT INT TERM
echo "  Re-run worker started (log: var/celery-rerun.log)"

# Load the model and prefill the shared prompt as soon as Daphne is up; the
# engine then reads the example prompts' prefixes (/readyz says "warming":
# from disk after a restart, minutes on a first start).
( warming=""
  for _ in $(seq 1800); do
    body=$(curl -s "http://$HOST:$PORT/readyz" 2>/dev/null) || body=""
    case "$body" in
      *'"status": "ready"'*)
        echo "  engine ready: serving $((SECONDS - START)) s after make run started"; break ;;
      *'"status": "warming"'*)
        [ -n "$warming" ] || echo "  engine loaded $((SECONDS - START)) s after make run started;" \
          "reading the example prompts' prefixes (translations work meanwhile, more slowly)"
        warming=1 ;;
    esac
    sleep 1
  done ) &
# One replica (Daphne with a graceful drain on Ctrl-C/SIGTERM; deploy/README.md
# runs several behind nginx).
.venv/bin/python -m clinical.serve --host "$HOST" --port "$PORT"
