"""``python -m bench self_check_notes``: on a note of several sentences,
does the model's own check find the wrong sentences better asked once for
the whole note or once per sentence?

The threshold (:func:`clinical.quality.gate.self_check_threshold`) was
calibrated on single sentences, and a note the check doubts used to be
delivered as written whole. Notes are built from laymaker-dev's
cross-fitted fast texts (``bench self_check``'s report, ``--report``: each
row's input, fast text, hand verdict and P(yes)), consecutive rows by ID
joined with a space: the first ``--rows-3`` rows into notes of three, the
next ``--rows-6`` into notes of six. For each note the default model,
through the product's llama.cpp engine, answers the product's question
(:func:`inference.self_check.self_check_run`) for the whole note, and again
for each of its sentences (timed; the report's P(yes) per row are
compared with these).

Reported per note size: the notes holding a sentence hand-judged wrong, how
many of those each way doubts (P(yes) under the threshold: for the
sentences, any sentence), how many notes without a wrong sentence each way
doubts, the sentences each way would hand to the re-run, and the check's
time per note (ms, on this machine's cores).

Writes ``<out>/self-check-notes.json`` and ``.md``.

    .venv/bin/python -m bench self_check_notes --threads 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.reports import report_write
from bench.stats import percentiles


def notes_build(rows: list[dict], *, rows_3: int, rows_6: int) -> list[list[dict]]:
    """Consecutive rows (sorted by numeric ``id``) cut into notes: the first
    ``rows_3`` rows in threes, the next ``rows_6`` in sixes (a short last
    note is dropped)."""
    ordered = sorted(rows, key=lambda row: int(row["id"]))
    notes = [ordered[i:i + 3] for i in range(0, rows_3, 3)]
    notes += [ordered[i:i + 6] for i in range(rows_3, rows_3 + rows_6, 6)]
    return [note for note in notes if len(note) in (3, 6)]


def notes_summary(measured: list[dict], threshold: float) -> dict[str, dict]:
    """Per note size (``"3"``, ``"6"``): counts of notes, notes with a
    wrong sentence and of those doubted whole / by a sentence, notes without
    one doubted whole / by a sentence, sentences sent to the re-run each way
    (whole: every sentence of a doubted note), and the check's time per
    note (ms, P50) each way.

    ``measured``: one dict per note with ``verdicts`` (hand verdict or
    ``None`` per sentence), ``p_note``, ``p_sentences`` and ``ms_note``,
    ``ms_sentences`` (sums)."""
    summary: dict[str, dict] = {}
    for size in sorted({len(note["verdicts"]) for note in measured}):
        notes = [note for note in measured if len(note["verdicts"]) == size]
        wrong = [note for note in notes if "wrong" in note["verdicts"]]
        clean = [note for note in notes if "wrong" not in note["verdicts"]]

        def whole(note: dict) -> bool:
            return note["p_note"] is not None and note["p_note"] < threshold

        def by_sentence(note: dict) -> bool:
            return any(p is not None and p < threshold for p in note["p_sentences"])

        summary[str(size)] = {
            "notes": len(notes), "with_wrong": len(wrong),
            "wrong_doubted_whole": sum(map(whole, wrong)), "wrong_doubted_by_sentence": sum(map(by_sentence, wrong)),
            "clean_doubted_whole": sum(map(whole, clean)), "clean_doubted_by_sentence": sum(map(by_sentence, clean)),
            "sentences": size * len(notes),
            "sentences_rerun_whole": size * sum(map(whole, notes)),
            "sentences_rerun_by_sentence": sum(p is not None and p < threshold
                                               for note in notes for p in note["p_sentences"]),
            "wrong_sentences": sum(v == "wrong" for note in notes for v in note["verdicts"]),
            "wrong_sentences_doubted_by_sentence": sum(
                v == "wrong" and p is not None and p < threshold
                for note in notes for v, p in zip(note["verdicts"], note["p_sentences"])),
            "ms_note_p50": round(percentiles([note["ms_note"] for note in notes])["p50"]),
            "ms_sentences_p50": round(percentiles([note["ms_sentences"] for note in notes])["p50"]),
        }
    return summary


def render(report: dict) -> str:
    lines = ["# The model's own check on notes: the whole note or each sentence", "",
             f"Command: `{report['command']}`. Model `{report['model']}` through the product's llama.cpp engine, "
             f"{report['threads']} threads; threshold {report['threshold']} (calibrated on sentences). Notes: "
             "consecutive laymaker-dev rows by ID, their cross-fitted fast texts "
             f"(prompt `{report['prompt_version']}`) joined with a space; verdicts from docs/quality/hand-judged.md "
             "(a sentence not judged counts as not wrong).", "",
             "| sentences a note | notes | with a wrong sentence | of those doubted: whole note | by a sentence "
             "| notes without one doubted: whole note | by a sentence | sentences re-run: whole note | by sentence "
             "| wrong sentences doubted by their own check | check ms a note (P50): whole note | by sentence |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size, s in report["sizes"].items():
        lines.append(f"| {size} | {s['notes']} | {s['with_wrong']} | {s['wrong_doubted_whole']} | "
                     f"{s['wrong_doubted_by_sentence']} | {s['clean_doubted_whole']} | {s['clean_doubted_by_sentence']} "
                     f"| {s['sentences_rerun_whole']} of {s['sentences']} | {s['sentences_rerun_by_sentence']} of "
                     f"{s['sentences']} | {s['wrong_sentences_doubted_by_sentence']} of {s['wrong_sentences']} "
                     f"| {s['ms_note_p50']:,} | {s['ms_sentences_p50']:,} |")
    lines += ["", f"Sentence P(yes) here against `bench self_check`'s for the same pairs: largest difference "
              f"{report['max_p_difference']:.3f}.", "",
              "Reading: a note the whole-note check doubts was re-run whole and, where the re-run's text "
              "was still doubted, delivered as written whole; checked by sentence, only the doubted "
              "sentences are re-run, each as a one-sentence translation (clinical/rerun/sentences.py), "
              "so a sentence's delivered text is what `bench rerun_select --self-check` replays for that "
              "row alone.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench self_check_notes", description=__doc__.splitlines()[0])
    parser.add_argument("--report", default="docs/quality/self-check.json")
    parser.add_argument("--rows-3", type=int, default=120)
    parser.add_argument("--rows-6", type=int, default=120)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="docs/quality")
    args = parser.parse_args(argv)
    import asyncio

    from inference import self_check
    from inference.llamacpp_engine import LlamaCppEngine
    from inference.models import default_gguf_path

    source = json.loads(Path(args.report).read_text(encoding="utf-8"))
    threshold = source["self_check_threshold"]
    notes = notes_build(source["fast"], rows_3=args.rows_3, rows_6=args.rows_6)

    async def run() -> list[dict]:
        engine = LlamaCppEngine(str(default_gguf_path()), n_ctx=4096, n_threads=args.threads, max_batch=1,
                                precision="q4_k_m")
        await engine.start()
        measured = []
        try:
            for n, note in enumerate(notes):
                started = time.perf_counter()
                p_note = await self_check.self_check_run(engine, f"note-{n}", " ".join(r["input"] for r in note),
                                                         " ".join(r["text"] for r in note), background=False)
                ms_note = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                p_sentences = [await self_check.self_check_run(engine, f"note-{n}-{i}", r["input"], r["text"],
                                                               background=False) for i, r in enumerate(note)]
                ms_sentences = (time.perf_counter() - started) * 1000
                measured.append({"ids": [r["id"] for r in note], "verdicts": [r["verdict"] for r in note],
                                 "p_note": round(p_note, 4), "p_sentences": [round(p, 4) for p in p_sentences],
                                 "p_report": [r["p_yes"] for r in note], "ms_note": round(ms_note),
                                 "ms_sentences": round(ms_sentences)})
                print(f"[{n + 1}/{len(notes)}] {len(note)} sentences: whole {p_note:.2f}, "
                      f"lowest sentence {min(p_sentences):.2f}", flush=True)
        finally:
            await engine.shutdown()
        return measured

    measured = asyncio.run(run())
    report = {"command": "python -m bench self_check_notes " + " ".join(argv if argv is not None else []),
              "model": source["model"], "prompt_version": source["prompt_version"], "threshold": threshold,
              "threads": args.threads, "sizes": notes_summary(measured, threshold),
              "max_p_difference": max(abs(a - b) for note in measured
                                      for a, b in zip(note["p_sentences"], note["p_report"])),
              "notes": measured}
    path = report_write(Path(args.out), "self-check-notes", report, render(report))
    print(path.read_text(encoding="utf-8"))
    return 0
