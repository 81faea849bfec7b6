"""What the page says about an output's reading level, safety check,
faithfulness check and glossary: the words and numbers shown on the detail and handout pages
(``static/clinical/quality.js`` says the same on the live page).

Input: the payloads of :mod:`clinical.quality.measure` (``readability``:
``{"input_fkgl", "output_fkgl", "measure", "score", "note"}``; ``safety``:
``{"passed", "missing": [{"kind", "text"}]}``; ``faithfulness``:
``{"passed", "flags": [{"kind", "text", "detail"}]}``; ``self_check``:
``{"p_yes", "version", "threshold", "passed"}`` or ``None``; ``glossary``:
``[{"term", "definition", "source", "source_name"}]``, shown with its
source named). The measures themselves are
computed in :mod:`clinical.quality.readability` and :mod:`clinical.quality.safety`.
"""

from __future__ import annotations

from django.conf import settings

from clinical.models import Translation
from clinical.quality import measure as quality

KIND_LABELS = {
    "dose": "Dose", "measurement": "Measurement", "number": "Number", "drug": "Drug",
    "laterality": "Side (left/right)", "negation": "Negation", "uncertainty": "Uncertainty (possible, probable)",
    "extent": "Extent (partial, not completely)", "term": "Medical term (not kept or explained)",
    "lay_term": "Medical term (plain words no vetted vocabulary gives for it)",
}
SAFETY_PASSED = ("Nothing missing: every number with its unit, dose, drug name, side (left/right), "
                 "negation, uncertainty (possible, probable) and extent (partial, not completely) of the "
                 "diagnosis is in the explanation, and each medical term is kept or explained.")
SAFETY_UNCHECKED = "Not checked (the explanation did not complete)."
FLAG_LABELS = {
    "number": "Number", "unit": "Unit", "drug": "Drug", "laterality": "Side (left/right)",
    "body_site": "Body part", "vital_sign": "Vital sign", "organ_function": "Organ function",
    "direction": "Direction (up/down)", "negation": "Negation", "person": "Who (I/he/she)",
}
FAITHFULNESS_PASSED = ("Nothing added: the explanation states no number, unit, drug, side, body part, "
                       "vital sign, organ failure, direction (up/down), negation or person that the diagnosis "
                       "does not.")
NOT_MEASURED = "Not measured for this language."
#: The model's own check (``{p}``, ``{t}``: P(yes) and the gate's threshold
#: in whole percent). The doubted rate: on laymaker-dev (cross-fitted, the
#: default model, hand-judged, the re-run as shipped with its fallback to a
#: trusted copy) 6 of the 17 delivered texts under the threshold were wrong
#: against 6 of the 218 judged others (docs/decisions/deliver-as-written.md,
#: ``trusted-copy``; without the fallback 7 of 28 against 7 of 207,
#: docs/decisions/deliver-as-written.md).
SELF_CHECK_PASSED = ("Says the same as the diagnosis by the model's own check: {p} % "
                     "(texts under {t} % are re-checked).")
SELF_CHECK_DOUBTED = ("Doubted by the model's own check: {p} % that it says the same as the diagnosis "
                      "(under {t} %). Read it against the diagnosis before giving it to the patient: "
                      "in testing, 1 in 3 such texts was wrong, against 1 in 36 of the others.")
SELF_CHECK_MEASURED = "The model's own check: {p} % that it says the same as the diagnosis."
#: What the clinician is told for a language in ``LANGUAGE_REVIEW_REQUIRED``
#: (``{language}``: its name). The checks read numbers, units, sides and
#: "I/my" in Spanish, not its drugs, negation, body parts or possessives
#: (clinical.quality.faithfulness.LANGUAGE_KINDS), so a wrong Spanish text
#: usually passes them.
LANGUAGE_REVIEW_NOTE = ("{language} explanations from this model were often wrong in ways the checks "
                        "do not catch (4 of 10 judged). Have a colleague who reads {language} check it "
                        "before giving it to a patient.")


def _grade(value: float | None) -> str:
    return "not measured (no words)" if value is None else f"grade {value:.1f}"


def readability_display(*, readability: dict, reading_level: int) -> dict:
    """``{"input", "output", "note"}``: the diagnosis's FKGL, the
    explanation's measure (FKGL for English, Szigriszt-Pazos for Spanish)
    or "Not measured for this language", and how to read it."""
    measure, score = readability.get("measure") or "", readability.get("score")
    if measure == "fkgl":
        output = f"{_grade(score)} (FKGL; asked for grade {reading_level})"
    elif measure == "szigriszt_pazos":
        output = ("not measured (no words)" if score is None
                  else f"{score:.1f} of 100 (Szigriszt-Pazos; higher is easier)")
    else:
        output = NOT_MEASURED
    input_fkgl = readability.get("input_fkgl")
    return {"input": f"{_grade(input_fkgl)} (FKGL)", "output": output, "note": readability.get("note") or ""}


