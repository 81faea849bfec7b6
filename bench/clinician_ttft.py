"""``python -m bench clinician_ttft``: what one clinician waits for the
first word, through the full stack, on the default model and the
product's prompt, against the one-example prompt in the same run.

Starts the product's server as ``make run`` does (``python -m
clinical.serve``: Daphne, the engine preload and the cluster warm-up),
default model, default settings, once per configuration:

* ``clusters``: the product's default (``PROMPT_CLUSTERS`` x
  ``PROMPT_CLUSTER_EXAMPLES`` cluster prefixes, warmed after start);
* ``one-example``: ``PROMPT_EXAMPLES=0``, the one-example prompt
  (``2026-11-22.3``), the baseline.

Once ``/readyz`` answers and the warm-up has logged its end, one logged-in
clinician sends ``--sentences`` sentences one after another over one
WebSocket. TTFT is measured at the client (translate frame sent → first
``token`` frame, ms) and read from the server's ``done`` frame; the
``done`` frame's ``tokens_in`` gives the prompt length. The sentences are
the first sentences (at most 40 words) of Cochrane val abstracts: real
text that is not in the example pool. No re-run worker runs (the ward
benchmark measures the lane's cost); the glossary runs as in the product.

Writes ``<out>.json`` and ``<out>.md`` (default
``docs/benchmarks/clinician-ttft``). Needs Redis (``REDIS_URL``) and uses
``DATABASE_URL`` when set, else a scratch SQLite file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.workloads import ROOT

CONFIGS = {"clusters": {}, "one-example": {"PROMPT_EXAMPLES": "0"}}
WARMED = "example cluster prefixes warmed"


def sentences(n: int) -> list[str]:
    """First sentences (<= 40 words) of the Cochrane val abstracts, in order."""
    from bench.quality import cochrane_pairs
    from inference.examples import split_sentences

    picked = []
    for source, _ in cochrane_pairs():
        first = split_sentences(source)[0] if source.strip() else ""
        if 6 <= len(first.split()) <= 40:
            picked.append(first)
        if len(picked) == n:
            break
    return picked


async def one_clinician(server, session: str, texts: list[str]) -> list[dict]:
    """Send ``texts`` one after another over one socket; per request the
    client TTFT (ms), the server's TTFT (ms) and prompt tokens."""
    from websockets.asyncio.client import connect

    results = []
    async with connect(server.ws_url + "/ws/translate/", open_timeout=60, max_size=2**22,
                       additional_headers={"Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        for text in texts:
            sent = time.perf_counter()
            first, row = None, {"error": None}
            await socket.send(json.dumps({"type": "translate", "text": text}))
            async for message in socket:
                frame = json.loads(message)
                kind = frame.get("type")
                if kind == "token" and first is None:
                    first = time.perf_counter()
                elif kind == "done":
                    row.update(server_ttft_ms=frame.get("ttft_ms"), tokens_in=frame.get("tokens_in"),
                               tokens_out=frame.get("tokens_out"))
                    break
                elif kind in ("error", "cancelled"):
                    row["error"] = f"{kind}:{frame.get('code', '')}"
                    break
            row["ttft_ms"] = round((first - sent) * 1000, 1) if first is not None else None
            row["e2e_ms"] = round((time.perf_counter() - sent) * 1000, 1)
            results.append(row)
            await asyncio.sleep(0.5)  # a clinician reads before the next one; the glossary job runs
    return results


def run_config(name: str, env: dict[str, str], session: str, texts: list[str], log_dir: Path,
               warmup_timeout_s: float) -> dict:
    import httpx
    from django.db import connection
    from django.utils import timezone

    from bench.processes import DaphneServer
    from clinical.models import Translation

    since = timezone.now()
    server = DaphneServer(env | CONFIGS[name], log_dir / f"daphne-{name}.log")
    try:
        server.wait_ready(300)
        started = time.perf_counter()
        ready = httpx.get(server.base_url + "/readyz", timeout=600)
        if ready.status_code != 200:
            raise RuntimeError(f"not ready: {ready.text[:300]}")
        warm_s = None
        if name == "clusters":
            deadline = time.monotonic() + warmup_timeout_s
            while WARMED not in server.logs() and time.monotonic() < deadline:
                time.sleep(1)
            warm_s = round(time.perf_counter() - started, 1) if WARMED in server.logs() else None
        rows = asyncio.run(one_clinician(server, session, texts))
    finally:
        server.stop()
    versions = sorted(set(Translation.objects.filter(created_at__gte=since).values_list("prompt_version", flat=True)))
    connection.close()
    return {"config": name, "warmup_s": warm_s, "rows": rows, "env": CONFIGS[name], "prompt_versions": versions}


def summary(result: dict) -> dict:
    from bench.stats import percentiles

    ok = [r for r in result["rows"] if r["ttft_ms"] is not None and not r["error"]]
    ttft = percentiles([r["ttft_ms"] for r in ok])
    server = percentiles([r["server_ttft_ms"] for r in ok if r.get("server_ttft_ms") is not None])
    e2e = percentiles([r["e2e_ms"] for r in ok])
    tokens = percentiles([r["tokens_in"] for r in ok if r.get("tokens_in") is not None])
    return {"config": result["config"], "n": len(result["rows"]), "errors": len(result["rows"]) - len(ok),
            "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"], "server_ttft_p50": server["p50"],
            "server_ttft_p95": server["p95"], "e2e_p50": e2e["p50"], "e2e_p95": e2e["p95"],
            "prompt_tokens_mean": tokens["mean"], "warmup_s": result["warmup_s"],
            "prompt_versions": result["prompt_versions"]}


def render(report: dict) -> str:
    lines = [
        "# One clinician through the full stack: time to the first word", "",
        f"Command: `{report['command']}`. `python -m clinical.serve` (as `make run` starts it), default model, "
        f"default settings except the configuration's; {report['sentences']} sentences (first sentences of "
        "Cochrane val abstracts, not in the example pool) sent one after another by one logged-in clinician over "
        "one WebSocket, 0.5 s apart (another clinician for each configuration, so the per-user rate limit does not "
        "carry over); no re-run worker. TTFT at the client: translate frame sent → first token "
        "frame. Host: this project's 2-core machine.", "",
        "| configuration | n | errors | TTFT P50 / P95 (ms) | server TTFT P50 / P95 (ms) | E2E P50 / P95 (ms) | "
        "prompt tokens (mean) | warm-up (s) | prompt version |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["summary"]:
        lines.append(f"| {s['config']} | {s['n']} | {s['errors']} | {s['ttft_p50']} / {s['ttft_p95']} | "
                     f"{s['server_ttft_p50']} / {s['server_ttft_p95']} | {s['e2e_p50']} / {s['e2e_p95']} | "
                     f"{s['prompt_tokens_mean']} | {s['warmup_s'] if s['warmup_s'] is not None else '–'} | "
                     f"{', '.join(s['prompt_versions'])} |")
    by = {s["config"]: s for s in report["summary"]}
    if "clusters" in by and "one-example" in by and by["one-example"]["ttft_p50"]:
        c, o = by["clusters"], by["one-example"]
        lines += ["", f"Ratio clusters / one-example: TTFT P50 {c['ttft_p50'] / o['ttft_p50']:.2f}x, P95 "
                      f"{c['ttft_p95'] / o['ttft_p95']:.2f}x. The cluster prompt is {c['prompt_tokens_mean']:.0f} "
                      f"tokens long on average against {o['prompt_tokens_mean']:.0f}, but all except the sentence "
                      "sit in a cached prefix restored from a KV snapshot."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench clinician_ttft", description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--warmup-timeout-s", type=float, default=600)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "clinician-ttft"))
    args = parser.parse_args(argv)
    from bench.latency_stack import prepare_stack, redis_cleanup

    scratch = tempfile.mkdtemp(prefix="clinician-ttft-")
    database_url = args.database_url or f"sqlite:///{scratch}/db.sqlite3"
    run = uuid.uuid4().hex[:8]
    configs = [c for c in args.configs.split(",") if c]
    # A clinician of its own per configuration: the per-user rate limit
    # (TRANSLATE_RATE_PER_USER, 30/minute) counts across the runs, and a
    # fast host sent the second run's 11th sentence within the first's minute.
    env, sessions = prepare_stack(database_url, len(configs), run)
    env |= {"GLOSSARY_GENERATE": os.environ.get("GLOSSARY_GENERATE", "1")}
    texts = sentences(args.sentences)
    results = []
    try:
        for name, session in zip(configs, sessions):
            results.append(run_config(name, env, session, texts, Path(scratch), args.warmup_timeout_s))
    finally:
        redis_cleanup(run)
    report = {"command": "python -m bench clinician_ttft " + " ".join(sys.argv[1:] if argv is None else argv),
              "sentences": len(texts), "summary": [summary(r) for r in results], "runs": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(render(report), encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
