#!/usr/bin/env bash
# Start the app on its embedded defaults: SQLite, a local Redis, the CPU
# engine with the default model. Set-up (scripts/setup.sh) runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
REDIS_URL=$($PY scripts/ensure_redis.py)
export REDIS_URL
$PY manage.py migrate --noinput -v0
$PY manage.py collectstatic --noinput -v0
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
echo
echo "  Plain-language diagnosis is starting at http://$HOST:$PORT/"
echo "  Demo clinician login:"
$PY manage.py demo_user | sed 's/^/    /'
echo "  Redis: $REDIS_URL · engine: ${INFERENCE_ENGINE:-auto} · Ctrl-C stops it"
echo
# Load the model and prefill the shared prompt as soon as Daphne is up.
( for _ in $(seq 120); do
    curl -sf "http://$HOST:$PORT/readyz" >/dev/null 2>&1 && { echo "  engine ready"; break; }
    sleep 1
  done ) &
exec .venv/bin/daphne -b "$HOST" -p "$PORT" clinical.asgi:application
