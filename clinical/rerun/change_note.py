"""Why a re-run's text replaced the fast one, in plain words for the
clinician (:func:`rerun_change_note`), stored on ``Rerun.change_note`` when
the re-run completes, so the page, the handout and the socket's
``verified`` frame say the same; and which sentences of a note re-run
sentence by sentence are given as written (:func:`sentences_as_written`).
"""

from __future__ import annotations

from clinical.models import RERUN_AS_WRITTEN, RERUN_KEPT_FAST_TEXT, RERUN_SENTENCES, Rerun, Translation
from clinical.quality import measure as quality
from clinical.quality.display import sentences_named
from inference.examples import normalise

#: What each re-run candidate (clinical.rerun.candidates) did, for the
#: clinician: the start of ``Rerun.change_note``.
CANDIDATE_MESSAGES = {
    "full_precision": "Written again from the same instructions in full precision",
    "retrieved_examples": "Rewritten with worked examples of similar sentences",
    "span_replacement": "Rewritten from the original sentence with plain words for the hard terms",
    "sampled": "Written again from the same instructions with other wording",
}
#: The note when the re-run kept the fast text (``Rerun.candidate``
#: :data:`clinical.models.RERUN_KEPT_FAST_TEXT`).
KEPT_FAST_MESSAGE = "The first text stands: it passed both checks and no re-written text was clearly better"
UNCHANGED_MESSAGE = "The diagnosis text as written: no plain-words version passed the checks"
#: The note when plain-words versions passed the checks but the model's own
#: check doubted each one, and the diagnosis as written was kept
#: (clinical.rerun.candidates.candidate_select's self-check fallback).
UNCHANGED_DOUBTED_MESSAGE = ("The diagnosis text as written: the model's own check doubted every plain-words "
                             "version; explain it to the patient yourself")
#: The note when the model's own check still doubted the text the re-run
#: would have delivered, and the diagnosis as written was kept instead
#: (clinical.rerun.candidates.candidate_as_written); the page keeps that
#: text as the fast draft.
AS_WRITTEN_MESSAGE = ("The diagnosis text as written: the model's own check doubted the plain-words version; "
                      "explain it to the patient yourself")


def sentences_as_written(rerun: Rerun) -> list[int]:
    """The sentences (from 1) of a note re-run sentence by sentence
    (``Rerun.candidate`` :data:`clinical.models.RERUN_SENTENCES`) that are
    given as written; empty for any other re-run."""
    if rerun.candidate != RERUN_SENTENCES:
        return []
    return [r["sentence"] for r in rerun.candidates or [] if r.get("kept") == RERUN_AS_WRITTEN]


def _sentences_change_note(translation: Translation, rerun: Rerun) -> str:
    """:func:`rerun_change_note` for a note re-run sentence by sentence, e.g.
    "Sentences 2 and 4 of 5 were re-run (the model's own check doubted
    sentence 2; a safety or faithfulness check failed on sentence 4):
    sentence 2 was rewritten (Written again ...); sentence 4 is given as
    written, explain it to the patient yourself. The other sentences are as
    first written."."""
    kept = [r for r in rerun.candidates or [] if "kept" in r]
    total = len(translation.sentence_checks or [])
    numbers = [r["sentence"] for r in kept]
    reasons = {r["sentence"]: set((r.get("reason") or "").split(",")) for r in kept}
    doubted = [n for n in numbers if quality.LOW_SELF_CHECK in reasons[n]]
    failed = [n for n in numbers if {quality.SAFETY_FAILED, quality.FAITHFULNESS_FAILED} & reasons[n]]
    why = ([f"the model's own check doubted {sentences_named(doubted)}"] if doubted else []) + \
          ([f"a safety or faithfulness check failed on {sentences_named(failed)}"] if failed else [])
    what = []
    for name, group in _by_kept(kept).items():
        if name == RERUN_AS_WRITTEN:
            what.append(f"{sentences_named(group)} {'is' if len(group) == 1 else 'are'} given as written, explain "
                        f"{'it' if len(group) == 1 else 'them'} to the patient yourself")
        elif name == RERUN_KEPT_FAST_TEXT:
            what.append(f"{sentences_named(group)} stayed as first written: no re-written text was clearly better")
        else:
            what.append(f"{sentences_named(group)} {'was' if len(group) == 1 else 'were'} rewritten "
                        f"({CANDIDATE_MESSAGES.get(name, name)})")
    opening = sentences_named(numbers)
    opening = opening[0].upper() + opening[1:] + f" of {total} {'was' if len(numbers) == 1 else 'were'} re-run"
    others = "" if len(numbers) == total else " The other sentences are as first written."
    return opening + (f" ({'; '.join(why)})" if why else "") + ": " + "; ".join(what) + "." + others


