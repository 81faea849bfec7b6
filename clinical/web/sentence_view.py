"""The sentence-by-sentence view of a translation for the pages: the
delivered text with each flag and doubted sentence marked where it stands,
and each source sentence beside its plain sentence
(:func:`clinical.translation.alignment.translation_sentences`), cut into
segments that ``static/clinical/sentences.js`` renders (with the page, as
a ``json_script``, or fetched from ``/translations/<id>/sentences/``).

A segment is ``{"text", "mark"}``; ``mark`` is ``None`` or
``{"kind", "why", "id"}``: ``kind`` ``flag`` (words of the plain text the
faithfulness check found the diagnosis does not say), ``lost`` (words of
the diagnosis the safety check found missing from the plain text) or
``term`` (a medical term the plain text keeps, with its definition from a
vetted vocabulary and that vocabulary's name); ``id`` is unique on the
page, for the mark's ``aria-describedby``.
"""

from __future__ import annotations

from clinical.models import Translation
from clinical.quality.display import FLAG_LABELS, KIND_LABELS
from clinical.translation.alignment import AS_WRITTEN, DOUBTED, RERUN, REWRITTEN, translation_sentences
from clinical.translation.handouts import handout_model_text

#: How each status is named on the page.
STATUS_LABELS = {REWRITTEN: "Rewritten", AS_WRITTEN: "As written", RERUN: "Re-run", DOUBTED: "Doubted"}
#: Statuses marked in the delivered text itself (the clinician must read
#: these sentences against the diagnosis, or explain them).
MARKED_STATUSES = (DOUBTED,)


def translation_sentence_view(*, translation: Translation, id_prefix: str = "m") -> dict:
    """``{"sentences", "text", "text_whys", "table_whys", "marks", "id_prefix"}`` for a
    completed translation: each sentence of
    :func:`~clinical.translation.alignment.translation_sentences` with
    ``status_label``, ``source_segments`` and ``plain_segments`` added;
    ``text`` the delivered text as chunks ``{"sentence": number or None,
    "status", "why", "segments"}`` in order (the gaps between sentences as
    chunks with ``sentence`` ``None``); ``marks`` the number of marks in
    the text. ``text_whys`` and ``table_whys``: ``{"id", "why"}`` of every mark in
    the text and in the sentence table, rendered apart from the text so
    that the text's own characters stay exactly the delivered text; each
    mark's ``aria-describedby`` names its ``id``. ``id_prefix`` keeps the
    marks' ids apart where a page shows two views. Empty lists for a
    translation that did not complete."""
    sentences = translation_sentences(translation)
    delivered = handout_model_text(translation=translation)
    counter = iter(range(1, 1_000_000))
    chunks: list[dict] = []
    cursor = 0
    for sentence in sentences:
        sentence["status_label"] = STATUS_LABELS[sentence["status"]]
        source = sentence["source"]
        sentence["source_segments"] = _segments(
            translation.input_text, source["start"], source["end"],
            [(m["start"], m["end"], "lost", _lost_why(m)) for m in sentence["missing"] if m["start"] is not None],
            id_prefix, counter)
        plain = sentence["plain"]
        if plain is None:
            sentence["plain_segments"] = []
            continue
        marks = [(f["start"], f["end"], "flag", _flag_why(f)) for f in sentence["flags"]]
        marks += [(t["start"], t["end"], "term", _term_why(t)) for t in sentence["terms"]]
        sentence["plain_segments"] = _segments(delivered, plain["start"], plain["end"], marks,
                                               f"{id_prefix}p", counter)
        if plain["start"] > cursor:
            chunks.append(_chunk(None, "", "", [{"text": delivered[cursor:plain["start"]], "mark": None}]))
        marked = sentence["status"] in MARKED_STATUSES
        chunks.append(_chunk(sentence["number"], sentence["status"] if marked else "",
                             sentence["why"] if marked else "",
                             _segments(delivered, plain["start"], plain["end"], marks, f"{id_prefix}t", counter)))
        cursor = plain["end"]
    if cursor < len(delivered) and sentences:
        chunks.append(_chunk(None, "", "", [{"text": delivered[cursor:], "mark": None}]))
    text_whys = [{"id": f"{id_prefix}s{c['sentence']}", "why": f"Sentence {c['sentence']}: {c['why']}"}
                 for c in chunks if c["status"]]
    text_whys += [seg["mark"] for c in chunks for seg in c["segments"] if seg["mark"]]
    table_whys = [seg["mark"] for s in sentences for seg in s["source_segments"] + s.get("plain_segments", [])
                  if seg["mark"]]
    return {"sentences": sentences, "text": chunks, "text_whys": text_whys, "table_whys": table_whys,
            "marks": len(text_whys), "id_prefix": id_prefix}


def _chunk(number, status: str, why: str, segments: list[dict]) -> dict:
    return {"sentence": number, "status": status, "status_label": STATUS_LABELS.get(status, ""), "why": why,
            "segments": segments}


def _segments(text: str, start: int, end: int, marks: list[tuple], id_prefix: str, counter) -> list[dict]:
    """``text[start:end]`` cut at ``marks`` (``(start, end, kind, why)``,
    offsets into ``text``); where marks overlap the first wins, a flag
    before a term's explanation."""
    segments: list[dict] = []
    cursor = start
    for mark_start, mark_end, kind, why in sorted(marks, key=lambda m: (m[0], m[2] == "term")):
        mark_start, mark_end = max(mark_start, cursor), min(mark_end, end)
        if mark_end <= mark_start:
            continue
        if mark_start > cursor:
            segments.append({"text": text[cursor:mark_start], "mark": None})
        segments.append({"text": text[mark_start:mark_end],
                         "mark": {"kind": kind, "why": why, "id": f"{id_prefix}{next(counter)}"}})
        cursor = mark_end
    if cursor < end:
        segments.append({"text": text[cursor:end], "mark": None})
    return segments


def _flag_why(flag: dict) -> str:
    label = FLAG_LABELS.get(flag.get("kind"), flag.get("kind") or "Statement")
    detail = flag.get("detail") or "not in the diagnosis"
    return f"Faithfulness check: {label.lower()}, {detail}"


def _term_why(term: dict) -> str:
    return f"{term['term']}: {term['definition']} Source: {term['source_name']}."


def _lost_why(item: dict) -> str:
    label = KIND_LABELS.get(item.get("kind"), item.get("kind") or "Item")
    return f"Safety check: {label.lower()} missing from the plain words"
