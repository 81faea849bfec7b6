"""``python -m bench restart``: what a server costs the first clinician after
a start, cold and restarted with its prefix states on disk.

The server is ``python -m clinical.serve`` as ``make run`` starts it, on the
default model, with the example-cluster warm-up on and a prefix state
folder of its own (``INFERENCE_PREFIX_STATE_DIR``, empty at first):

1. **first start**: seconds from the process's start to ``/readyz`` 200
   (the engine loaded and every cluster prefix evaluated; the ``warming``
   answers before it are counted), then ``--sentences`` translations by one
   clinician over one socket, 0.5 s apart (:func:`bench.ward.one_clinician`):
   their TTFT P50 is the warm baseline; the first sentence goes last, so
   its warm TTFT is measured too;
2. **restart**: the same server started again on the same folder: seconds
   to ``/readyz`` 200 (the prefixes read back from disk), the first
   translation's TTFT, then the rest of the sentences.

Targets: ``/readyz`` 200 within 60 s of a restart; the restarted server's
first TTFT within 1.5x the warm P50. Writes ``--out`` ``.md`` and ``.json``
(default ``docs/benchmarks/restart``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.corpora import ROOT
from bench.stats import percentiles, report_write

READY_WITHIN_S = 60  # target: /readyz 200 after a restart
FIRST_TTFT_RATIO = 1.5  # target: first TTFT after a restart / warm TTFT P50


def readyz_timeline(base_url: str, started: float, timeout_s: float) -> dict:
    """Poll ``/readyz`` (every 0.5 s) until 200. Returns seconds from
    ``started`` (a ``time.perf_counter()``) to the first ``warming`` answer
    and to the 200, and the warming answers seen."""
    from bench.processes import readyz_wait

    offset = time.perf_counter() - started
    answers: list[dict] = []
    ready_s, _ = readyz_wait(base_url, 200, timeout_s, interval_s=0.5, answers=answers)
    warming = [answer["s"] for answer in answers if answer.get("status") == "warming"]
    return {"ready_s": round(offset + ready_s, 1),
            "warming_from_s": round(offset + warming[0], 1) if warming else None,
            "warming_answers": len(warming)}


def run_server(name: str, env: dict[str, str], session: str, texts: list[str], log_dir: Path,
               timeout_s: float) -> dict:
    """One server's life: start, ready, ``texts`` translated, stopped."""
    from bench.processes import DaphneServer
    from bench.ward import WARMED, one_clinician

    started = time.perf_counter()
    server = DaphneServer(env, log_dir / f"daphne-{name}.log")
    try:
        server.wait_ready(300)
        timeline = readyz_timeline(server.base_url, started, timeout_s)
        rows = asyncio.run(one_clinician(server, session, [text for _, text in texts]))
        for (index, _), row in zip(texts, rows):
            row["sentence"] = index
        warmed = [line for line in server.logs().splitlines() if WARMED in line]
    finally:
        server.stop()
    return {"server": name, **timeline, "warm_up_log": warmed[-1].split("] ", 1)[-1] if warmed else None,
            "rows": rows}


def summary(result: dict) -> dict:
    ok = [r["ttft_ms"] for r in result["rows"] if r["ttft_ms"] is not None and not r["error"]]
    ttft = percentiles(ok)
    return {"server": result["server"], "ready_s": result["ready_s"], "warming_from_s": result["warming_from_s"],
            "warming_answers": result["warming_answers"], "warm_up_log": result["warm_up_log"],
            "n": len(result["rows"]), "errors": len(result["rows"]) - len(ok),
            "first_ttft_ms": result["rows"][0]["ttft_ms"] if result["rows"] else None,
            "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"]}


def render(report: dict) -> str:
    lines = [
        "# A start and a restart: what the first clinician waits", "",
        f"Command: `{report['command']}`. `python -m clinical.serve` as `make run` starts it ({report['engine']}), "
        "the example-cluster warm-up on, a prefix state folder of its own (empty at the first start). "
        f"{report['sentences']} sentences (first sentences of Cochrane val abstracts) by one clinician over one "
        "socket, 0.5 s apart, after `/readyz` answered 200 (the first start sends the first sentence last). Ready: "
        "seconds from the process's start. Host: this project's 2-core machine.", "",
        "| server | /readyz 200 (s) | warming from (s) | warm-up | n | errors | first TTFT (ms) | "
        "TTFT P50 / P95 (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report["summary"]:
        lines.append(f"| {s['server']} | {s['ready_s']} | {s['warming_from_s'] or '–'} | {s['warm_up_log'] or '–'} "
                     f"| {s['n']} | {s['errors']} | {s['first_ttft_ms']} | {s['ttft_p50']} / {s['ttft_p95']} |")
    by = {s["server"]: s for s in report["summary"]}
    if {"first start", "restart"} <= set(by) and by["first start"]["ttft_p50"]:
        first, again = by["first start"], by["restart"]
        ratio = again["first_ttft_ms"] / first["ttft_p50"]
        lines += ["", f"Restart: `/readyz` 200 after {again['ready_s']} s (target: at most {READY_WITHIN_S} s); "
                      f"the first translation's TTFT is {ratio:.2f}x the warm P50 of the first start "
                      f"(target: at most {FIRST_TTFT_RATIO}x)"]
        same = report.get("first_sentence_warm_ttft_ms")
        lines[-1] += (f", and {again['first_ttft_ms'] / same:.2f}x the same sentence's TTFT on the warm first start "
                      f"({same} ms)." if same else ".")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench restart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=10)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--timeout-s", type=float, default=1800, help="most seconds to wait for /readyz 200")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "restart"))
    args = parser.parse_args(argv)
    from bench.drivers import prepare_stack, redis_cleanup
    from bench.ward import ttft_sentences

    scratch = Path(tempfile.mkdtemp(prefix="restart-"))
    database_url = args.database_url or f"sqlite:///{scratch}/db.sqlite3"
    run = uuid.uuid4().hex[:8]
    # A clinician per server: the per-user rate limit counts across them.
    env, sessions = prepare_stack(database_url, 2, run)
    env |= {"PROMPT_CLUSTER_WARMUP": "1", "INFERENCE_PREFIX_STATE_DIR": str(scratch / "prefix-states")}
    texts = list(enumerate(ttft_sentences(args.sentences)))
    orders = {"first start": texts[1:] + texts[:1], "restart": texts}
    results = []
    try:
        for (name, order), session in zip(orders.items(), sessions):
            results.append(run_server(name, env, session, order, scratch, args.timeout_s))
            print(f"[restart] {name}: {summary(results[-1])}", flush=True)
    finally:
        redis_cleanup(run)
    from inference.weights import default_gguf_path

    warm_first = [row["ttft_ms"] for row in results[0]["rows"] if row["sentence"] == 0] if results else []
    report = {"command": "python -m bench restart " + " ".join(sys.argv[2:] if argv is None else argv),
              "engine": f"llama.cpp, {default_gguf_path().name}", "sentences": len(texts),
              "first_sentence_warm_ttft_ms": warm_first[0] if warm_first else None,
              "summary": [summary(r) for r in results], "runs": results}
    out = Path(args.out)
    report_write(out.parent, out.name, report, render(report))
    print(render(report))
    return 0
