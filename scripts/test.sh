#!/usr/bin/env bash
# Set up, then run the whole test suite against a real Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --for-tests
# The code's shape before its behaviour: lint errors (ruff.toml) and the
# package order (.importlinter) fail the build.
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache
REDIS_URL=$(.venv/bin/python scripts/ensure_redis.py)
export REDIS_URL
# PostgreSQL (the production database) when one answers, else SQLite.
if [ -z "${DATABASE_URL:-}" ]; then
  PG_URL="${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/clinical}"
  if .venv/bin/python -c "import psycopg,sys; psycopg.connect(sys.argv[1].rsplit('/',1)[0]+'/postgres', connect_timeout=2).close()" "$PG_URL" 2>/dev/null; then
    export DATABASE_URL="$PG_URL"
    echo "==> tests on PostgreSQL ($PG_URL)"
  else
    echo "==> tests on SQLite (no PostgreSQL at $PG_URL)"
  fi
fi
# Two workers (pytest-xdist), a test file to a worker (--dist loadfile, so a
# module's fixtures start once), the files in the order tests/conftest.py
# gives (--no-loadscope-reorder: the long ones first): the live tests mostly
# wait on the processes they start, so a serial run leaves the second core
# idle. No test runs vLLM on the 1.5B model (their vLLM engines load
# SmolLM2), so two files' stacks fit the memory side by side. TEST_WORKERS=0
# runs the suite serially. Arguments go to pytest: `make test-fast` passes
# -m "not live and not slow" (no model, no server).
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
