"""Per-request timings and their summary, with the names ``vllm bench serve``
uses.

Every driver turns one request into a :class:`RequestResult`: the client's
send time and the arrival time of each output token (seconds, from
``time.perf_counter()`` in the benchmark process). :func:`summarize` turns a
run's results into:

* TTFT (time to first token): first token arrival − send, ms;
* TPOT (time per output token after the first):
  ``(E2E − TTFT) / (output_tokens − 1)`` per request, ms;
* ITL (inter-token latency): every gap between two consecutive token
  arrivals, pooled over all requests, ms (where one arrival carries several
  tokens, the gap is counted once per arrival);
* E2E (end to end): last byte − send, ms;

each at P50/P95/P99 (linear interpolation, ``numpy.percentile``), plus the
aggregate output tokens/s of the run (all output tokens / wall time from the
first send to the last completion) and the error count.

:func:`report_write` puts a benchmark's results where the reports live:
the figures as ``<name>.json`` and the readable report as ``<name>.md``,
side by side in one folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PERCENTILES = (50, 95, 99)


@dataclass
class RequestResult:
    """One request as the client saw it.

    Attributes:
        sent_s: ``perf_counter()`` when the request was sent (s).
        token_times_s: ``perf_counter()`` at each arrival carrying output
            text, in order (s).
        end_s: ``perf_counter()`` when the response was complete (s).
        output_tokens: tokens generated, as counted by the engine or server
            (falls back to the number of arrivals).
        prompt_tokens: prompt length in tokens where the driver learns it.
        error: ``""`` when the request succeeded, else a short description.
        extra: driver-specific figures (ms), summarised like the others.
    """

    sent_s: float
    token_times_s: list[float] = field(default_factory=list)
    end_s: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.token_times_s)

    @property
    def ttft_ms(self) -> float:
        return (self.token_times_s[0] - self.sent_s) * 1000

    @property
    def e2e_ms(self) -> float:
        return (self.end_s - self.sent_s) * 1000

    @property
    def tpot_ms(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    def itl_ms(self) -> list[float]:
        times = self.token_times_s
        return [(b - a) * 1000 for a, b in zip(times, times[1:])]


def percentiles(values: list[float]) -> dict[str, float | None]:
    """``{"p50", "p95", "p99", "mean"}`` of ``values`` in their unit (None
    for an empty list)."""
    if not values:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    array = np.asarray(values, dtype=float)
    out = {f"p{q}": round(float(np.percentile(array, q)), 2) for q in PERCENTILES}
    out["mean"] = round(float(array.mean()), 2)
    return out


def summarize(results: list[RequestResult], wall_s: float | None = None) -> dict:
    """Summary of one run (one driver, engine, workload and load level).

    Args:
        results: every request of the run, failed ones included.
        wall_s: the run's wall time (s); default: first send to last end.

    Returns:
        ``{"requests", "errors", "error_samples", "output_tokens",
        "prompt_tokens_mean", "wall_s", "output_tokens_per_s", "ttft_ms",
        "tpot_ms", "itl_ms", "e2e_ms"}`` and any ``extra`` keys, the last
        ones as :func:`percentiles` dicts (ms).
    """
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    if wall_s is None:
        wall_s = (max(r.end_s for r in results) - min(r.sent_s for r in results)) if results else 0.0
    tokens = sum(r.output_tokens for r in ok)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    extra_keys = sorted({key for r in ok for key in r.extra})
    return {
        "requests": len(results),
        "errors": len(failed),
        "error_samples": sorted({r.error or "no tokens" for r in failed})[:3],
        "output_tokens": tokens,
        "prompt_tokens_mean": round(sum(prompts) / len(prompts), 1) if prompts else None,
        "wall_s": round(wall_s, 3),
        "output_tokens_per_s": round(tokens / wall_s, 2) if wall_s > 0 else None,
        "ttft_ms": percentiles([r.ttft_ms for r in ok]),
        "tpot_ms": percentiles([t for r in ok if (t := r.tpot_ms) is not None]),
        "itl_ms": percentiles([gap for r in ok for gap in r.itl_ms()]),
        "e2e_ms": percentiles([r.e2e_ms for r in ok]),
        **{key: percentiles([r.extra[key] for r in ok if r.extra.get(key) is not None]) for key in extra_keys},
    }


def report_write(out: Path, name: str, report: dict, markdown: str) -> Path:
    """Write ``out/<name>.json`` (``report``, indented one space) and
    ``out/<name>.md`` (``markdown``), UTF-8, creating ``out`` if needed.

    Returns:
        The Markdown file's path.

    Raises:
        TypeError: ``report`` holds a value JSON cannot encode.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    path = out / f"{name}.md"
    path.write_text(markdown, encoding="utf-8")
    return path
