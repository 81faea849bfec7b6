"""Translate laymaker-dev sentences through the full stack and report them.

Starts a real Daphne on a scratch SQLite database, logs in through the login
form, sends each sentence over the WebSocket one after another, and writes
the outputs beside the clinicians' reference simplifications, with the
figures measured by the server (TTFT, total, tokens/s, confidence) and by
the client (time from sending the frame to the first token frame).

    .venv/bin/python -m bench.laymaker_sample --n 10 --out docs/quality/laymaker-sample

writes ``<out>.json`` and ``<out>.md``. Needs Redis at ``REDIS_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from bench.shared_data import shared_data_file

ROOT = Path(__file__).resolve().parent.parent
USERNAME, PASSWORD = "bench-clinician", "bench-password-not-for-production-1"


def changed_sentences(n: int) -> list[dict[str, str]]:
    """The first ``n`` laymaker-dev rows the clinicians changed."""
    with open(shared_data_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["ORIGINAL"].strip() != r["REFERENCE"].strip()]
    return rows[:n]


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([py, "manage.py", "shell", "-c",
                    "from django.contrib.auth.models import Group, User;"
                    f"u = User.objects.filter(username='{USERNAME}').first() or "
                    f"User.objects.create_user('{USERNAME}', password='{PASSWORD}');"
                    "u.groups.add(Group.objects.get_or_create(name='Clinician')[0])"],
                   cwd=ROOT, env=env, check=True)
    return subprocess.Popen([py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "clinical.asgi:application"], cwd=ROOT, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def log_in(base: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(base + "/accounts/login/", timeout=2)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with httpx.Client(base_url=base) as client:
        ready = client.get("/readyz", timeout=600)  # loads the model; not timed
        if ready.status_code != 200:
            raise RuntimeError(f"engine not ready: {ready.text}")
        client.get("/accounts/login/")
        response = client.post("/accounts/login/", data={
            "username": USERNAME, "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        if response.status_code != 302:
            raise RuntimeError(f"login failed with HTTP {response.status_code}")
        return client.cookies["sessionid"]


async def run(base: str, session: str, rows: list[dict[str, str]]) -> tuple[float, list[dict]]:
    ws = base.replace("http", "ws", 1) + "/ws/translate/"
    results = []
    opened = time.perf_counter()
    async with connect(ws, additional_headers={"Cookie": f"sessionid={session}", "Origin": base},
                       max_size=None) as socket:
        for row in rows:
            sent = time.perf_counter()
            first_token = None
            await socket.send(json.dumps({"type": "translate", "text": row["ORIGINAL"]}))
            while True:
                frame = json.loads(await socket.recv())
                if frame["type"] == "token" and first_token is None:
                    first_token = time.perf_counter()
                if frame["type"] in ("done", "error"):
                    break
            results.append({
                "id": row["ID"], "original": row["ORIGINAL"], "reference": row["REFERENCE"],
                "client_ttft_ms": round((first_token - sent) * 1000, 1) if first_token else None,
                "client_total_ms": round((time.perf_counter() - sent) * 1000, 1),
                **{k: frame.get(k) for k in ("status", "ttft_ms", "total_ms", "queue_wait_ms",
                                              "tokens_in", "tokens_out", "tokens_per_s", "confidence")},
                "error": frame.get("message") if frame["type"] == "error" else None,
            })
    return (time.perf_counter() - opened) * 1000, results


def fetch_outputs(env: dict[str, str]) -> dict[str, str]:
    """The stored outputs, read back from the database the server wrote."""
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                          "import json; from clinical.models import Translation;"
                          "print(json.dumps({t.input_text: t.output_text for t in Translation.objects.all()}))"],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def write_report(out: Path, meta: dict, results: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    done = [r for r in results if r["status"] == "completed"]

    def med(key: str, digits: int = 1) -> str:
        values = [r[key] for r in done if r[key] is not None]
        return f"{statistics.median(values):,.{digits}f}" if values else "n/a"

    lines = [
        f"# laymaker-dev sample: {meta['model']}",
        "",
        f"Measured {meta['date']} on {meta['machine']}; engine `{meta['engine']}`, precision "
        f"`{meta['precision']}`, full stack (Daphne, WebSocket, SQLite, Redis). "
        f"Model load: {meta['load_ms']} ms. Command: `{meta['command']}`.",
        "",
        f"Medians over {len(done)} of {len(results)} sentences: server TTFT {med('ttft_ms')} ms, "
        f"client TTFT {med('client_ttft_ms')} ms, total {med('total_ms')} ms, "
        f"{med('tokens_per_s')} tokens/s, confidence {med('confidence', 3)}.",
        "",
        "| ID | TTFT ms | total ms | tokens | tok/s | confidence |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['id']} | {r['ttft_ms']} | {r['total_ms']} | {r['tokens_out']} | "
                     f"{(r['tokens_per_s'] or 0):.1f} | {(r['confidence'] or 0):.3f} |")
    lines.append("")
    for r in results:
        lines += [f"## Sentence {r['id']}", "", f"**Original:** {r['original']}", "",
                  f"**Clinicians' reference:** {r['reference']}", "",
                  f"**Model output** (confidence {(r['confidence'] or 0):.3f}):", "",
                  "> " + (r.get("output") or "").replace("\n", "\n> "), ""]
    out.with_suffix(".md").write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--engine", default="llamacpp")
    parser.add_argument("--model", default="", help="INFERENCE_MODEL (default: the engine's default)")
    parser.add_argument("--out", default="docs/quality/laymaker-sample")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--db", default="", help="SQLite file to use and keep (default: a scratch file)")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="laymaker-"))
    db = Path(args.db).resolve() if args.db else scratch / "db.sqlite3"
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{db}",
               INFERENCE_ENGINE=args.engine, INFERENCE_MODEL=args.model,
               CHANNEL_PREFIX=f"bench-{os.getpid()}", PYTHONUNBUFFERED="1")
    log = scratch / "daphne.log"
    server = start_server(env, args.port, log)
    base = f"http://127.0.0.1:{args.port}"
    try:
        session = log_in(base)
        _, results = asyncio.run(run(base, session, changed_sentences(args.n)))
    finally:
        server.terminate()
        server.wait(timeout=30)
    outputs = fetch_outputs(env)
    for r in results:
        r["output"] = outputs.get(r["original"].strip(), "")
    text = log.read_text(errors="replace")
    loaded = re.search(r"engine loaded model=(\S+).*? in (\d+) ms", text)
    precision = re.search(r"precision=(\S+)", text)
    meta = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores, no GPU",
        "engine": args.engine, "model": loaded.group(1) if loaded else args.model,
        "precision": precision.group(1) if precision else "q4_k_m" if not args.model else "",
        "load_ms": int(loaded.group(2)) if loaded else None,
        "command": "python -m bench.laymaker_sample " + " ".join(sys.argv[1:]),
    }
    write_report(Path(args.out), meta, results)
    leaked = [r["id"] for r in results if r["original"].strip() in text]
    print(f"wrote {args.out}.md and .json; {len(results)} sentences; PHI in server log: {leaked or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
