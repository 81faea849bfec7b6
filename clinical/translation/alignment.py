"""A translation side by side, sentence by sentence: each sentence of the
diagnosis beside its plain sentence, with its status and where each
check's finding stands (:func:`translation_sentences`).

The product explains a note one sentence at a time
(:func:`inference.parts.translation_units`), so the pairs are the
engine's own units, not a guess: the plain sentence's place in the text is
found by joining the stored answers again exactly as the stream joined them
(:func:`inference.parts.translation_parts_spans`) and comparing the result
with the delivered text. Where the two differ (a note re-run whole, whose
answers per sentence are not stored, or a row older than the stored
answers) the whole diagnosis stands beside the whole text, as one pair.

Offsets are character offsets (Python ``str`` indices, end exclusive):
``source`` into the diagnosis as submitted (``input_text``), ``plain``
and the faithfulness flags into the delivered text (the verified text
once there is one, else the fast text; the API's ``text``), the safety
check's missing items into the diagnosis.
"""

from __future__ import annotations

import re

from clinical.models import RERUN_AS_WRITTEN, RERUN_KEPT_FAST_TEXT, RERUN_SENTENCES, Translation
from clinical.quality import measure as quality
from clinical.quality.glossary import glossary_display
from inference.examples import normalise
from inference.lay_terms import spanish_terms
from inference.parts import TranslationUnit, translation_parts_spans, translation_units

#: Sentence statuses: the model's plain words; the diagnosis as written
#: (copied by the model, or given as written by the re-run where its check
#: doubted every plain version); replaced by the verified full-precision
#: re-run; doubted by the model's own check and not (yet) verified.
REWRITTEN, AS_WRITTEN, RERUN, DOUBTED = "rewritten", "as_written", "rerun", "doubted"
STATUSES = (REWRITTEN, AS_WRITTEN, RERUN, DOUBTED)

#: Why a sentence was re-run or is doubted (``rerun_reason`` codes), in
#: words for the clinician.
REASON_WORDS = {
    quality.LOW_SELF_CHECK: "the model's own check doubted it",
    quality.LOW_CONFIDENCE: "it was written with low confidence",
    quality.SAFETY_FAILED: "the safety check found something of the diagnosis missing",
    quality.FAITHFULNESS_FAILED: "the faithfulness check found something the diagnosis does not say",
}


def translation_sentences(translation: Translation) -> list[dict]:
    """The sentences of a completed translation, in order, each
    ``{"number", "source", "plain", "status", "why", "reasons", "p_yes",
    "flags", "missing"}``:

    * ``number``: from 1;
    * ``source``: ``{"text", "start", "end"}`` in ``input_text``;
    * ``plain``: ``{"text", "start", "end"}`` in the delivered text, or
      ``None`` where the model's answer was empty;
    * ``status``: one of :data:`STATUSES`; ``why``: the reason in words
      (empty for ``rewritten``); ``reasons``: the ``rerun_reason`` codes
      that sent it to the re-run or doubt it (:data:`REASON_WORDS`);
    * ``p_yes``: the model's own check of the sentence (of the re-run's
      text where the re-run replaced it), ``None`` where it did not run;
    * ``flags``: the delivered text's faithfulness flags that stand in
      this plain sentence, ``{"kind", "text", "start", "end", "detail"}``
      with offsets into the delivered text;
    * ``missing``: the safety check's missing items found in this source
      sentence, ``{"kind", "text", "start", "end"}`` with offsets into
      ``input_text``;
    * ``terms``: the glossary's terms (the vetted vocabularies',
      :func:`clinical.quality.glossary.glossary_display`) that this plain
      sentence keeps, ``{"term", "start", "end", "definition", "source",
      "source_name"}`` with offsets into the delivered text (whole words,
      any case), so each is explained where it stands; in a Spanish text,
      where it names the term by HPO's Spanish label
      (:func:`inference.lay_terms.spanish_terms`).

    A missing item the diagnosis does not hold word for word is given to
    the first sentence with ``start`` and ``end`` ``None``. Empty for a
    translation that did not complete. Reads ``translation.reruns`` (prefetch
    it for lists). About 1 ms for a note of six sentences.
    """
    if translation.status != Translation.Status.COMPLETED:
        return []
    verified = translation.verified_rerun
    checked = verified or translation
    delivered = checked.output_text
    kept = _kept_records(verified)
    glossary = glossary_display(translation.glossary)
    labels = {term.lower(): label for term, label in spanish_terms(translation.input_text)} \
        if translation.language == "es" else {}
    units = translation_units(translation)
    spans = _plain_spans(translation, units, verified, kept, delivered)
    if spans is None:  # not aligned: the whole diagnosis beside the whole text
        units = [TranslationUnit("", "", translation.input_text, translation.input_text)]
        spans = [_stripped_span(delivered, 0, len(delivered))]
    sources = _source_spans(translation.input_text, units)
    sentences = []
    for index, (unit, source, plain) in enumerate(zip(units, sources, spans, strict=True)):
        record = kept.get(index + 1)
        status, reasons, p_yes = _status(translation, verified, record, index, len(units), unit, delivered, plain)
        sentences.append({
            "number": index + 1,
            "source": {"text": translation.input_text[source[0]:source[1]], "start": source[0], "end": source[1]},
            "plain": None if plain is None else {"text": delivered[plain[0]:plain[1]],
                                                 "start": plain[0], "end": plain[1]},
            "status": status,
            "why": _why(status, reasons, verified, record),
            "reasons": reasons,
            "p_yes": None if p_yes is None else round(p_yes, 3),
            "flags": [],
            "missing": [],
            "terms": _terms_in(delivered, plain, glossary, labels),
        })
    _place_flags(sentences, checked.faithfulness_flags or [])
    _place_missing(sentences, translation.input_text, checked.safety_missing or [])
    for sentence in sentences:
        if sentence["status"] in (REWRITTEN, RERUN) and (sentence["flags"] or sentence["missing"]):
            sentence["why"] = (sentence["why"] + " " if sentence["why"] else "") + _findings_why(sentence)
    return sentences


