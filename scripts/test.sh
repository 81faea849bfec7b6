#!/usr/bin/env bash
# Set up, then run the whole test suite against a real Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REDIS_URL=$(.venv/bin/python scripts/ensure_redis.py)
export REDIS_URL
exec .venv/bin/python -m pytest "$@"