def _by_kept(kept: list[dict]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for record in kept:
        grouped.setdefault(record["kept"], []).append(record["sentence"])
    return grouped


def _quoted(items: list[str], limit: int = 3) -> str:
    shown = [f"'{item}'" for item in dict.fromkeys(items)][:limit]
    more = len(dict.fromkeys(items)) - len(shown)
    words = ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1]
    return words + (f" and {more} more" if more > 0 else "")


def rerun_change_note(*, translation: Translation, rerun: Rerun) -> str:
    """Why the verified text replaced the fast one, in plain words for the
    clinician: which candidate it is and what was wrong with the first
    text, e.g. "Rewritten from the original sentence with plain words for
    the hard terms: the first text left out 'left'." Stored on
    ``Rerun.change_note`` when the re-run completes (so the page, the
    handout and the ``verified`` frame say the same); empty for a re-run
    whose row names no candidate."""
    if not rerun.candidate:
        return ""
    if rerun.candidate == RERUN_SENTENCES:
        return _sentences_change_note(translation, rerun)
    if rerun.candidate == RERUN_KEPT_FAST_TEXT:
        if translation.self_check is not None:
            shown = f" (the model's own check gave it {translation.self_check:.2f})"
        elif translation.confidence:
            shown = f" (it was written with confidence {translation.confidence:.2f})"
        else:
            shown = ""
        return KEPT_FAST_MESSAGE + shown + "."
    label = CANDIDATE_MESSAGES.get(rerun.candidate, rerun.candidate)
    if rerun.candidate == RERUN_AS_WRITTEN:
        label = AS_WRITTEN_MESSAGE
    elif normalise(rerun.output_text) == normalise(translation.input_text):
        # A rewrite (the fast text or another candidate) passed both checks, yet the input was
        # kept: only the self-check fallback does that (the tiers rank any passing rewrite above it).
        rewrite_passed = (translation.safety_passed and translation.faithfulness_passed) or any(
            r.get("safety_passed") and r.get("faithfulness_passed") and r.get("name") != rerun.candidate
            for r in rerun.candidates or [])
        label = UNCHANGED_DOUBTED_MESSAGE if rewrite_passed else UNCHANGED_MESSAGE
    why = []
    missing = [item.get("text", "") for item in translation.safety_missing or [] if item.get("text")]
    if missing:
        why.append(f"left out {_quoted(missing)}")
    added = [flag.get("text", "") for flag in translation.faithfulness_flags or [] if flag.get("text")]
    if added:
        why.append(f"added {_quoted(added)}")
    reasons = (translation.rerun_reason or "").split(",")
    if quality.LOW_CONFIDENCE in reasons and translation.confidence is not None:
        why.append(f"was written with low confidence ({translation.confidence:.2f})")
    if quality.LOW_SELF_CHECK in reasons and translation.self_check is not None:
        why.append(f"was doubted by the model's own check ({translation.self_check:.2f} that it says the same)")
    note = label + (": the first text " + " and ".join(why) if why else "") + "."
    if rerun.output_text.strip() == translation.output_text.strip():
        note += " It is the same text as the first one."
    if rerun.safety_passed is False or rerun.faithfulness_passed is False:
        note += " No candidate passed both checks; this one has the fewest problems."
    return note