def _findings_why(sentence: dict) -> str:
    """The sentence's findings in words: "The checks found 2 lost and 1
    flagged: read the marked words against the diagnosis."."""
    parts = ([f"{len(sentence['missing'])} lost"] if sentence["missing"] else []) + (
        [f"{len(sentence['flags'])} flagged"] if sentence["flags"] else [])
    return f"The checks found {' and '.join(parts)}: read the marked words against the diagnosis."


def _terms_in(text: str, span: tuple[int, int] | None, glossary: list[dict],
              labels: dict[str, str]) -> list[dict]:
    """The terms of ``glossary`` (as :func:`clinical.quality.glossary.glossary_display`
    shows them) written in ``text[span]``, each where it first stands
    there, longer terms first where two overlap; with ``labels`` (a Spanish
    text: lower-case term → its HPO Spanish label), a term stands where
    its label does."""
    if span is None:
        return []
    found: list[dict] = []
    written = [(labels.get(entry["term"].lower(), entry["term"]), entry) for entry in glossary]
    for words, entry in sorted(written, key=lambda pair: -len(pair[0])):
        words = words.split()
        if not words:
            continue
        pattern = r"(?<![\w-])" + r"\s+".join(map(re.escape, words)) + r"(?![\w-])"
        match = re.compile(pattern, re.IGNORECASE).search(text, span[0], span[1])
        if match and not any(t["start"] < match.end() and match.start() < t["end"] for t in found):
            found.append({"term": entry["term"], "start": match.start(), "end": match.end(),
                          "definition": entry["definition"], "source": entry["source"],
                          "source_name": entry["source_name"]})
    return sorted(found, key=lambda t: t["start"])


def _plain_spans(translation: Translation, units: list[TranslationUnit], verified, kept: dict[int, dict],
                 delivered: str):
    """Each unit's ``(start, end)`` in ``delivered`` (``None`` for an empty
    answer), or ``None`` when the stored answers do not join to it."""
    if len(units) == 1:
        return [_stripped_span(delivered, 0, len(delivered))]
    checks = translation.sentence_checks or []
    if len(checks) != len(units):
        return None
    if verified is not None and normalise(delivered) == normalise(translation.input_text):
        answers = [unit.sentence for unit in units]  # the whole diagnosis given as written
        cuts = [False] * len(units)
    else:
        answers = [check["answer"] for check in checks]
        cuts = [bool(check.get("cut")) for check in checks]
        for record in kept.values():
            if record["kept"] != RERUN_KEPT_FAST_TEXT:
                if "answer" not in record:
                    return None
                answers[record["sentence"] - 1] = record["answer"]
                cuts[record["sentence"] - 1] = False
    text, spans = translation_parts_spans(units, answers, cut=cuts)
    return spans if text == delivered else None


def _stripped_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    piece = text[start:end]
    if not piece.strip():
        return None
    start += len(piece) - len(piece.lstrip())
    return start, start + len(piece.strip())