def safety_display(*, safety: dict) -> dict:
    """``{"state": "passed"|"failed"|"unchecked", "summary", "missing":
    [{"label", "text"}]}``."""
    passed, missing = safety.get("passed"), safety.get("missing") or []
    if passed is None:
        return {"state": "unchecked", "summary": SAFETY_UNCHECKED, "missing": []}
    if passed:
        return {"state": "passed", "summary": SAFETY_PASSED, "missing": []}
    return {"state": "failed",
            "summary": f"Missing from the explanation ({len(missing)}): check before giving it to the patient.",
            "missing": [{"label": KIND_LABELS.get(item.get("kind"), item.get("kind", "")),
                         "text": item.get("text", "")} for item in missing]}


def faithfulness_display(*, faithfulness: dict | None) -> dict:
    """``{"state": "passed"|"failed"|"unchecked", "summary", "flags":
    [{"label", "text", "detail"}]}``."""
    faithfulness = faithfulness or {}
    passed, flags = faithfulness.get("passed"), faithfulness.get("flags") or []
    if passed is None:
        return {"state": "unchecked", "summary": SAFETY_UNCHECKED, "flags": []}
    if passed:
        return {"state": "passed", "summary": FAITHFULNESS_PASSED, "flags": []}
    return {"state": "failed",
            "summary": f"Not in the diagnosis ({len(flags)}): check these words before giving it to the patient.",
            "flags": [{"label": FLAG_LABELS.get(item.get("kind"), item.get("kind", "")),
                       "text": item.get("text", ""), "detail": item.get("detail", "")} for item in flags]}


def _percent(value: float) -> int:
    return round(value * 100)


def self_check_display(*, self_check: dict | None) -> dict | None:
    """``{"state": "passed"|"doubted"|"measured", "summary"}`` for the
    model's own check (:func:`clinical.quality.measure.self_check_payload`):
    ``doubted`` when P(yes) is under the gate's threshold, ``measured``
    where no threshold applied; ``None`` when the check did not run (the
    page then shows no panel)."""
    if not self_check:
        return None
    p, passed = self_check["p_yes"], self_check.get("passed")
    if passed is None:  # no threshold applied
        return {"state": "measured", "summary": SELF_CHECK_MEASURED.format(p=_percent(p))}
    template = SELF_CHECK_PASSED if passed else SELF_CHECK_DOUBTED
    summary = template.format(p=_percent(p), t=_percent(self_check["threshold"]))
    sentences = self_check.get("sentences")
    if sentences:
        doubted = [n for n, q in enumerate(sentences, start=1)
                   if quality.self_check_doubted(q, self_check["threshold"])]
        summary += (f" Checked sentence by sentence, the lowest shown: {sentences_named(doubted)} of {len(sentences)} "
                    f"{'is' if len(doubted) == 1 else 'are'} doubted." if doubted else
                    f" Checked sentence by sentence: none of the {len(sentences)} is doubted.")
    return {"state": "passed" if passed else "doubted", "summary": summary}


def sentences_named(numbers: list[int]) -> str:
    """Sentence numbers (from 1) in words: ``[2]`` -> "sentence 2";
    ``[2, 4, 5]`` -> "sentences 2, 4 and 5"."""
    shown = [str(n) for n in numbers]
    return (("sentence " if len(shown) == 1 else "sentences ")
            + ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1])


def language_review_notes() -> dict[str, str]:
    """``{language code: note}`` for the languages of
    ``settings.LANGUAGE_REVIEW_REQUIRED`` that translations may be written
    in; the translate page shows the note when one is chosen."""
    names = dict(Translation._meta.get_field("language").choices)
    return {code: LANGUAGE_REVIEW_NOTE.format(language=names[code])
            for code in settings.LANGUAGE_REVIEW_REQUIRED if code in names}


def translation_quality_display(*, translation: Translation) -> dict | None:
    """The panels for the text the page shows (the verified re-run's own
    check once verified, else the fast output's): ``{"readability",
    "safety", "faithfulness", "self_check", "glossary", "verified",
    "language_note"}`` (``self_check``: :func:`self_check_display`)
    (``language_note``: :func:`language_review_notes`' note for the
    translation's language, else ""); ``None`` before the output completed."""
    if translation.status != Translation.Status.COMPLETED:
        return None
    verified = translation.verified_rerun
    payload = quality.translation_quality_payload(translation)
    if verified is not None:
        payload.update(quality.rerun_quality_payload(verified))
    return {
        "readability": readability_display(readability=payload["readability"],
                                           reading_level=translation.reading_level),
        "safety": safety_display(safety=payload["safety"]),
        "faithfulness": faithfulness_display(faithfulness=payload.get("faithfulness")),
        "self_check": self_check_display(self_check=payload.get("self_check")),
        "glossary": payload.get("glossary") or [],
        "verified": verified is not None,
        "language_note": language_review_notes().get(translation.language, ""),
    }
