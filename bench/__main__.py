"""``python -m bench NAME [ARGS...]``: run one benchmark command.

:data:`COMMANDS` lists every command: its module in ``bench/``, the
function that takes the remaining arguments (``fn(argv: list[str]) ->
int | None``) and one line on what it measures. ``python -m bench`` alone
prints that list.

Exit status: the command's return value (0 for ``None``), 2 for an unknown
or invalid name or a missing corpus file (one line on stderr).
"""

from __future__ import annotations

import importlib
import re
import sys

from bench.corpora import CorpusMissing

_NAME = re.compile(r"[a-z_][a-z0-9_]*")

#: name -> (module, function, what it measures)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "latency": ("bench.latency", "main",
                "TTFT/TPOT/E2E of the full stack against the bare engine, the engines' servers and transformers"),
    "ward": ("bench.ward", "main",
             "8 clinicians at once, with the re-run worker off, at normal and at idle CPU priority"),
    "clinician_ttft": ("bench.ward", "clinician_ttft_main",
                       "one clinician's time to the first word, cluster prompt against one example"),
    "restart": ("bench.restart", "main",
                "a first start and a restart on the prefix states on disk: time to ready, first TTFT"),
    "gpu_check": ("bench.gpu_check", "main",
                  "the deployed engines on a GPU host: resolved, timed at 1 and 8 clients, engine core killed"),
    "replicas": ("bench.replicas", "main", "throughput through nginx with 1 and 2 web replicas"),
    "quality": ("bench.quality", "main",
                "SARI, FKGL, safety and faithfulness checks and re-run rate on laymaker-dev and Cochrane"),
    "gate_calibrate": ("bench.calibrate", "gate_calibrate_main",
                       "the confidence gate's threshold for a model and prompt version"),
    "self_check": ("bench.calibrate", "self_check_main",
                   "the model's own check against the confidence (AUROC) and its threshold"),
    "faithfulness_rates": ("bench.stored_texts", "faithfulness_rates_main",
                           "flag rates of the faithfulness check over the stored texts"),
    "unexplained_terms": ("bench.stored_texts", "unexplained_terms_main",
                          "share of delivered texts that keep a medical term or abbreviation unexplained"),
    "hand_sample": ("bench.stored_texts", "hand_sample_main", "laymaker-dev samples laid out for hand-judging"),
    "lay_terms": ("bench.lay_terms", "lay_terms_main",
                  "medical terms given plain words no vetted vocabulary gives for them, over the stored texts"),
    "unseen_sample": ("bench.unseen_sample", "main",
                      "unseen Cochrane sentences: draw, post to a running stack, report"),
}


def usage() -> str:
    """The list :data:`COMMANDS` as ``python -m bench`` prints it."""
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m bench NAME [ARGS...]   (NAME --help for its arguments)", "", "NAME:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, _, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name = argv[0]
    if not _NAME.fullmatch(name):
        print(f"bench: invalid benchmark name {name!r}\n{usage()}", file=sys.stderr)
        return 2
    if name not in COMMANDS:
        print(f"bench: no benchmark named {name!r}\n{usage()}", file=sys.stderr)
        return 2
    module, function, _ = COMMANDS[name]
    entry = getattr(importlib.import_module(module), function)
    try:
        result = entry(argv[1:])
    except CorpusMissing as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