def _source_spans(text: str, units: list[TranslationUnit]) -> list[tuple[int, int]]:
    """Each unit's place in the diagnosis, found in order (its whitespace
    may differ: a heading joined to its findings); a unit not found spans
    the gap to the next one found."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for unit in units:
        found = text_locate(text, unit.source, cursor)
        if found is None:
            found = _stripped_span(text, cursor, len(text)) or (cursor, cursor)
        spans.append(found)
        cursor = found[1]
    return spans


def text_locate(text: str, needle: str, start: int = 0, end: int | None = None, *,
                ignore_case: bool = False) -> tuple[int, int] | None:
    """Where ``needle`` first stands in ``text[start:end]``: ``(start,
    end)`` character offsets into ``text``, any run of whitespace in either
    matching any other; ``None`` when it is not there (or blank)."""
    needle = needle.strip()
    if not needle:
        return None
    pattern = r"\s+".join(re.escape(word) for word in needle.split())
    match = re.compile(pattern, re.IGNORECASE if ignore_case else 0).search(
        text, start, len(text) if end is None else end)
    return (match.start(), match.end()) if match else None


def _kept_records(rerun) -> dict[int, dict]:
    """A note re-run sentence by sentence: ``{sentence number: the record
    naming the text it kept}``."""
    if rerun is None or rerun.candidate != RERUN_SENTENCES:
        return {}
    return {r["sentence"]: r for r in rerun.candidates or [] if "kept" in r and "sentence" in r}


def _status(translation: Translation, verified, record: dict | None, index: int, count: int, unit: TranslationUnit,
            delivered: str, plain: tuple[int, int] | None) -> tuple[str, list[str], float | None]:
    """``(status, reasons, p_yes)`` of sentence ``index`` (``record``: the
    re-run's record of the text it kept for it, if any)."""
    checks = translation.sentence_checks or []
    p_yes = checks[index].get("p_yes") if count > 1 and index < len(checks) else translation.self_check
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if count > 1:  # a note: the reasons are the sentence's own
        reasons = [r for r in (record or {}).get("reason", "").split(",") if r]
        if not reasons and quality.self_check_doubted(p_yes, translation.self_check_threshold):
            reasons = [quality.LOW_SELF_CHECK]
    text = delivered[plain[0]:plain[1]] if plain else ""
    if text and normalise(text) == normalise(unit.source):
        return AS_WRITTEN, reasons, p_yes
    replaced = verified is not None and (
        (record is not None and record["kept"] != RERUN_KEPT_FAST_TEXT)
        or (verified.candidate not in (RERUN_SENTENCES, RERUN_KEPT_FAST_TEXT)
            and verified.output_text.strip() != translation.output_text.strip()))
    if replaced:
        return RERUN, reasons, record.get("self_check") if record else verified.self_check
    if verified is None and quality.self_check_doubted(p_yes, translation.self_check_threshold):
        return DOUBTED, reasons, p_yes
    return REWRITTEN, [], p_yes


def _why(status: str, reasons: list[str], verified, record: dict | None) -> str:
    words = [REASON_WORDS[r] for r in reasons if r in REASON_WORDS]
    because = (" because " + " and ".join(words)) if words else ""
    if status == AS_WRITTEN:
        if verified is not None and (verified.candidate == RERUN_AS_WRITTEN
                                     or (record or {}).get("kept") == RERUN_AS_WRITTEN or reasons):
            return "Given as written" + because + ": explain it to the patient yourself."
        return "The plain words are the diagnosis as written."
    if status == RERUN:
        return "Re-run in full precision" + because + "."
    if status == DOUBTED:
        return ("The model's own check doubts that it says the same as its sentence of the diagnosis: read "
                "it against that sentence before giving it to the patient.")
    return ""


def _place_flags(sentences: list[dict], flags: list[dict]) -> None:
    for flag in flags:
        start = flag.get("start")
        home = next((s for s in sentences if s["plain"] and start is not None
                     and s["plain"]["start"] <= start < s["plain"]["end"]), None)
        (home or sentences[0])["flags"].append({key: flag.get(key) for key in
                                                ("kind", "text", "start", "end", "detail")})


def _place_missing(sentences: list[dict], input_text: str, missing: list[dict]) -> None:
    for item in missing:
        home, found = sentences[0], None
        for sentence in sentences:
            found = text_locate(input_text, item.get("text", ""), sentence["source"]["start"],
                                sentence["source"]["end"], ignore_case=True)
            if found:
                home = sentence
                break
        home["missing"].append({"kind": item.get("kind"), "text": item.get("text"),
                                "start": found[0] if found else None, "end": found[1] if found else None})
