"""Throughput with 1 and with 2 web replicas behind nginx.

For each replica count (1, then 2) this starts that many ``python -m
clinical.serve`` processes (each with its own engine) and Debian's nginx in
front (deploy/render_nginx.py, one worker, round robin), on a scratch
PostgreSQL database (SQLite when no PostgreSQL answers) and the Redis at
``REDIS_URL``. At each concurrency level (1, 2, 4 clients) every client
opens one WebSocket through nginx (so nginx spreads the clients over the
replicas) and translates its share of the same laymaker-dev sentences one
after another. Reported per level: completed translations/s and output
tokens/s over the level's wall time, TTFT P50/P95 (server-measured), and
the ratio 2 replicas / 1 replica, both measured in the same run.

    .venv/bin/python -m bench replicas --n 12 --out docs/bench/replicas

writes ``<out>.json`` and ``<out>.md``. ``--engine fake`` exercises the
harness in seconds. On a machine with fewer cores than replicas need, the
replicas compete for the same cores, so a ratio below 1 is expected there.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from bench.corpora import corpus_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy"))
import render_nginx  # noqa: E402

USERNAME, PASSWORD = "bench-clinician", "bench-password-not-for-production-1"
LEVELS = (1, 2, 4)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def laymaker(n: int) -> list[str]:
    """The first ``n`` ORIGINAL sentences of laymaker-dev.csv."""
    with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        return [row["ORIGINAL"].strip() for row in csv.DictReader(handle)][:n]


def scratch_database(scratch: Path) -> tuple[str, callable]:
    """``(DATABASE_URL, drop)``: a new PostgreSQL database when one answers at
    ``TEST_POSTGRES_URL``, else a SQLite file."""
    base = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/clinical").rsplit("/", 1)[0]
    name = f"clinical_bench_replicas_{uuid.uuid4().hex[:8]}"
    try:
        import psycopg

        with psycopg.connect(base + "/postgres", autocommit=True, connect_timeout=2) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception:  # noqa: BLE001 - no PostgreSQL: SQLite
        return f"sqlite:///{scratch / 'db.sqlite3'}", lambda: None

    def drop() -> None:
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return f"{base}/{name}", drop


class Stack:
    """``replicas`` clinical.serve processes and nginx in front."""

    def __init__(self, env: dict[str, str], replicas: int, scratch: Path) -> None:
        self.processes: list[subprocess.Popen] = []
        self.ports = [free_port() for _ in range(replicas)]
        for index, port in enumerate(self.ports):
            log = open(scratch / f"web-{replicas}-{index}.log", "wb")
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "clinical.serve", "--host", "127.0.0.1", "--port", str(port),
                 "--proxy-headers"], cwd=ROOT, env=env | {"REPLICA_ID": f"bench-{index}"},
                stdout=log, stderr=subprocess.STDOUT))
        for port in self.ports:
            wait_ready(f"http://127.0.0.1:{port}", timeout_s=900)
        self.port = free_port()
        directory = scratch / f"nginx-{replicas}"
        conf = render_nginx.write(directory / "nginx.conf", replicas=[f"127.0.0.1:{p}" for p in self.ports],
                                  listen=f"127.0.0.1:{self.port}", runtime_dir=directory, workers="1")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.processes.append(subprocess.Popen(
            [nginx, "-c", str(conf), "-p", str(directory), "-e", str(directory / "error.log"),
             "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        self.base = f"http://127.0.0.1:{self.port}"
        wait_ready(self.base, timeout_s=30)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_ready(base: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{base} not ready after {timeout_s} s")


def log_in(base: str) -> str:
    with httpx.Client(base_url=base, timeout=60) as client:
        client.get("/accounts/login/")
        response = client.post("/accounts/login/", data={
            "username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        if response.status_code != 302:
            raise RuntimeError(f"login failed with HTTP {response.status_code}")
        return client.cookies["sessionid"]


async def client_run(base: str, session: str, texts: list[str]) -> list[dict]:
    """One client: one socket through nginx, its texts one after another."""
    results = []
    async with connect(base.replace("http", "ws", 1) + "/ws/translate/", max_size=None, open_timeout=60,
                       additional_headers={"Cookie": f"sessionid={session}", "Origin": base}) as ws:
        for text in texts:
            await ws.send(json.dumps({"type": "translate", "text": text}))
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] in ("done", "error", "cancelled"):
                    break
            results.append(frame)
    return results


async def level_run(base: str, session: str, texts: list[str], clients: int) -> dict:
    """All ``texts`` over ``clients`` concurrent clients (round robin)."""
    shares = [texts[i::clients] for i in range(clients)]
    started = time.perf_counter()
    per_client = await asyncio.gather(*(client_run(base, session, share) for share in shares if share))
    wall_s = time.perf_counter() - started
    frames = [f for results in per_client for f in results]
    done = [f for f in frames if f["type"] == "done"]
    ttfts = sorted(f["ttft_ms"] for f in done if f.get("ttft_ms") is not None)
    tokens = sum(f.get("tokens_out") or 0 for f in done)
    return {
        "clients": clients, "requests": len(frames), "completed": len(done), "wall_s": round(wall_s, 2),
        "translations_per_s": round(len(done) / wall_s, 3), "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / wall_s, 2),
        "ttft_p50_ms": round(statistics.median(ttfts), 1) if ttfts else None,
        "ttft_p95_ms": round(ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))], 1) if ttfts else None,
        "errors": sorted({f.get("code", f["type"]) for f in frames if f["type"] != "done"}),
    }


def measure(env: dict[str, str], replicas: int, texts: list[str], scratch: Path) -> dict:
    stack = Stack(env, replicas, scratch)
    try:
        session = log_in(stack.base)
        # Warm-up, not timed: one request on each replica's own port.
        for port in stack.ports:
            asyncio.run(client_run(f"http://127.0.0.1:{port}", session, texts[:1]))
        load_before = os.getloadavg()[0]
        levels = [asyncio.run(level_run(stack.base, session, texts, clients)) for clients in LEVELS]
        load_after = os.getloadavg()[0]
    finally:
        stack.stop()
    return {"replicas": replicas, "levels": levels,
            "load_average_1min": [round(load_before, 2), round(load_after, 2)]}


def write_report(out: Path, meta: dict, runs: list[dict]) -> dict:
    one, two = runs
    ratios = []
    for a, b in zip(one["levels"], two["levels"]):
        ratios.append({
            "clients": a["clients"],
            "translations_per_s": round(b["translations_per_s"] / a["translations_per_s"], 2)
            if a["translations_per_s"] else None,
            "output_tokens_per_s": round(b["output_tokens_per_s"] / a["output_tokens_per_s"], 2)
            if a["output_tokens_per_s"] else None,
        })
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": runs, "ratio_2_over_1": ratios},
                                                   indent=2) + "\n")
    lines = [
        "# Throughput with 1 and 2 replicas behind nginx",
        "",
        f"Measured {meta['date']} on {meta['machine']}; engine `{meta['engine']}` ({meta['model']}), "
        f"{meta['sentences']} laymaker-dev sentences per level, at most {meta['max_tokens']} output tokens, "
        f"full stack (nginx, `clinical.serve`, WebSockets, {meta['database']}, Redis). "
        f"Command: `{meta['command']}`.",
        "",
        "Each client holds one socket through nginx (round robin, no sticky sessions), so 1 client uses "
        "one replica and 2 or 4 clients are spread over both. Throughput = completed translations "
        "(or output tokens) / wall time of the level.",
        "",
        "| clients | 1 replica: transl./s | tokens/s | TTFT P50 ms | 2 replicas: transl./s | tokens/s | "
        "TTFT P50 ms | ratio transl./s | ratio tokens/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a, b, r in zip(one["levels"], two["levels"], ratios):
        lines.append(f"| {a['clients']} | {a['translations_per_s']:.3f} | {a['output_tokens_per_s']:.1f} | "
                     f"{a['ttft_p50_ms']} | {b['translations_per_s']:.3f} | {b['output_tokens_per_s']:.1f} | "
                     f"{b['ttft_p50_ms']} | **{r['translations_per_s']}×** | **{r['output_tokens_per_s']}×** |")
    errors = sorted({e for run in runs for level in run["levels"] for e in level["errors"]})
    loads = "; ".join(f"{run['replicas']} replica(s): {run['load_average_1min'][0]} before, "
                      f"{run['load_average_1min'][1]} after" for run in runs)
    lines += ["", f"Requests that did not complete: {errors or 'none'}. "
              f"1-minute load average of the machine around each sweep: {loads} "
              f"({meta['machine'].split(',')[0]}; anything above that count means other work "
              "was competing for the CPU).", "", "## Reading it", "", meta["note"], "",
              "With 1 client only one replica serves (the socket stays on the replica it reached), "
              "so the 1-client ratio would be 1.0 on a quiet machine; how far it is from 1.0 shows "
              "the run-to-run noise of this measurement.", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    return {"ratios": ratios}


NOTE_CPU = (
    "This machine has {cores} CPU cores and no GPU. Each replica runs its own engine on the CPU, "
    "so two replicas compete for the same cores: the second replica adds no compute, only a "
    "second engine (and its memory and scheduling overhead), and a ratio below 1 is the expected "
    "result here, not a defect of the load balancing. What scales is one replica per GPU (or per "
    "node): each replica then has its own accelerator. The shared parts (nginx, PostgreSQL, "
    "Redis, the web process) can be measured alone with `--engine fake`, an engine that does no "
    "compute. The same harness, run on a multi-GPU node with `--engine vllm`, measures the real "
    "scaling; this project has no such node.")
NOTE_FAKE = (
    "`--engine fake` streams the input back word by word without computing anything, so this "
    "measures the web tier alone (nginx, Daphne/Django/Channels, PostgreSQL, Redis) on {cores} "
    "CPU cores: each replica is one Python process, so two replicas can use two cores where one "
    "uses about one.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench replicas", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=12, help="laymaker-dev sentences per concurrency level")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "llamacpp", "fake"])
    parser.add_argument("--model", default="", help="INFERENCE_MODEL (default: SmolLM2 for vllm/llamacpp)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", default="docs/bench/replicas")
    args = parser.parse_args(argv)

    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        parser.error("Debian's nginx is needed (scripts/setup.sh installs it)")
    model = args.model
    if not model and args.engine != "fake":
        sys.path.insert(0, str(ROOT))
        from inference.weights import smollm2_gguf_path, smollm2_hf_path

        model = str(smollm2_hf_path() if args.engine == "vllm" else smollm2_gguf_path())
    scratch = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    database_url, drop = scratch_database(scratch)
    run_id = uuid.uuid4().hex[:8]
    env = dict(os.environ, DATABASE_URL=database_url, INFERENCE_ENGINE=args.engine, INFERENCE_MODEL=model,
               MAX_OUTPUT_TOKENS=str(args.max_tokens), CONFIDENCE_THRESHOLD="0",  # no re-runs
               TRANSLATE_RATE_PER_USER="100000/minute", SOCKET_FRAME_RATE="1000/second",
               USER_MAX_SOCKETS="0", USER_MAX_CONCURRENT_TRANSLATIONS="0",  # one clinician, many clients
               ENGINE_MAX_QUEUE="0", CHANNEL_PREFIX=f"bench-{run_id}", CACHE_PREFIX=f"bench-{run_id}",
               CELERY_KEY_PREFIX=f"bench-{run_id}:", PYTHONUNBUFFERED="1")
    texts = laymaker(args.n)
    try:
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([py, "manage.py", "shell", "-c",
                        "from django.contrib.auth.models import Group, User;"
                        f"User.objects.create_user('{USERNAME}', password='{PASSWORD}')"
                        ".groups.add(Group.objects.get_or_create(name='Clinician')[0])"],
                       cwd=ROOT, env=env, check=True)
        runs = [measure(env, replicas, texts, scratch) for replicas in (1, 2)]
    finally:
        drop()
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores, no GPU",
            "engine": args.engine, "model": Path(model).name if model else "fake-echo",
            "sentences": len(texts), "max_tokens": args.max_tokens,
            "database": "PostgreSQL" if database_url.startswith("postgres") else "SQLite",
            "command": "python -m bench replicas " + " ".join(argv if argv is not None else sys.argv[1:]),
            "note": (NOTE_FAKE if args.engine == "fake" else NOTE_CPU).format(cores=os.cpu_count())}
    summary = write_report(Path(args.out), meta, runs)
    print(f"wrote {args.out}.md and .json; 2/1 replica ratio by clients: "
          + ", ".join(f"{r['clients']}: {r['translations_per_s']}x transl., {r['output_tokens_per_s']}x tokens"
                      for r in summary["ratios"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
