"""Which batch shapes change one request's logits in llama.cpp (issue 17's
greedy-equality target), on the default model.

    .venv/bin/python -m bench batch_invariance [--model PATH] [--steps 8] [--out docs/benchmarks]

One request (a laymaker-dev sentence in the product's base prompt,
:func:`inference.prompts.build_messages`) is decoded greedily alone: its
prompt in one ``llama_decode``, then one token per step. The same request is
then decoded again, fed the same tokens, in other batch shapes, each in a
fresh llama.cpp context like the batched engine's (one KV stream per
sequence, ``kv_unified`` false); its logits at every step are compared with
the reference's, bit for bit:

* alone again (the reference repeats itself);
* beside 1 to 7 other requests (their prompts read first, each on its own;
  then every step decodes one token of each, so a step has 2 to 8 rows);
* beside the same number of others, without the eighth sentence (which
  other requests are in the step, not only how many);
* its prompt read in chunks of 16 tokens, alone and beside 3 others;
* in a context of one sequence rather than eight.

Each shape runs with llama.cpp's repacked weights (``use_extra_bufts``, the
default) and without, and with flash attention off (the engine's setting)
and on. Writes ``batch-invariance.json`` and ``batch-invariance.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.reports import report_write
from bench.workloads import ROOT, short_texts

CONTEXT_CELLS = 1024  # per sequence


class Probe:
    """One model (with or without repacked weights) and its tokenizer."""

    def __init__(self, model: str, *, repack: bool, threads: int) -> None:
        import llama_cpp
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.threads = threads
        self.llm = Llama(model_path=model, n_ctx=256, n_threads=threads, logits_all=False, verbose=False)
        eos = self.llm.token_eos()
        self.formatter = Jinja2ChatFormatter(template=self.llm.metadata["tokenizer.chat_template"],
                                             eos_token=self.llm._model.token_get_text(eos), bos_token="")
        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = repack
        self.model = llama_cpp.llama_model_load_from_file(model.encode(), params)
        self.n_vocab = self.llm.n_vocab()
        self.batch = llama_cpp.llama_batch_init(1024, 0, 1)

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_model_free(self.model)
        self.llm.close()

    def tokens(self, text: str) -> list[int]:
        from inference.prompts import build_messages

        prompt = self.formatter(messages=build_messages(text)).prompt
        return self.llm.tokenize(prompt.encode(), add_bos=True, special=True)

    def context(self, n_seq: int, flash: bool):
        import llama_cpp

        params = type(self.llm.context_params).from_buffer_copy(self.llm.context_params)
        params.n_ctx = CONTEXT_CELLS * n_seq
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = n_seq
        params.kv_unified = False
        params.n_threads = params.n_threads_batch = self.threads
        params.flash_attn_type = 1 if flash else 0
        return llama_cpp.llama_init_from_model(self.model, params)

    def decode(self, ctx, rows: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
        """One ``llama_decode`` of ``(seq, token, pos, wants_logits)`` rows;
        the logits of the rows that want them, in order."""
        import llama_cpp

        for i, (seq, token, pos, logits) in enumerate(rows):
            self.batch.token[i], self.batch.pos[i], self.batch.logits[i] = token, pos, logits
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = seq
        self.batch.n_tokens = len(rows)
        if llama_cpp.llama_decode(ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(self.n_vocab,)).copy()
                for i, row in enumerate(rows) if row[3]]

    def run(self, prompts: list[list[int]], seqs: list[int], *, steps: int, flash: bool, n_seq: int = 8,
            chunk: int | None = None, forced: list[int] | None = None) -> tuple[list[np.ndarray], list[int]]:
        """Decode ``prompts[seqs[i]]`` as sequence ``i``; sequence 0 is the
        request watched (greedy, or fed ``forced``). Returns its logits at
        each step and the tokens it was fed."""
        import llama_cpp

        ctx = self.context(n_seq, flash)
        try:
            watched: list[np.ndarray] = []
            own = {i: prompts[s] for i, s in enumerate(seqs)}
            if chunk is None:  # each prompt read alone, whole
                for i, tokens in own.items():
                    got = self.decode(ctx, [(i, t, p, p == len(tokens) - 1) for p, t in enumerate(tokens)])
                    if i == 0:
                        watched.append(got[0])
            else:  # all prompts read together, `chunk` tokens of each per step
                pos = dict.fromkeys(own, 0)
                while any(pos[i] < len(own[i]) for i in own):
                    rows = []
                    for i, tokens in own.items():
                        for p in range(pos[i], min(pos[i] + chunk, len(tokens))):
                            rows.append((i, tokens[p], p, p == len(tokens) - 1))
                        pos[i] = min(pos[i] + chunk, len(tokens))
                    got = self.decode(ctx, rows)
                    owners = [r[0] for r in rows if r[3]]
                    watched += [g for o, g in zip(owners, got) if o == 0]
            fed, nxt, cur = [], {i: 0 for i in own}, {i: len(t) for i, t in own.items()}
            for step in range(steps):
                token = forced[step] if forced is not None else int(np.argmax(watched[-1]))
                fed.append(token)
                rows = [(i, token if i == 0 else nxt[i], cur[i], True) for i in own]
                for i in own:
                    cur[i] += 1
                got = self.decode(ctx, rows)
                watched.append(got[0])
                for (i, *_), g in zip(rows[1:], got[1:]):
                    nxt[i] = int(np.argmax(g))
            return watched, fed
        finally:
            llama_cpp.llama_free(ctx)


def compare(ref: list[np.ndarray], other: list[np.ndarray]) -> dict:
    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(ref, other)]
    return {"steps": len(diffs), "exact_steps": sum(d == 0.0 for d in diffs),
            "first_max_abs": diffs[0], "worst_max_abs": max(diffs),
            "argmax_flips": sum(int(np.argmax(a) != np.argmax(b)) for a, b in zip(ref, other))}


def measure(args) -> dict:
    from inference.models import default_gguf_path

    model = args.model or str(default_gguf_path())
    texts = short_texts(12)[:10]
    report = {"model": os.path.basename(model), "threads": args.threads, "steps": args.steps,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": []}
    shapes = [("alone again", dict(seqs=[0])),
              *[(f"beside {n}", dict(seqs=list(range(n + 1)))) for n in (1, 2, 3, 4, 5, 6, 7)],
              ("beside 7, the eighth sentence replaced by a ninth", dict(seqs=[*range(7), 8])),
              ("beside 1: the eighth sentence", dict(seqs=[0, 7])),
              ("alone, prompt read in chunks of 16", dict(seqs=[0], chunk=16)),
              ("beside 3, prompts read together in chunks of 16", dict(seqs=[0, 1, 2, 3], chunk=16)),
              ("alone, in a context of one sequence", dict(seqs=[0], n_seq=1))]
    for repack in (True, False):
        probe = Probe(model, repack=repack, threads=args.threads)
        try:
            prompts = [probe.tokens(t) for t in texts]
            for flash in (False, True):
                ref, fed = probe.run(prompts, [0], steps=args.steps, flash=flash)
                for name, shape in shapes:
                    got, _ = probe.run(prompts, steps=args.steps, flash=flash, forced=fed, **shape)
                    row = {"repacked_weights": repack, "flash_attention": flash, "shape": name,
                           "rows_per_step": len(shape["seqs"]), **compare(ref, got)}
                    report["rows"].append(row)
                    print(f"repack={repack} flash={flash} {name}: {row['exact_steps']}/{row['steps']} exact, "
                          f"worst {row['worst_max_abs']:.3g}", flush=True)
        finally:
            probe.close()
    return report


def markdown(report: dict) -> str:
    lines = ["# Batch invariance of llama.cpp on the default model",
             "",
             f"Generated by `python -m bench batch_invariance` on {report['started']} (model {report['model']}, "
             f"{report['threads']} threads, {report['steps']} decode steps after the prompt). One request's "
             "logits at each step against the same request decoded alone (prompt whole, then one token per "
             "step); exact = bit for bit. See the module's docstring for the shapes.",
             "",
             "| repacked weights | flash attention | shape | rows per step | exact steps | max abs logit diff "
             "(first / worst) | greedy flips |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {'yes' if r['repacked_weights'] else 'no'} | {'on' if r['flash_attention'] else 'off'} | "
                     f"{r['shape']} | {r['rows_per_step']} | {r['exact_steps']} / {r['steps']} | "
                     f"{r['first_max_abs']:.3g} / {r['worst_max_abs']:.3g} | {r['argmax_flips']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench batch_invariance", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    report = measure(args)
    print(report_write(args.out, "batch-invariance", report, markdown(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
