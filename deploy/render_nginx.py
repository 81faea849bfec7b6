"""Render deploy/nginx.conf.template for N web replicas.

    python deploy/render_nginx.py --listen 0.0.0.0:80 \\
        --replica 10.0.0.11:8001 --replica 10.0.0.11:8002 --replica 10.0.0.12:8001 \\
        --out /etc/nginx/conf.d/../nginx.conf

``--runtime-dir DIR`` puts the pid file, logs and temporary files under DIR
(for running nginx as an ordinary user, as the tests and benchmark do:
``nginx -c CONF -p DIR -g 'daemon off;'``); without it nginx's packaged
defaults apply. Timeouts in seconds.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.template"
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _address(value: str) -> str:
    """``host:port`` (IPv6 in brackets), else a clear error."""
    match = _ADDRESS.match(value)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise ValueError(f"not a host:port address: {value!r}")
    return value


def render(*, replicas: list[str], listen: str, runtime_dir: Path | None = None,
           read_timeout_s: int = 600, ws_timeout_s: int = 3600, max_fails: int = 1,
           fail_timeout_s: int = 5, workers: str = "auto") -> str:
    """The nginx configuration text.

    Raises:
        ValueError: no replica, or an address that is not ``host:port``.
    """
    if not replicas:
        raise ValueError("at least one replica is needed")
    servers = "\n".join(f"        server {_address(r)} max_fails={max_fails} fail_timeout={fail_timeout_s}s;"
                        for r in replicas)
    if runtime_dir is not None:
        run = runtime_dir.resolve()
        main = f"pid {run}/nginx.pid;\nerror_log {run}/error.log warn;"
        access_log = f"{run}/access.log"
        temp = "\n".join(f"    {kind}_temp_path {run}/tmp/{kind};"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    else:
        main, access_log, temp = "", "/var/log/nginx/clinical-access.log", ""
    text = TEMPLATE.read_text()
    for name, value in {"MAIN": main, "ACCESS_LOG": access_log, "TEMP_PATHS": temp, "SERVERS": servers,
                        "LISTEN": _address(listen) if ":" in listen else listen,
                        "TRIES": str(len(replicas)), "READ_TIMEOUT": str(read_timeout_s),
                        "WS_TIMEOUT": str(ws_timeout_s), "WORKERS": str(workers)}.items():
        text = text.replace(f"@{name}@", value)
    return text


def write(path: Path, **kwargs) -> Path:
    """Render into ``path`` (creating the runtime directories)."""
    runtime_dir = kwargs.get("runtime_dir")
    if runtime_dir is not None:
        (runtime_dir / "tmp").mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(**kwargs))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replica", action="append", required=True, help="host:port of a web replica (repeat)")
    parser.add_argument("--listen", default="0.0.0.0:80")
    parser.add_argument("--runtime-dir", type=Path)
    parser.add_argument("--read-timeout", type=int, default=600, help="HTTP and SSE (s)")
    parser.add_argument("--ws-timeout", type=int, default=3600, help="WebSockets (s)")
    parser.add_argument("--workers", default="auto", help="nginx worker processes")
    parser.add_argument("--out", type=Path, help="file to write (default: stdout)")
    args = parser.parse_args(argv)
    options = dict(replicas=args.replica, listen=args.listen, runtime_dir=args.runtime_dir,
                   read_timeout_s=args.read_timeout, ws_timeout_s=args.ws_timeout,
                   workers=args.workers)
    try:
        if args.out:
            write(args.out, **options)
        else:
            sys.stdout.write(render(**options))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
