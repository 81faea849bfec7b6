"""Deterministic faithfulness check: what does the output state that the
input does not? The mirror of :mod:`clinical.quality.safety` (what the input
states that the output lost). Rules, rates and examples:
``docs/quality/faithfulness.md``; its examples table is run by
``tests/quality/test_faithfulness.py``.

Each flag has a ``kind`` (see :data:`KINDS`) and the offending span of the
output:

* ``number``: a number in the output (digits, or a number word such as
  "two", "ochenta y uno") whose value the input does not hold, in digits
  or in words (num2words 0.5.14, English and Spanish, via
  :func:`clinical.quality.safety.number_words`). "twice"/"once" count as 2/1.
  Weak number words are not read in the output ("one", "a", "un/una",
  "first", "second"): they are mostly not quantities. Also a clinical
  grade written "N+" (0-4: reflexes, pulses, edema, urine dipstick) read as
  a count or a bound ("2 or more", "at least two"; ``detail`` says so).
* ``unit``: a unit written after a number in the output (``mg``,
  "milligrams", "days", ...; the unit table of
  :data:`clinical.quality.safety_vocab.UNITS`) when the input has no number with
  that unit.
* ``drug``: a medicine or drug class in the output
  (drug-named-entity-recognition 2.0.9, the same dictionary and filter as
  the safety check) that the input does not name, by any of its names.
* ``laterality``: "left", "right", "both sides"/"bilateral" (Spanish
  izquierdo/derecho/ambos lados) in the output when the input names no
  side, or names only the other side (``detail`` says "flipped"); a
  bilateral input supports left and right.
* ``body_site``: an organ or body part named in the output that the
  input does not support. The vocabulary is UBERON (the Uberon
  multi-species anatomy ontology, release 2026-04-01, as shipped inside
  cellxgene-ontology-guide 1.11.1: labels, exact synonyms and the
  is_a/part_of ancestors of 16,000 terms). An output term is supported
  when the input names the same term, a part of it, or a whole it is part
  of (e.g. "heart" by "aortic valve"), or uses a Latin/Greek combining
  form of it ("cardiac", "renal", "cerebral": :data:`COMBINING_FORMS`,
  a hand table whose source is given there; "upper"/"lower" before
  "extremity" narrow it to an arm or a leg, :data:`QUALIFIED_ROOTS`). A few lay words that UBERON
  lacks as exact synonyms ("belly", "spine", "bladder") are mapped to
  UBERON terms in :data:`LAY_WORDS`; class words that name no site
  ("organ", "tissue", "blood") are ignored (:data:`GENERIC_SITES`).
* ``vital_sign``: a vital sign (blood pressure, heart rate, respiratory
  rate, body temperature, oxygen saturation: HL7 FHIR R4's Vital Signs
  profile) named in the output when nothing in the input grounds it (its
  name, abbreviation, unit, or a finding defined by it such as
  "hypertension"): :mod:`clinical.quality.vitals`.
* ``organ_function``: a claim that something fails, is damaged or does
  not work ("the liver is not working as well as it should") in an
  output that names a body site, when the input has no word of lost
  function or harm (failure, insufficiency, dysfunction, injury, a
  "-pathy", reduced function, CHF/AKI/CKD...):
  :mod:`clinical.quality.function_claims`.
* ``direction``: a direction of change the input does not state (the
  rule and its limits: :func:`_direction_flags`). A measure whose value
  goes up or down (blood pressure, heart rate, breathing rate, blood
  sugar, temperature, oxygen, potassium, sodium, calcium, magnesium,
  phosphate, chloride: :data:`DIRECTION_MEASURES`), paired with the
  direction word that governs it in its clause ("lower blood pressure",
  "potassium was high", "hyperkalemia"): flagged when the output says the
  opposite of the input, of the same type (a high or low state, or a
  change: "hypertension" -> "a medicine to lower blood pressure" is
  treatment, not a reversal), or when the input gives the measure only
  an ambiguous verb whose direction depends on the patient ("Naloxone
  improves blood pressure", in shock: raises it) and the output commits
  to one ("helps lower blood pressure"). Pain, risk and symptoms are no
  measures here: "improves pain" -> "reduces pain" says the same.
* ``negation``: polarity. NegEx-style cues (Chapman et al. 2001) with a
  forward scope of five words (backward for "absent", "ruled out",
  "negative", ...). Flagged: a content word the output negates that the
  input states without any negation anywhere near it ("you do not have a
  fever" for "Fever."), and a content word the input negates that the
  output states with no negation in its sentence ("you have a fever" for
  "No fever."). Words are compared by their first five letters. Where the
  input's only negations are implicit ("nonspecific", "afebrile"), each
  negates its own root only, and the output's negated head word (the
  first content word after the cue, three letters or more and not one of
  scikit-learn's English stop words) is flagged when the input states it
  ("no gas" for "nonspecific bowel gas pattern"). A double negative the
  input does not have is flagged too: a negative subject and a negated
  verb in one clause ("None of the studies did not address it" for "None
  of the included studies addressed it", which reads as its opposite).
  Limited recall by design: a rewording of the negated word is not seen.
* ``person``: who is who. First person singular ("I", "my", "me";
  Spanish "yo", "mi", "mis") when the input has no first person (the
  model speaking as the clinician or as the patient); "he"/"she"
  (his/her/him) of a sex the input does not give: the input names nobody
  in the third person, or names someone without a sex ("the patient says
  he": ``detail`` "sex not in input"), or only the other sex (``detail``:
  "swapped"). A sex is given by a pronoun or a word such as "man",
  "mother", "pregnant". A relative or carer the input does not name
  (:data:`RELATIVES`: "the patient's parents" for a legal guardian;
  English only).

English and Spanish outputs (``language``); the input is English. For
Spanish only ``number``, ``unit``, ``laterality`` and ``person`` are
checked: the drug dictionary, the anatomy vocabulary, the vital signs'
words, the function claims, the direction words and the negation cues are English (a Spanish output would be flagged for every organ it
names), so those kinds are skipped, not guessed.

Pure Python over dictionaries and compiled regular expressions: median
0.33-0.37 ms, P95 about 1 ms per laymaker sentence once :func:`warm` has loaded the
drug dictionary and the anatomy index (``python -m bench.faithfulness_rates``).
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import re
import threading
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from clinical.quality.function_claims import organ_function_spans
from clinical.quality.safety import _numeric_space, number_words  # one folding for forms and matches
from clinical.quality.safety_vocab import LATERALITY_INPUT, UNITS
from clinical.quality.textnorm import normalize
from clinical.quality.vitals import vital_sign_spans

KINDS = ("number", "unit", "drug", "laterality", "body_site", "vital_sign", "organ_function", "direction", "negation",
         "person")
LANGUAGES = ("en", "es")
#: Kinds checked per output language (see the module docstring).
LANGUAGE_KINDS = {"en": KINDS, "es": ("number", "unit", "laterality", "person")}


@dataclass(frozen=True)
class FaithfulnessFlag:
    """One statement of the output that the input does not support:
    ``kind`` (see :data:`KINDS`), the output's ``text`` for it, its
    character offsets ``start``/``end`` in the output, and a short
    ``detail`` ("not in input", "flipped: input says right", ...)."""

    kind: str
    text: str
    start: int
    end: int
    detail: str = "not in input"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FaithfulnessResult:
    """Outcome: ``flags`` in output order; ``passed`` when there are none;
    ``checked``: the kinds that were checked for this language."""

    flags: tuple[FaithfulnessFlag, ...]
    checked: tuple[str, ...] = KINDS

    @property
    def passed(self) -> bool:
        return not self.flags

    def flag_dicts(self) -> list[dict]:
        """``[{"kind", "text", "start", "end", "detail"}]``, as stored on a translation."""
        return [flag.as_dict() for flag in self.flags]

    def counts_by_kind(self) -> dict[str, int]:
        """Flags by kind, counts only (no clinical text), for audit events."""
        counts: dict[str, int] = {}
        for flag in self.flags:
            counts[flag.kind] = counts.get(flag.kind, 0) + 1
        return counts


# ---------------------------------------------------------------- text


_WORD = re.compile(r"[a-z][a-z']*")
_SENTENCE_END = re.compile(r"[.;:!?\n]")

# ---------------------------------------------------------------- numbers and units

_DIGITS = re.compile(r"(?<![a-z\d.,])\d+(?:[.,]\d+)*|(?<![a-z\d])[.,]\d+")
#: Output number words not read as quantities (mostly articles or pronouns).
WEAK_NUMBER_WORDS = {"one", "a", "an", "un", "una", "uno", "first", "primero", "primera", "primer",
                     "second", "segundo", "segunda", "cero", "zero", "none", "a half", "half",
                     "medio", "media", "single"}
#: Input words that hold a count without being a numeral.
COUNT_WORDS = {"once": 1, "twice": 2, "thrice": 3, "single": 1, "double": 2, "triple": 3, "dozen": 12,
               "couple": 2, "pair": 2, "both": 2, "bilateral": 2, "bilaterally": 2, "dos veces": 2,
               "una vez": 1, "bicuspid": 2, "tricuspid": 3, "biceps": 2, "triceps": 3, "quadriceps": 4}
#: What may separate the words of one number: spaces or hyphens
#: ("twenty-nine"), with an "and" / "y" between ("one hundred and twelve",
#: "ochenta y uno"), which :func:`clinical.quality.safety.number_words`
#: leaves out of its forms (its ``_numeric_space`` folds a match back to
#: such a form).
_NUMBER_WORD_GAP = r"[\s-]+(?:(?:and|y)[\s-]+)?"


@functools.cache
def _number_words_re() -> tuple[re.Pattern, dict[str, Decimal]]:
    """Number words 0-100, tens and hundreds to 1,000, ordinals to 31,
    English and Spanish (num2words), as one regular expression in which
    the words of a number may be joined by spaces or hyphens, with "and"
    between them or not (:data:`_NUMBER_WORD_GAP`), with each number's
    value by its form (``_numeric_space`` of a match gives it)."""
    values: dict[str, Decimal] = {}
    numbers = list(range(101)) + list(range(200, 1001, 100)) + [1000, 1500, 2000]
    for n in numbers:
        for form in number_words(Decimal(n), ordinal=n <= 31):
            values.setdefault(form, Decimal(n))
    values.update({"half": Decimal("0.5"), "a half": Decimal("0.5"), "medio": Decimal("0.5")})
    for word, value in COUNT_WORDS.items():
        values.setdefault(word, Decimal(value))
    alternatives = sorted(values, key=len, reverse=True)
    patterns = (_NUMBER_WORD_GAP.join(map(re.escape, form.split(" "))) for form in alternatives)
    return re.compile(r"(?<![a-z])(?:" + "|".join(patterns) + r")(?![a-z])"), values


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text).normalize()
    except InvalidOperation:
        return None


def _digit_values(token: str, language: str) -> set[Decimal]:
    """Values a digit token may mean: "1,000" and "1.5" in English; "1,5"
    and "1.000" also in Spanish; each part of a malformed token."""
    values = {_decimal(token.replace(",", ""))}
    if "," in token and (language != "en" or re.fullmatch(r"\d+,\d{1,2}", token)):
        values.add(_decimal(token.replace(".", "").replace(",", ".")))
    if language != "en" and re.fullmatch(r"\d{1,3}(?:\.\d{3})+", token):
        values.add(_decimal(token.replace(".", "")))
    for part in re.split(r"[.,]", token):
        if part and None in values:
            values.add(_decimal(part))
    return {v for v in values if v is not None}


def _numbers(norm: str, language: str, *, output: bool) -> list[tuple[int, int, set[Decimal], bool]]:
    """``(start, end, values, is_word)`` of every number in normalised text."""
    found = []
    for m in _DIGITS.finditer(norm):
        if output and re.match(r"\s*\)", norm[m.end():]) and re.fullmatch(r"\d{1,2}", m.group(0)):
            continue  # a list marker "1)"
        found.append((m.start(), m.end(), _digit_values(m.group(0), language), False))
        # a range or a score written together: "2-3", "3/5", "1+"
    pattern, values = _number_words_re()
    for m in pattern.finditer(norm):
        word = _numeric_space(m.group(0))
        if output and word in WEAK_NUMBER_WORDS:
            continue
        found.append((m.start(), m.end(), {values[word]}, True))
    found.sort()
    return found


_UNIT_PATTERNS: dict[str, tuple[re.Pattern, re.Pattern]] | None = None
_QUOTE_MARKS = ("''", '"')


def _unit_patterns() -> dict[str, tuple[re.Pattern, re.Pattern]]:
    """Unit key → (output pattern after a number, input pattern after a number)."""
    global _UNIT_PATTERNS
    if _UNIT_PATTERNS is None:

        patterns = {}
        for key, (_, input_re, forms) in UNITS.items():
            # Single letters ("g", "l", "u", "h") are units only glued to the number or before a "/";
            # an inch mark ('' or ") is one only in the input: in an output it is as often a closing quote.
            alternatives = sorted({normalize(f) for f in forms if len(f) > 1 and f not in _QUOTE_MARKS},
                                  key=len, reverse=True)
            out = r"\s*-?\s*(?:" + "|".join(re.escape(a) for a in alternatives) + r")(?![a-z])"
            patterns[key] = (re.compile(out), re.compile(r"\d\s*-?\s*(?:" + input_re + r")(?![a-z])",
                                                         re.IGNORECASE))
        _UNIT_PATTERNS = patterns
    return _UNIT_PATTERNS


def _input_units(source: str, source_norm: str) -> set[str]:

    units = set()
    pattern, _ = _number_words_re()
    numbers_as_digits = pattern.sub(lambda m: "0", source_norm)  # "two days" reads as "0 days"
    for key, (_, input_re) in _unit_patterns().items():
        if input_re.search(source) or input_re.search(numbers_as_digits):
            units.add(key)
        elif key in ("year", "month", "week", "day", "hour", "minute") and \
                re.search(r"(?<![a-z])(?:" + UNITS[key][1] + r")(?![a-z])", source, re.IGNORECASE):
            units.add(key)  # "a few days", "for years": the unit is in the input
    return units


#: A clinical grade "N+", 0-4 (deep tendon reflexes, pulses, pitting edema, urine dipstick), not "65+ years".
_GRADE = re.compile(r"(?<![\d.,])([0-4])\s?\+(?![\d+])(?!\s*(?:y|yr|yrs|years?|hours?|hrs?|days?|weeks?|months?)\b)")
_BOUND_AFTER = {"en": r"\s+or\s+(?:more|higher|greater|above|over|better)\b",
                "es": r"\s+o\s+(?:m[aá]s|mayor|superior)\b"}
_BOUND_BEFORE = {"en": r"\b(?:at\s+least|more\s+than|greater\s+than|higher\s+than|over|above)\s+$",
                 "es": r"\b(?:al\s+menos|m[aá]s\s+de|mayor\s+de|por\s+lo\s+menos)\s+$"}
_BOUND_IN = re.compile(r"\bor\s+(?:more|higher|greater|above|over)\b|\b(?:at\s+least|more\s+than|greater\s+than)\b|>")


def _grade_flags(source_norm: str, output: str, output_norm: str, language: str,
                 output_numbers: list[tuple[int, int, set[Decimal], bool]]) -> list[FaithfulnessFlag]:
    """A grade of the input ("reflexes are 2+") that the output reads as a
    count or a lower bound ("2 or more", "at least two"), when the input
    states no bound itself. ``output_numbers``: :func:`_numbers` of the output."""
    grades = {Decimal(m.group(1)) for m in _GRADE.finditer(source_norm)}
    if not grades or _BOUND_IN.search(source_norm):
        return []
    flags = []
    for start, end, values, _ in output_numbers:
        if output_norm[end:end + 1] == "+" or not values & grades:
            continue
        after = re.match(_BOUND_AFTER[language], output_norm[end:])
        before = re.search(_BOUND_BEFORE[language], output_norm[:start])
        if after or before:
            span_start, span_end = (before.start() if before else start), (end + after.end() if after else end)
            flags.append(FaithfulnessFlag("number", output[span_start:span_end], span_start, span_end,
                                          "a grade (N+) read as a count or a bound"))
    return flags


def _number_flags(source: str, source_norm: str, output: str, output_norm: str,
                  language: str) -> list[FaithfulnessFlag]:
    input_values: set[Decimal] = set()
    for _, _, values, _ in _numbers(source_norm, "en", output=False):
        input_values |= values
    output_numbers = _numbers(output_norm, language, output=True)
    flags = _grade_flags(source_norm, output, output_norm, language, output_numbers)
    units_in = None
    for start, end, values, is_word in output_numbers:
        if not values & input_values:
            flags.append(FaithfulnessFlag("number", output[start:end], start, end))
        for key, (out_re, _) in _unit_patterns().items():
            m = out_re.match(output_norm, end)
            if m is None:
                continue
            if units_in is None:
                units_in = _input_units(source, source_norm)
            if key == "degree" and re.search(r"\b(?:temp|temperature|febrile|afebrile|fever|tmax)\b", source_norm):
                break  # a temperature reading: "99" to "99 degrees"
            if key not in units_in:
                unit_start = end + len(m.group(0)) - len(m.group(0).lstrip(" -"))
                flags.append(FaithfulnessFlag("unit", output[unit_start:m.end()], unit_start, m.end()))
            break
    return flags


# ---------------------------------------------------------------- drugs

_drug_lock = threading.Lock()
_DRUG_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-]*")
#: Dictionary entries that are everyday words in a plain-language text
#: (read from the flags on the clinicians' rewrites, docs/quality/faithfulness.md).
COMMON_WORD_DRUGS = {"water", "oxygen", "salt", "sugar", "iron", "air", "alcohol", "caffeine", "calcium",
                     "potassium", "sodium", "glucose", "vitamin", "fluid", "blood"}


def _drugs(text: str) -> list[tuple[dict, int, int]]:
    """Drug mentions with word offsets (drug-named-entity-recognition; the
    safety check's filter: entries with a MedlinePlus or NHS page, a MeSH
    pharmacologic action, or a DrugBank small molecule)."""
    from drug_named_entity_recognition import find_drugs

    words = list(_DRUG_WORD.finditer(text))
    with _drug_lock:  # the library keeps module-level state
        matches = find_drugs([w.group(0) for w in words], is_ignore_case=True)
    kept = []
    for data, first, last in matches:
        if (data.get("medline_plus_id") or data.get("nhs_url")
                or any(t.startswith("D27.505") for t in data.get("mesh_tree") or ())
                or (data.get("drugbank_id") and data.get("smiles"))):
            if data.get("matching_string", "").lower() in COMMON_WORD_DRUGS or \
                    normalize(data.get("matching_string", "")) in _anatomy_index()["names"]:
                continue  # an everyday word, or a body site ("thyroid") the dictionary also holds
            kept.append((data, words[first].start(), words[max(first, last - 1)].end()))  # end exclusive
    return kept


def _drug_flags(source: str, source_norm: str, output: str) -> list[FaithfulnessFlag]:
    out = _drugs(output)
    if not out:
        return []
    input_names = set()
    for data, _, _ in _drugs(source):
        input_names |= {(data.get("name") or "").lower(), data["matching_string"].lower()}
    flags = []
    for data, start, end in out:
        names = {(data.get("name") or "").lower(), data["matching_string"].lower()} - {""}
        if names & input_names or any(re.search(rf"(?<![a-z]){re.escape(normalize(n))}(?![a-z])", source_norm)
                                      for n in names):
            continue
        flags.append(FaithfulnessFlag("drug", output[start:end], start, end))
    return flags


# ---------------------------------------------------------------- laterality

#: Paired parts after "both"/"each" that name a bilateral finding.
_PAIRED = r"sides|legs|arms|eyes|ears|lungs|kidneys|feet|hands|knees|hips|breasts|shoulders|ankles|wrists|elbows"
_SIDES_OUT = {
    "left": re.compile(r"\bleft\b(?!\s+(?:alone|over|behind|out|to|with|in\s+place))|\bizquierd[oa]s?\b"),
    "right": re.compile(r"(?<!\ball )(?<!\bthat's )(?<!\bis )(?<!\bfeel )(?<!\bfeels )(?<!\bfeeling )(?<!\bnot )\bright\b(?!\s+(?:away|now|after|before|amount|"
                        r"kind|place|time|way|thing|dose|treatment|medicine|size|level))|\bderech[oa]s?\b"),
    "bilateral": re.compile(r"\bbilateral(?:ly)?\b|\b(?:both|each)\s+(?:side|" + _PAIRED + r")\b|\bambos lados\b|"
                            r"\bamb[oa]s\s+(?:piernas|brazos|ojos|oidos|pulmones|rinones|pies|manos|lados)\b"),
}


#: Sided clinical abbreviations: LUE/RLE (upper/lower extremity), LUQ/RLQ
#: (abdominal quadrant), RUL/LLL/RML (lung lobe), BLE/BUE (both extremities).
_SIDE_ABBREVIATIONS = {"left": re.compile(r"\bL(?:UE|LE|UQ|LQ|UL|LL)\b"),
                       "right": re.compile(r"\bR(?:UE|LE|UQ|LQ|UL|LL|ML)\b"),
                       "bilateral": re.compile(r"\bB(?:UE|LE)\b")}


def _laterality_flags(source: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:

    sides_in = {side for pattern, side in LATERALITY_INPUT if re.search(pattern, source, re.IGNORECASE)}
    for side, pattern in _SIDE_ABBREVIATIONS.items():
        if pattern.search(source):
            sides_in.add(side)
    if re.search(r"\b(?:both|each)\s+(?:side|" + _PAIRED + r")\b", source, re.IGNORECASE):
        sides_in.add("bilateral")
    if "bilateral" in sides_in or {"left", "right"} <= sides_in:
        sides_in |= {"left", "right", "bilateral"}
    flags = []
    for side, pattern in _SIDES_OUT.items():
        for m in pattern.finditer(output_norm):
            if side in sides_in:
                continue
            other = sides_in & {"left", "right"}
            detail = f"flipped: input says {' and '.join(sorted(other))}" if other and side != "bilateral" \
                else "not in input"
            flags.append(FaithfulnessFlag("laterality", output[m.start():m.end()], m.start(), m.end(), detail))
    return flags


# ---------------------------------------------------------------- body sites

#: Latin and Greek combining forms of organs in clinical words, mapped to
#: the UBERON label they name. Source: the standard word-root tables of
#: medical terminology (e.g. Chabner, *The Language of Medicine*, 12th
#: ed., "Combining forms" per body system; Terminologia Anatomica's Latin
#: adjectives). A root matches at the start of a word or after a prefix
#: ("myo-cardi-al", "peri-cardi-al", "epi-gastr-ic").
COMBINING_FORMS: dict[str, tuple[str, ...]] = {
    "cardi": ("heart",), "coronar": ("heart",), "aort": ("aorta", "heart"), "mitral": ("heart",),
    "tricuspid": ("heart",), "ventric": ("heart", "brain"), "atri": ("heart",),
    "ren": ("kidney",), "nephr": ("kidney",), "hepat": ("liver",),
    "pulmon": ("lung", "chest"), "pneum": ("lung", "chest"), "bronch": ("lung", "chest"), "lung": ("chest",), "pleur": ("lung", "chest", "thoracic cavity"),
    "lobe": ("lung", "brain", "liver"), "alveol": ("lung",), "respirat": ("lung", "nose", "throat"),
    "cerebr": ("brain",), "encephal": ("brain",), "crani": ("head", "skull", "brain"), "cephal": ("head",),
    "neur": ("nerve", "brain", "spinal cord"), "nerv": ("nerve", "brain", "spinal cord"),
    "mening": ("brain", "spinal cord"), "intracran": ("brain", "head"), "dementi": ("brain",),
    "cognit": ("brain",), "seizur": ("brain",), "stroke": ("brain",), "mental": ("brain",),
    "gastr": ("stomach", "abdomen"), "enter": ("intestine", "abdomen"), "intestin": ("intestine", "abdomen"),
    "bowel": ("intestine", "abdomen"), "col": ("colon", "intestine"), "rect": ("rectum", "intestine"),
    "abdom": ("abdomen", "stomach", "intestine"), "periton": ("abdomen",), "lapar": ("abdomen",), "celi": ("abdomen",),
    "derm": ("skin",), "cutan": ("skin",), "rash": ("skin",), "wart": ("skin",), "ecchym": ("skin",),
    "ocul": ("eye",), "ophthalm": ("eye",), "optic": ("eye",), "retin": ("eye",), "orbit": ("eye",),
    "visual": ("eye",), "vision": ("eye",), "pupil": ("eye",), "conjunctiv": ("eye",), "corne": ("eye",),
    "ot": ("ear",), "aur": ("ear",), "tympan": ("ear",), "vestibul": ("ear",), "hearing": ("ear",),
    "nas": ("nose",), "rhin": ("nose",), "sinus": ("nose",),
    "oral": ("mouth",), "stomat": ("mouth",), "bucc": ("mouth",), "dent": ("tooth",), "odont": ("tooth",),
    "gingiv": ("gum",), "gloss": ("tongue",), "lingu": ("tongue",), "labi": ("lip",),
    "pharyn": ("throat",), "laryn": ("throat",), "trache": ("throat", "neck"),
    "esophag": ("esophagus", "throat", "stomach", "mouth"), "swallow": ("throat",),
    "thorac": ("chest",), "pector": ("chest", "shoulder", "arm"), "stern": ("chest",), "cost": ("rib", "chest"),
    "vertebr": ("back", "spine"), "spin": ("back", "spine", "spinal cord"), "lumb": ("back",),
    "thoracolumb": ("back",), "sacr": ("back", "pelvis"), "scoli": ("back", "spine"), "kyph": ("back", "spine"),
    "crur": ("leg",), "tibi": ("leg",), "fibul": ("leg",), "femor": ("leg", "thigh", "hip"), "pedal": ("foot",),
    "plant": ("foot",), "patell": ("knee",), "extremit": ("leg", "arm", "foot", "hand"), "ambul": ("leg", "foot"), "gait": ("leg", "foot"),
    "walk": ("leg", "foot"), "calf": ("leg",), "toe": ("foot",), "ped": ("foot",),
    "brachi": ("arm",), "humer": ("arm",), "ulna": ("arm",), "cubit": ("arm",), "carp": ("hand", "wrist"),
    "digit": ("hand", "foot"), "finger": ("hand",), "tars": ("foot", "ankle"),
    "mamm": ("breast",), "mast": ("breast",), "uter": ("uterus",), "hyster": ("uterus",), "metr": ("uterus",),
    "ovar": ("ovary",), "oophor": ("ovary",), "vagin": ("vagina",), "gyn": ("uterus", "vagina"),
    "obstet": ("uterus",), "pregnan": ("uterus", "abdomen"), "deliver": ("uterus", "vagina"),
    "test": ("testis",), "orch": ("testis",), "scrot": ("scrotum", "testis"), "prostat": ("prostate",),
    "semin": ("prostate", "testis"), "genit": ("penis", "vagina"), "inguin": ("groin",),
    "vesic": ("bladder",), "cyst": ("bladder",), "urin": ("bladder", "kidney"), "ur": ("bladder", "kidney"),
    "arter": ("artery",), "ven": ("vein",), "phleb": ("vein",), "vascul": ("blood vessel",),
    "angi": ("blood vessel",), "vessel": ("blood vessel",), "circulat": ("heart", "blood vessel"),
    "hem": ("blood vessel",), "my": ("muscle",), "muscul": ("muscle",), "tone": ("muscle",),
    "tendon": ("muscle", "tendon"), "reflex": ("nerve", "muscle"), "motor": ("muscle", "nerve"),
    "oste": ("bone",), "oss": ("bone",), "skelet": ("bone",), "fractur": ("bone",), "arthr": ("joint",),
    "articul": ("joint",), "splen": ("spleen",), "pancrea": ("pancreas",), "thyr": ("thyroid gland", "neck"),
    "adren": ("adrenal gland",), "lymph": ("lymph node",), "cervic": ("neck", "uterine cervix"), "jugul": ("neck",),
    "carotid": ("neck",), "occipit": ("head",), "tempor": ("head",), "front": ("head",), "pariet": ("head",),
    "facial": ("face",), "append": ("appendix",), "chol": ("gallbladder",), "bili": ("gallbladder", "liver"),
    "sleep": ("brain",), "headache": ("head", "brain"), "migrain": ("head", "brain"), "vertig": ("ear", "head"),
    "dizz": ("head", "ear"), "apnea": ("lung", "throat"), "breath": ("lung", "chest"), "cough": ("lung", "throat"),
    "asthm": ("lung",), "heent": ("head", "eye", "ear", "nose", "throat"), "ent": ("ear", "nose", "throat"),
    "pelv": ("pelvis",), "hip": ("hip",), "should": ("shoulder",),
    "tonsil": ("tonsil", "throat"), "oropharyn": ("throat", "mouth"), "intraven": ("vein",),
    "spondyl": ("spine", "back", "bone"), "murmur": ("heart",), "blephar": ("eyelid", "eye"),
    "fasci": ("fascia", "muscle", "tendon"), "mole": ("skin",), "nev": ("skin",),
    "ekg": ("heart",), "ecg": ("heart",), "echocardio": ("heart",), "pacemak": ("heart",),
    "fibrillat": ("heart",), "arrhythm": ("heart",), "palpitat": ("heart",), "infarct": ("heart", "brain"),
    "pulse": ("heart", "artery", "wrist"), "radial": ("arm", "wrist"), "brca": ("breast", "ovary"),
    "cataract": ("eye",), "glaucom": ("eye",), "mucos": ("mouth", "nose", "throat", "intestine", "mucous membrane"),
    "airway": ("lung", "throat", "nose", "mouth"), "intubat": ("throat", "mouth", "lung"),
    "tube": ("throat",), "ventilat": ("lung",), "constipat": ("intestine",), "diarrh": ("intestine",),
    "nause": ("stomach",), "vomit": ("stomach", "mouth"), "stool": ("intestine",), "dysuri": ("bladder",),
    "incontin": ("bladder",), "hematuri": ("bladder", "kidney"), "dialys": ("kidney",),
    "adenopath": ("lymph node",), "pept": ("stomach",), "supin": ("back",), "scapul": ("back", "shoulder"),
    "blade": ("back", "shoulder"), "spur": ("bone",), "bile": ("bile duct", "gallbladder", "liver"),
    "eye": ("head", "face"), "ear": ("head",), "nose": ("head", "face"), "mouth": ("head", "face"),
}
#: Clinical abbreviations that name a site (common usage; matched as whole words).
ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "lue": ("arm",), "rue": ("arm",), "bue": ("arm",), "lle": ("leg",), "rle": ("leg",), "ble": ("leg",),
    "lft": ("liver",), "lfts": ("liver",), "cabg": ("heart",), "chf": ("heart",), "mi": ("heart",),
    "cad": ("heart",), "copd": ("lung",), "cva": ("brain",), "tia": ("brain",), "cns": ("brain", "spinal cord"),
    "gi": ("stomach", "intestine"), "gu": ("bladder", "kidney"), "uti": ("bladder",), "bph": ("prostate",),
    "psa": ("prostate",), "bun": ("kidney",), "gerd": ("stomach", "throat"), "ent": ("ear", "nose", "throat"),
    "heent": ("head", "eye", "ear", "nose", "throat"), "et": ("throat",), "perrla": ("eye",), "eomi": ("eye",),
    "tm": ("ear",), "tms": ("ear",), "ruq": ("abdomen", "liver"), "luq": ("abdomen",), "rlq": ("abdomen",),
    "llq": ("abdomen",), "cbc": ("blood vessel",), "dtr": ("muscle", "nerve"), "dtrs": ("muscle", "nerve"),
}
#: Roots of two or three letters match only as a whole word start without a
#: prefix, to keep "ren" out of "current" and "ot" out of "other".
_SHORT_ROOT_WORDS = {
    "ren": r"ren(?:al|o\w*)", "ot": r"ot(?:ic|itis|o\w+)", "aur": r"aur(?:al|icul\w*)", "nas": r"nas(?:al|o\w*)",
    "col": r"col(?:on\w*|ic|itis|o\w*scop\w*|ectom\w*|orect\w*)", "my": r"my(?:o\w*|algia\w*|ositis)",
    "ur": r"ur(?:eth\w*|eter\w*|ina\w*|o\w*)", "ven": r"ven(?:ous|ule\w*|a|ae|i\w*)",
    "hem": r"hem(?:orrh\w*|at\w*|o\w*)", "ped": r"ped(?:al|is)", "test": r"test(?:is|es|icl\w*|icular)",
    "ent": r"ent", "hip": r"hips?", "cost": r"cost(?:al|o\w*)", "gyn": r"gyn\w*", "metr": r"metr(?:ium|itis|o\w*)",
    "atri": r"atri(?:al|um|a)", "mast": r"mast(?:ectom\w*|itis)", "oss": r"oss(?:eous|ific\w*)",
    "front": r"frontal", "tempor": r"temporal", "cyst": r"cyst(?:itis|oscop\w*)", "plant": r"plantar",
    "carp": r"carp(?:al|us)", "digit": r"digit(?:s|al)?", "stern": r"stern(?:al|um)", "mental": r"mental\w*",
    "should": r"shoulders?", "toe": r"toes?", "walk": r"walk\w*", "sacr": r"sacr(?:al|um|o\w*)",
    "tube": r"tubes?", "nev": r"nev(?:us|i)", "ear": r"ears?", "eye": r"eyes?", "nose": r"noses?",
    "mouth": r"mouths?", "blade": r"blades?", "spur": r"spurs?", "bile": r"bile", "pept": r"peptic", "mole": r"moles?", "pulse": r"pulses?",
    "sinus": r"sinus\w*", "lobe": r"lob(?:e|es|ar|ectom\w*)", "chol": r"chol(?:e\w*|ang\w*)",
}
#: Lay words for UBERON terms that the ontology's exact synonyms lack.
LAY_WORDS: dict[str, str] = {
    "belly": "abdomen", "tummy": "abdomen", "stomach area": "abdomen", "gut": "intestine", "bowels": "intestine",
    "spine": "vertebral column", "backbone": "vertebral column", "bladder": "urinary bladder",
    "muscle": "muscle organ", "muscles": "muscle organ", "bone": "bone element",
    "bones": "bone element", "womb": "uterus", "voice box": "larynx", "windpipe": "trachea",
    "joint": "skeletal joint", "joints": "skeletal joint", "spinal cord": "spinal cord",
    "gallbladder": "gallbladder", "nerves": "nerve", "thyroid": "thyroid gland", "lymph nodes": "lymph node",
    "glands": "gland", "back of your head": "occipital region", "back of the head": "occipital region",
    "lower extremity": "hindlimb",
}
#: Output words whose UBERON term names no particular site, or that a
#: plain text uses in other senses ("blood pressure", "the body",
#: "tube", "the system"); not flagged and not used as support.
GENERIC_SITES = {"organ", "tissue", "blood", "body", "tube", "duct", "sac", "valve", "gland", "cell", "system",
                 "region", "structure", "fluid", "organism", "lobe", "wall", "layer", "space", "cavity",
                 "surface", "membrane", "vessel", "nail", "hair", "trunk", "bridge", "root", "crown", "temple",
                 "palm", "sole", "side", "lining", "skin", "part", "segment", "chamber", "opening", "tip",
                 "edge", "pit", "arch", "process", "body part", "spot", "cord", "plate", "ring", "neck of organ",
                 "adult", "adults", "fat", "involuntary muscle"}
#: Words that are body sites only after a possessive or article ("your back", "the back").
_CONTEXT_ONLY = {"back": re.compile(r"(?:your|his|her|my|the|lower|upper|middle|their)\s+$"),
                 "hand": re.compile(r"(?:your|his|her|my|the|left|right|each|both)\s+$"),
                 "head": re.compile(r"(?<!the )(?:your|his|her|my|the|their)\s+$")}

#: "Keep an eye on / out": an idiom for watching (seen in the outputs: "We
#: would monitor" became "We would keep an eye on").
_EYE_IDIOM = re.compile(r"\b(?:keep|keeps|keeping|kept)\s+(?:an|a close)\s+eye\s+(?:on|out)\b")

#: UBERON branches left out of the vocabulary: organism substance
#: (blood clot, urine, tears), life cycle stage ("adult"), embryo and
#: embryonic structure.
EXCLUDED_BRANCHES = {"UBERON:0000463", "UBERON:0000105", "UBERON:0000922", "UBERON:0002050"}
#: Distinct major sites: an ancestor that two of them share ("organ",
#: "organism subdivision", "anatomical structure") is too general to
#: support anything or to make two terms siblings.
MAJOR_SITES = ("heart", "brain", "kidney", "lung", "liver", "stomach", "eye", "ear", "nose", "mouth", "leg", "arm",
               "head", "dorsum", "neck", "chest", "abdomen", "pes", "manus", "skeletal muscle organ", "bone element",
               "zone of skin", "vertebral column", "urinary bladder", "prostate gland", "uterus", "breast",
               "intestine", "artery", "vein", "nerve", "tooth", "spinal cord", "thyroid gland", "pelvic region of trunk")
#: Shared ancestors that are still sites a text names (besides the major
#: sites and the organ systems): they support their parts and wholes but
#: do not make two of their parts neighbours.
BROAD_SITES = {"head", "abdomen", "limb", "forelimb", "hindlimb", "trunk", "digestive tract", "blood vessel",
               "central nervous system", "thoracic segment of trunk", "abdominal segment of trunk"}
#: Organs that a text may wrongly place another site in ("the muscles in
#: your brain"); regions such as "chest" or "leg" hold many sites UBERON
#: does not list as their parts, so they are not checked this way.
ORGANS = ("heart", "brain", "kidney", "lung", "liver", "stomach", "eye", "urinary bladder", "uterus",
          "intestine", "prostate gland", "thyroid gland", "spleen", "pancreas")
_RELATION = re.compile(r"\s+(?:in|of|inside|within)\s+(?:your|the|his|her|their|my)\s+")
#: How far up (part_of/is_a steps) two terms may share a specific
#: ancestor to count as neighbours ("ear canal" and "middle ear": ear).
SIBLING_DISTANCE = 2

INDEX_VERSION = 6
UBERON_FILE = "UBERON-ontology-v2026-04-01.json.zst"


def uberon_path() -> Path:
    """The UBERON JSON shipped inside cellxgene-ontology-guide (found
    without importing the package). Raises ``RuntimeError`` when it is
    not installed."""
    spec = importlib.util.find_spec("cellxgene_ontology_guide")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("cellxgene-ontology-guide is not installed; it ships the UBERON ontology file")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / UBERON_FILE


def _build_anatomy() -> dict:
    """``{"names": {name: [id]}, "ancestors": {id: [id]}, "labels": {id: label}}``
    over the terms that are part of (or are) a human body site: UBERON
    terms under "anatomical entity" with a label, deprecated ones dropped."""
    import zstandard

    with uberon_path().open("rb") as fh:
        data = json.loads(zstandard.ZstdDecompressor().stream_reader(fh).read())
    names: dict[str, list[str]] = {}
    ancestors: dict[str, dict[str, int]] = {}
    labels: dict[str, str] = {}
    for term_id, term in data.items():
        if term.get("deprecated") or not term_id.startswith("UBERON:") or not term.get("label"):
            continue
        found = term.get("ancestors") or {}
        if term_id[7] in "23" or EXCLUDED_BRANCHES & set(found) or term_id in EXCLUDED_BRANCHES:
            continue  # fish/amphibian-only ranges, substances, life stages, embryonic structures
        labels[term_id] = term["label"]
        ancestors[term_id] = {a: d for a, d in found.items() if a.startswith("UBERON:")}
        for name in [term["label"], *(term.get("synonyms") or ())]:
            key = " ".join(_WORD.findall(normalize(name)))
            if name.isupper() or "(" in name:
                continue  # abbreviations ("ALL") and qualified names
            if key and len(key) >= 3 and not re.search(r"\d", name):
                names.setdefault(key, [])
                if term_id not in names[key]:
                    names[key].append(term_id)
    by_label = {}
    for term_id, label in labels.items():
        by_label.setdefault(label.lower(), term_id)
    for word, label in LAY_WORDS.items():
        if label in by_label:
            names.setdefault(word, [])
            if by_label[label] not in names[word]:
                names[word].insert(0, by_label[label])
    # the heads of the roots table must resolve to terms
    roots = {}
    for root, targets in {**COMBINING_FORMS, **ABBREVIATIONS}.items():
        ids = []
        for target in targets:
            ids.extend(names.get(target, []) or ([by_label[target]] if target in by_label else []))
        roots[root] = ids
    major = [i for label in MAJOR_SITES for i in ([by_label[label]] if label in by_label else [])]
    counts: dict[str, int] = {}
    for term_id in major:
        for ancestor in ancestors.get(term_id, {}):
            counts[ancestor] = counts.get(ancestor, 0) + 1
    shared = {a for a, n in counts.items() if n >= 2}
    broad = sorted(a for a in shared if a in major or labels[a] in BROAD_SITES
                   or re.search(r"(?<!anatomical )(?<!functional )(?<!organ )system$", labels[a]))
    generic = sorted(shared - set(broad))
    return {"names": names, "ancestors": ancestors, "labels": labels, "roots": roots, "generic": generic,
            "broad": broad}


def anatomy_cache_path() -> Path:
    """Where the built anatomy index is cached (``$CLINICAL_CACHE/faithfulness``)."""
    source = uberon_path()
    stat = source.stat()
    root = Path(os.environ.get("CLINICAL_CACHE", Path.home() / ".cache" / "clinical"))
    return root / "faithfulness" / f"uberon-index-{INDEX_VERSION}-{stat.st_size}-{int(stat.st_mtime)}.json"


def prepare() -> Path:
    """Build the anatomy index (about 2 s) and cache it as JSON. Idempotent; no network."""
    path = anatomy_cache_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(_build_anatomy()), encoding="utf-8")
        tmp.replace(path)
    return path


@functools.cache
def _anatomy_index() -> dict:
    """The UBERON anatomy index, loaded once per process from its cache
    (built in memory when the cache folder is read-only)."""
    try:
        index = json.loads(prepare().read_text(encoding="utf-8"))
    except OSError:  # a read-only cache: build in memory
        index = _build_anatomy()
    generic = frozenset(index["generic"])
    index["generic"] = generic
    broad = frozenset(index["broad"])
    index["ancestors"] = {k: {a: d for a, d in v.items() if a not in generic}
                          for k, v in index["ancestors"].items()}
    index["max_words"] = max(len(k.split()) for k in index["names"])
    short = "|".join([*_SHORT_ROOT_WORDS.values(), *map(re.escape, ABBREVIATIONS)])
    long_roots = sorted((r for r in COMBINING_FORMS if r not in _SHORT_ROOT_WORDS), key=len, reverse=True)
    index["root_re"] = re.compile(
        r"(?<![a-z])(?:(?P<short>" + short + r")(?![a-z])|[a-z]{0,8}?(?P<long>"
        + "|".join(map(re.escape, long_roots)) + r"))")
    index["short_re"] = {root: re.compile(p + r"$") for root, p in
                         [*_SHORT_ROOT_WORDS.items(), *((a, re.escape(a)) for a in ABBREVIATIONS)]}
    index["broad_set"] = broad | {i for label in MAJOR_SITES for i in index["names"].get(label, ())}
    return index


def _singular(word: str) -> list[str]:
    forms = [word]
    irregular = {"teeth": "tooth", "feet": "foot", "lungs": "lung", "ribs": "rib"}
    if word in irregular:
        forms.append(irregular[word])
    elif word.endswith("ies"):
        forms.append(word[:-3] + "y")
    elif word.endswith("es"):
        forms += [word[:-2], word[:-1]]
    elif word.endswith("s") and not word.endswith("ss"):
        forms.append(word[:-1])
    return forms


def _sites(norm: str, index: dict, *, guard: bool = True, overlap: bool = False
           ) -> list[tuple[int, int, str, list[str]]]:
    """``(start, end, name, ids)`` of anatomy names in normalised text,
    longest first, no overlaps."""
    words = list(_WORD.finditer(norm))
    names = index["names"]
    taken = [False] * len(words)
    found = []
    for n in range(min(index["max_words"], 5, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            if not overlap and any(taken[i:i + n]):
                continue
            tokens = [w.group(0).replace("'", "") for w in words[i:i + n]]
            key = " ".join(tokens)
            hit = None
            for form in ([key] if n > 1 else _singular(key)) + ([" ".join(tokens[:-1] + [s]) for s in
                                                                 _singular(tokens[-1])][1:] if n > 1 else []):
                if form in names:
                    hit = form
                    break
            if hit is None:
                continue
            start, end = words[i].start(), words[i + n - 1].end()
            if guard and hit in ("feet", "foot") and re.search(r"\d\s*$", norm[max(0, start - 4):start]):
                continue  # "5 feet 2 inches": a length
            context = _CONTEXT_ONLY.get(hit) if guard else None
            if context is not None and not context.search(norm[max(0, start - 20):start]):
                continue
            if hit == "eye" and _EYE_IDIOM.search(norm[max(0, start - 16):end + 8]):
                continue  # "keep an eye on": watching, not an eye
            if re.match(r"\s+of\s+(?:your|the|his|her)\s+head\b", norm[end:]) and hit == "back":
                continue  # "back of your head" is one site, read through LAY_WORDS
            taken[i:i + n] = [True] * n
            found.append((start, end, hit, names[hit]))
    found.sort()
    return found


#: Roots whose site a qualifier just before the word narrows: an "upper
#: extremity" is an arm, a "lower extremity" a leg ("upper and lower
#: extremities": both), so "lower arm" for "lower extremity" is flagged;
#: a bare "extremities" still supports any limb. UBERON labels or lay
#: words; the girdles are part of the limbs in clinical usage (Terminologia
#: Anatomica: the shoulder region of the upper limb, the hip of the lower).
QUALIFIED_ROOTS: dict[str, dict[str, tuple[str, ...]]] = {
    "extremit": {"upper": ("forelimb", "shoulder"), "lower": ("hindlimb", "hip")}}
_QUALIFIER = re.compile(r"\b(upper|lower)(?:\s*(?:and|or|&|/|,)\s*(upper|lower))?\s+$")


def _root_ids(root: str, before: str, index: dict) -> list[str]:
    """The site ids a combining form or abbreviation supports, narrowed by
    a qualifier in ``before`` (the normalised text up to the word) for the
    roots of :data:`QUALIFIED_ROOTS`."""
    qualified = QUALIFIED_ROOTS.get(root)
    match = _QUALIFIER.search(before[-40:]) if qualified else None
    if match is None:
        return index["roots"].get(root, [])
    return [i for word in match.groups() if word for site in qualified[word] for i in index["names"].get(site, ())]


def _input_site_ids(source_norm: str, index: dict) -> set[str]:
    ids: set[str] = set()
    for _, _, _, term_ids in _sites(source_norm, index, guard=False, overlap=True):
        ids.update(term_ids)
    for m in index["root_re"].finditer(source_norm):
        root = m.group("long")
        if root is None:
            text = m.group("short")
            root = next((r for r, p in index["short_re"].items() if p.match(text)), None)
        if root is not None:
            ids.update(_root_ids(root, source_norm[:m.start()], index))
    return ids


def _supported(term_ids: list[str], input_ids: set[str], index: dict) -> bool:
    """Same term, part/whole (either way), or neighbours: a shared
    specific ancestor within :data:`SIBLING_DISTANCE` of both."""
    ancestors = index["ancestors"]
    for term in term_ids:
        if term in input_ids:
            return True
        term_anc = ancestors.get(term, {})
        near = {a for a, d in term_anc.items() if d <= SIBLING_DISTANCE and a not in index["broad_set"]}
        for source in input_ids:
            source_anc = ancestors.get(source, {})
            if term in source_anc or source in term_anc:
                return True
            if any(source_anc.get(a, 99) <= SIBLING_DISTANCE for a in near):
                return True
    return False


def _site_flags(source_norm: str, output: str, output_norm: str,
                named: list[tuple[int, int, str, list[str]]]) -> list[FaithfulnessFlag]:
    """``body_site`` flags for the sites ``named`` in the output (:func:`_sites`)."""
    index = _anatomy_index()
    out_sites = [s for s in named if s[2] not in GENERIC_SITES]
    if not out_sites:
        return []
    input_ids = _input_site_ids(source_norm, index)
    input_ids -= index["generic"]
    flags = []
    for start, end, name, term_ids in out_sites:
        if not _supported(term_ids, input_ids, index):
            flags.append(FaithfulnessFlag("body_site", output[start:end], start, end))
    # "the muscles in your brain": a site placed inside an organ it is no part of
    organs = {i for label in ORGANS for i in index["names"].get(label, ())}
    for (a_start, a_end, _, a_ids), (b_start, b_end, _, b_ids) in itertools.pairwise(out_sites):
        if not _RELATION.fullmatch(output_norm[a_end:b_start]) or not set(b_ids) & organs:
            continue
        if any(flag.start == b_start for flag in flags):
            continue  # the organ itself is already flagged
        ancestors = index["ancestors"]
        related = any(b in ancestors.get(a, {}) or a in ancestors.get(b, {}) for a in a_ids for b in b_ids)
        if not related:
            flags.append(FaithfulnessFlag("body_site", output[a_start:b_end], a_start, b_end,
                                          "placed in an organ it is no part of"))
    return flags


# ---------------------------------------------------------------- negation

#: Forward negation cues (NegEx triggers, Chapman et al. 2001, the common
#: subset, with the lay forms a rewrite uses).
NEGATION_FORWARD = re.compile(
    r"\b(?:no|not|without|denies|denied|deny|denying|never|none|nothing|neither|nor|negative\s+for|free\s+of|"
    r"absence\s+of|rule\s+out|ruled\s+out|r/o|w/o|wo|cannot|can't|unable\s+to|lack\s+of|lacks|lacking|non)\b|n't\b")
#: Backward cues: the negated words come before ("fever is absent").
NEGATION_BACKWARD = re.compile(
    r"\b(?:absent|negative|ruled\s+out|excluded|resolved|unremarkable|normal|clear|gone|free|"
    r"within\s+normal\s+limits|wnl)\b")
#: Cues that mark an output negation as a claim (not "normal", "clear").
STRONG_CUE = re.compile(r"no|not|without|never|none|nothing|neither|nor|denies|denied|deny|n't|cannot|can't|"
                        r"absent|negative|ruled\s+out|excluded|free\s+of|absence\s+of|lack\s+of")
#: NegEx pseudo-triggers that do not negate ("no change", "not only").
PSEUDO = re.compile(r"\b(?:no\s+(?:increase|change|further|longer|doubt|matter)|not\s+only|not\s+necessarily|"
                    r"not\s+certain|cannot\s+be\s+(?:ruled\s+out|excluded)|can\s+not\s+be\s+(?:ruled\s+out|excluded)|"
                    r"without\s+difficulty)\b")
#: Implicit negation in clinical words: a- / non- / un- / -free adjectives
#: ("atraumatic", "nontender", "afebrile") mark a negated finding.
IMPLICIT_PREFIXES = ("non", "un", "in", "dis", "an", "a")
IMPLICIT_SUFFIXES = ("free", "less")
IMPLICIT_NEGATION = re.compile(rf"\b(?:{'|'.join(IMPLICIT_PREFIXES)})[a-z]{{4,}}\b"
                               rf"|\b[a-z]+(?:{'|'.join(IMPLICIT_SUFFIXES)})\b")
#: The prefix and suffix of an implicit negation, stripped to leave the root it negates.
_IMPLICIT_PARTS = re.compile(rf"^(?:{'|'.join(IMPLICIT_PREFIXES)})(?=[a-z]{{4}})|(?:{'|'.join(IMPLICIT_SUFFIXES)})$")
#: Conjunctions and subordinating or relative words that start another
#: clause, shared by the negation scope (:data:`SCOPE_TERMINATORS`) and the
#: one-clause rule of :data:`DOUBLE_NEGATIVE` (:data:`CLAUSE_WORDS`).
_CLAUSE_START = {"but", "although", "though", "which", "who", "because", "since", "and", "or", "while", "when",
                 "if", "as"}
SCOPE_TERMINATORS = _CLAUSE_START | {"however", "except", "so"}
#: Not "so", "however" or "except", which end a negation's scope but may
#: stand inside one clause ("nothing so far has not worked").
CLAUSE_WORDS = _CLAUSE_START | {"whom", "whose", "that", "where", "unless", "nor"}
STOPWORDS = {"the", "any", "of", "for", "to", "in", "on", "at", "with", "is", "are", "was", "were", "be", "been",
             "has", "have", "had", "evidence", "signs", "sign", "acute", "other", "significant", "obvious",
             "known", "history", "there", "this", "that", "your", "you", "they", "them", "their", "his", "her",
             "she", "him", "from", "into", "about", "very", "more", "less", "much", "some", "all", "also",
             "does", "did", "doing", "done", "will", "would", "could", "should", "can", "may", "might", "must",
             "patient", "seem", "seems", "seen", "found", "feel", "feels", "felt", "show", "shows", "showed",
             "appear", "appears", "noted", "note", "present", "presents", "get", "gets", "got", "make",
             "made", "take", "taken", "took", "need", "needs", "like", "well", "just", "still", "time", "today",
             "good", "issue", "problem", "problems", "thing", "things", "really", "reports", "report",
             "state", "states", "said", "says", "tell", "tells", "told", "being", "such", "than", "then",
             "what", "where", "here", "these", "those", "it's", "its", "it", "we", "our", "my", "me", "i",
             "because", "normal", "abnormal", "change", "changes", "changed", "sure", "able", "certain",
             "clear", "likely", "unlikely", "left", "right", "side", "sides", "both", "definite", "definitely", "cause", "caused", "causing"}


def _stem(word: str) -> str:
    return word[:5]


def _negated_spans(norm: str) -> list[tuple[int, int, set[str], int, int]]:
    """``(cue start, cue end, scope stems, scope start, scope end)`` per cue."""
    pseudo = [m.span() for m in PSEUDO.finditer(norm)]
    spans = []
    for cue in NEGATION_FORWARD.finditer(norm):
        if any(a <= cue.start() < b for a, b in pseudo):
            continue
        rest = norm[cue.end():]
        stop = _SENTENCE_END.search(rest)
        scope, end = [], cue.end()
        for word in _WORD.finditer(rest[: stop.start() if stop else len(rest)]):
            if word.group(0) in SCOPE_TERMINATORS or len(scope) >= 5:
                break
            scope.append(word.group(0))
            end = cue.end() + word.end()
        spans.append((cue.start(), cue.end(), {_stem(w) for w in scope if _content(w)}, cue.end(), end))
    for cue in NEGATION_BACKWARD.finditer(norm):
        if any(a <= cue.start() < b for a, b in pseudo):
            continue
        before = norm[:cue.start()]
        stop = max(before.rfind(c) for c in ".;:!?\n")
        words = list(_WORD.finditer(before[stop + 1:]))
        scope = []
        for word in reversed(words):
            if word.group(0) in SCOPE_TERMINATORS or len(scope) >= 5:
                break
            scope.append(word.group(0))
        spans.append((cue.start(), cue.end(), {_stem(w) for w in scope if _content(w)},
                      stop + 1 + (words[-len(scope)].start() if scope else 0), cue.start()))
    return spans


def _content(word: str) -> bool:
    return len(word) >= 4 and word not in STOPWORDS and word.replace("'", "") not in STOPWORDS


def _head_word(word: str) -> bool:
    """A word that may head a negated phrase: a content word, or a three-letter
    word that is not one of scikit-learn's English stop words ("gas", "leg")."""
    if len(word) == 3:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return word not in ENGLISH_STOP_WORDS and word not in STOPWORDS
    return _content(word)


def _implicit_roots(norm: str) -> set[str]:
    """Stems of the roots implicit negations negate ("nonspecific" -> "speci")."""
    return {_stem(_IMPLICIT_PARTS.sub("", m.group(0))) for m in IMPLICIT_NEGATION.finditer(norm)}


#: A double negative: a negative subject ("none of", "nobody", "nothing",
#: "neither") and a negated verb in the same clause ("None of the studies
#: did not address it"), which reads as the opposite ("all of them did").
#: The clause ends at a punctuation mark or a clause word
#: (:data:`CLAUSE_WORDS`: "none dropped out because it was not ..." is not one).
DOUBLE_NEGATIVE = re.compile(
    r"\b(?:none|nobody|no\s+one|nothing|neither)\b"
    r"(?:(?!\b(?:" + "|".join(sorted(CLAUSE_WORDS)) + r")\b)[^.;:!?,\n])*?"
    r"\b(?:(?:do|does|did|is|are|was|were|has|have|had|can|could|will|would|should|may|might|must)"
    r"(?:\s+not\b|n't\b)|cannot\b|never\b)")


def _negation_flags(source_norm: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:
    in_neg = _negated_spans(source_norm)
    out_neg = _negated_spans(output_norm)
    in_negated = set().union(*(s for _, _, s, _, _ in in_neg)) if in_neg else set()
    in_all = {_stem(w.group(0)) for w in _WORD.finditer(source_norm) if _content(w.group(0))}
    flags = []
    # (1) the output negates what the input states plainly: only when the input has no explicit negation.
    # With no negation at all, any negated content word counts; with only implicit ones ("nonspecific"),
    # which negate their own root, the negated head word counts, if it is not such a root.
    raw_input_cue = NEGATION_FORWARD.search(source_norm) or NEGATION_BACKWARD.search(source_norm)
    if not raw_input_cue:
        implicit = bool(IMPLICIT_NEGATION.search(source_norm))
        if implicit:
            roots = _implicit_roots(source_norm)
            in_heads = {_stem(w.group(0)) for w in _WORD.finditer(source_norm) if _head_word(w.group(0))} - roots
        for cue_start, cue_end, stems, _, scope_end in out_neg:
            if not STRONG_CUE.fullmatch(output_norm[cue_start:cue_end]):
                continue
            if implicit:
                words = [w.group(0) for w in _WORD.finditer(output_norm[cue_end:scope_end])]
                head = next((w for w in words if _head_word(w)), None)
                if any(_stem(w) in roots for w in (words[:words.index(head) + 1] if head else words)):
                    continue  # the input's own implicit negation in words: "not clear" for "unclear"
                hit = {_stem(head)} & in_heads if head else set()
            else:
                hit = stems & in_all
            if hit:
                start, end = min(cue_start, scope_end), max(cue_end, scope_end)
                flags.append(FaithfulnessFlag("negation", output[start:end], start, end,
                                              "negated in output, affirmed in input"))
    # (2) the output affirms what the input negates: a negated input word in an output sentence with no negation
    if in_neg:
        for sentence in re.finditer(r"[^.;:!?\n]+", output_norm):
            text = sentence.group(0)
            if NEGATION_FORWARD.search(text) or NEGATION_BACKWARD.search(text) or IMPLICIT_NEGATION.search(text):
                continue
            for word in _WORD.finditer(text):
                stem = _stem(word.group(0))
                if _content(word.group(0)) and stem in in_negated and stem not in _affirmed_stems(source_norm, in_neg):
                    start, end = sentence.start() + word.start(), sentence.start() + word.end()
                    flags.append(FaithfulnessFlag("negation", output[start:end], start, end,
                                                  "affirmed in output, negated in input"))
                    break
    # (3) a double negative the input does not have: it turns "none did" into "all did"
    if not DOUBLE_NEGATIVE.search(source_norm):
        for match in DOUBLE_NEGATIVE.finditer(output_norm):
            flags.append(FaithfulnessFlag("negation", output[match.start():match.end()], match.start(),
                                          match.end(), "double negative, not in input"))
    return flags


def _affirmed_stems(norm: str, spans) -> set[str]:
    """Stems of words outside every negation scope and cue."""
    covered = [(min(a, c), max(b, d)) for a, b, _, c, d in spans]
    return {_stem(w.group(0)) for w in _WORD.finditer(norm)
            if _content(w.group(0)) and not any(a <= w.start() < b for a, b in covered)}


# ---------------------------------------------------------------- direction

#: Measures whose value an output may say goes up or down, with the words
#: that name them (regular expressions over folded text). The vital signs
#: of HL7 FHIR R4's Vital Signs profile (:mod:`clinical.quality.vitals`)
#: and the common serum analytes of a basic metabolic panel (LOINC 51990-0:
#: glucose, sodium, potassium, chloride, calcium) with magnesium and
#: phosphate. None is a symptom or a risk: pain, risk and symptoms have one
#: good direction, so "improves pain" -> "reduces pain" says the same.
DIRECTION_MEASURES: dict[str, str] = {
    "blood pressure": r"blood[ -]pressures?|\b[sd]?bp\b|systolic(?: blood)?(?: pressures?)?"
                      r"|diastolic(?: blood)?(?: pressures?)?|arterial pressures?",
    "heart rate": r"heart[ -]?rates?|pulse(?: rates?)?|heart ?beats?|\bhr\b",
    "respiratory rate": r"(?:breathing|respiratory|respiration) rates?",
    "blood sugar": r"(?:blood |plasma |serum |fasting )?(?:sugars?|glucose)(?: levels?)?",
    "body temperature": r"(?:body )?temperatures?|\btemp\b",
    "oxygen": r"(?:blood )?(?:oxygen|o2)(?: levels?| saturations?| sats?)?|\bspo2\b|\bsaturations?\b|oxygenation",
    "potassium": r"potassium",
    "sodium": r"sodium",
    "calcium": r"calcium",
    "magnesium": r"magnesium",
    "phosphate": r"phosphates?|phosphorus",
    "chloride": r"chloride",
}
#: A measure's good direction where it has one whatever the context
#: (oxygen: more is better), for the rule of an ambiguous input verb:
#: "improves oxygenation" -> "raises oxygen levels" is its one reading.
GOOD_DIRECTION = {"oxygen": "up"}
#: Findings that name a measure and its direction at once (the prefixes
#: hyper-/hypo-, tachy-/brady-; fever), as a state: ``(pattern, measure,
#: direction)``. "hypoglycaemic agents" are medicines that lower sugar,
#: not a low sugar, and are not read.
DIRECTION_FINDINGS: tuple[tuple[str, str, str], ...] = (
    (r"(?<!anti-)(?<!anti)\bhypertensi\w*|\bhtn\b", "blood pressure", "up"),
    (r"\bhypotensi\w*", "blood pressure", "down"),
    (r"\btachycardi\w*", "heart rate", "up"),
    (r"\bbradycardi\w*", "heart rate", "down"),
    (r"\btachypn\w*", "respiratory rate", "up"),
    (r"\bbradypn\w*", "respiratory rate", "down"),
    (r"\bhyperglyc\w*", "blood sugar", "up"),
    (r"\bhypoglyc\w*(?!\s+(?:agents?|drugs?|medicines?|medications?|therap\w*|treatments?))", "blood sugar", "down"),
    (r"\bfebrile\b|\bfevers?\b|\bpyrexi\w*|\bhypertherm\w*", "body temperature", "up"),
    (r"\bhypotherm\w*", "body temperature", "down"),
    (r"\bhypox\w*|\bdesaturat\w*", "oxygen", "down"),
    (r"\bhyperox\w*", "oxygen", "up"),
    (r"\bhyperkal\w*", "potassium", "up"),
    (r"\bhypokal\w*", "potassium", "down"),
    (r"\bhypernatr\w*", "sodium", "up"),
    (r"\bhyponatr\w*", "sodium", "down"),
    (r"\bhypercalc\w*", "calcium", "up"),
    (r"\bhypocalc\w*", "calcium", "down"),
    (r"\bhypermagnes\w*", "magnesium", "up"),
    (r"\bhypomagnes\w*", "magnesium", "down"),
    (r"\bhyperphosphat\w*", "phosphate", "up"),
    (r"\bhypophosphat\w*", "phosphate", "down"),
)
#: Direction words, each with its direction and its type: a ``state`` (the
#: value is high or low), a ``change`` (something raises or lowers it) or
#: ``any`` (a participle, "elevated", "reduced": either). A reversal is
#: flagged only within one type: "hypertension" (a high state) -> "a
#: medicine to lower your blood pressure" (a change down) is treatment,
#: not a reversal. The ambiguous words of an input ("improves",
#: "affects", "normalises"...) have the direction ``None``.
DIRECTION_WORDS: dict[str, tuple[str | None, str]] = {
    **dict.fromkeys(("high", "highest", "fast", "rapid", "racing"), ("up", "state")),
    **dict.fromkeys(("higher", "faster", "greater"), ("up", "comparative")),
    **dict.fromkeys(("elevated", "raised", "increased"), ("up", "any")),
    **dict.fromkeys(("decreased", "reduced", "lowered"), ("down", "any")),
    **dict.fromkeys(("low", "lowest", "slow", "depressed"), ("down", "state")),
    **dict.fromkeys(("slower",), ("down", "comparative")),
    **dict.fromkeys(("raise", "raises", "raising", "increase", "increases", "increasing", "rise",
                     "rises", "rising", "rose", "risen", "boost", "boosts", "boosted", "boosting", "elevate",
                     "elevates", "elevating", "elevation", "spike", "spikes", "spiked", "climb", "climbs",
                     "climbed", "up"), ("up", "change")),
    **dict.fromkeys(("lowers", "lowering", "decrease", "decreases", "decreasing",
                     "reduce", "reduces", "reducing", "reduction", "reductions", "fall", "falls",
                     "falling", "fell", "fallen", "drop", "drops", "dropped", "dropping", "decline", "declines",
                     "declined", "declining", "down"), ("down", "change")),
    **dict.fromkeys(("improve", "improves", "improved", "improving", "improvement", "improvements", "affect",
                     "affects", "affected", "affecting", "effect", "effects", "change", "changes", "changed",
                     "changing", "normalise", "normalises", "normalised", "normalising", "normalize",
                     "normalizes", "normalized", "normalizing", "normalisation", "normalization", "control",
                     "controls", "controlled", "controlling", "manage", "manages", "managed", "managing",
                     "management", "regulate", "regulates", "regulated", "regulating", "regulation",
                     "stabilise", "stabilises", "stabilised", "stabilize", "stabilizes", "stabilized",
                     "alter", "alters", "altered", "influence", "influences", "impact", "impacts"),
                    (None, "change")),
}
#: "lower" is a verb ("helps lower blood pressure": a change) after these
#: words, else a comparative ("had lower blood pressure": a state).
_LOWER_VERB_AFTER = {"to", "help", "helps", "helped", "helping", "can", "may", "might", "will", "would", "could",
                     "should", "does", "did", "do", "also", "which", "that", "it", "they", "and", "or"}
#: The types whose opposite directions contradict each other: a state
#: ("high") or a finding ("hypertension") and a change ("lowers") do not
#: (a treatment of the state), nor a comparison between groups ("lower heart
#: rate than placebo") and anything but another comparison.
_COMPATIBLE = {"finding": {"finding", "state"}, "state": {"state", "finding", "any"},
               "comparative": {"comparative"}, "change": {"change", "any"}, "any": {"any", "state", "change"}}
#: A direction after these words names a condition to avoid, not a value
#: ("aimed to avoid high blood sugar", "the risk of low blood pressure").
_AVOIDED = {"avoid", "avoids", "avoided", "avoiding", "prevent", "prevents", "prevented", "preventing",
            "prevention", "risk", "risks"}
_MOVE_VERBS = {"go", "goes", "went", "gone", "going", "come", "comes", "came", "coming", "move", "moves", "moved",
               "moving", "push", "pushes", "pushed", "bring", "brings", "brought", "drive", "drives", "drove"}
#: Words that may stand between a direction word and the measure it
#: governs: before the measure ("an increase in your blood pressure"),
#: after it ("blood pressure was too high", "blood pressure did not go up").
_BEFORE_FILLERS = {"the", "a", "an", "your", "his", "her", "their", "its", "my", "our", "patient's", "patients'",
                   "of", "in", "on", "blood", "serum", "plasma", "mean", "average", "resting", "body", "very",
                   "too", "slightly", "significantly", "dangerously", "abnormally", "markedly", "mildly", "both",
                   "levels", "level", "s"}
_AFTER_FILLERS = {"is", "was", "were", "are", "be", "been", "being", "has", "have", "had", "level", "levels",
                  "reading", "readings", "value", "values", "very", "too", "slightly", "a", "bit", "little",
                  "quite", "rather", "significantly", "markedly", "mildly", "got", "gets", "get", "getting",
                  "became", "becomes", "become", "went", "goes", "go", "going", "gone", "stayed", "stays",
                  "remained", "remains", "may", "might", "can", "could", "will", "would", "to", "also", "still",
                  "often", "usually", "dangerously", "abnormally", "much", "somewhat", "did", "does", "do",
                  "not", "no", "never", "t", "s", "that"}
_NEGATORS = {"no", "not", "never", "without", "neither", "nor", "t", "non", "cannot"}
#: A clause ends at a punctuation mark or a conjunction (as the negation
#: kind's scope does, :data:`SCOPE_TERMINATORS`), so a direction word governs
#: a measure of its own clause only.
_CLAUSE_BREAK = re.compile(r"[.;:!?,()\n]|\b(?:" + "|".join(sorted(SCOPE_TERMINATORS | {"whereas", "than", "versus",
                                                                                      "vs", "compared"}))
                           + r")\b")
_DIRECTION_MEASURE_RE = re.compile(r"\b(?:" + "|".join(f"(?P<m{i}>{p})" for i, p in enumerate(DIRECTION_MEASURES.values()))
                                    + r")\b")
_MEASURE_NAMES = list(DIRECTION_MEASURES)
_FINDINGS_RE = [(re.compile(p), m, d) for p, m, d in DIRECTION_FINDINGS]
_TOKEN = re.compile(r"[a-z0-9]+")
_BEFORE_WINDOW, _AFTER_WINDOW = 4, 5


def _direction_of(token: str, previous: str | None) -> tuple[str | None, str] | None:
    if token in ("up", "down") and previous not in _MOVE_VERBS:
        return None  # "go up", "went down"; not "set up"
    if token == "lower":
        return ("down", "change") if previous in _LOWER_VERB_AFTER else ("down", "comparative")
    return DIRECTION_WORDS.get(token)


def _directions(norm: str) -> list[tuple[str, str | None, str, int, int]]:
    """``(measure, direction, type, start, end)`` for each measure of
    ``norm`` that a direction word of its clause governs (the span covers
    both), and each finding that names one (:data:`DIRECTION_FINDINGS`).
    ``direction`` is "up", "down" or ``None`` (an ambiguous word:
    "improves"). A negated direction ("no increase in", "did not rise") is
    left out: it states no direction."""
    found = []
    for pattern, measure, direction in _FINDINGS_RE:
        found += [(measure, direction, "finding", m.start(), m.end()) for m in pattern.finditer(norm)]
    breaks = [b.span() for b in _CLAUSE_BREAK.finditer(norm)] + [(len(norm), len(norm))]
    for m in _DIRECTION_MEASURE_RE.finditer(norm):
        measure = _MEASURE_NAMES[int(m.lastgroup[1:])]
        clause_start = max((e for _, e in breaks if e <= m.start()), default=0)
        clause_end = min(b for b, _ in breaks if b >= m.end())
        # before: the nearest direction word, only fillers between
        before = list(_TOKEN.finditer(norm[clause_start:m.start()]))
        for i in range(len(before) - 1, max(-1, len(before) - 2 - _BEFORE_WINDOW), -1):
            word = before[i].group(0)
            got = _direction_of(word, before[i - 1].group(0) if i else None)
            if got is not None:
                near = {w.group(0) for w in before[max(0, i - 2):i]}
                if not near & _NEGATORS:
                    found.append((measure, *got, clause_start + before[i].start(), m.end()))
                break
            if word not in _BEFORE_FILLERS:
                break
        # after: the nearest direction word, only fillers between
        after = list(_TOKEN.finditer(norm[m.end():clause_end]))
        negated = False
        for i, tok in enumerate(after[:_AFTER_WINDOW + 1]):
            word = tok.group(0)
            got = _direction_of(word, after[i - 1].group(0) if i else None)
            if got is not None:
                if not negated:
                    found.append((measure, *got, m.start(), m.end() + tok.end()))
                break
            if word not in _AFTER_FILLERS:
                break
            negated = negated or word in _NEGATORS
    return [item for item in found if not set(_TOKEN.findall(norm[max(0, item[3] - 30):item[3]])[-3:]) & _AVOIDED]


def _direction_flags(source_norm: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:
    """``direction`` flags: a direction of change the input does not state.

    Source: a Cochrane abstract sentence the product had never seen
    (docs/quality/unseen-cochrane-sample.md): "Naloxone improves blood
    pressure" (in shock: raises it) came back as "Naloxone helps lower
    blood pressure" and passed every check. Measures: the vital signs of
    HL7 FHIR R4's Vital Signs profile and the analytes of a basic metabolic
    panel (:data:`DIRECTION_MEASURES`); findings that name a direction by
    their prefix (hyper-/hypo-, tachy-/brady-, fever:
    :data:`DIRECTION_FINDINGS`). A direction word governs a measure when it
    stands next to it in its clause with only articles, possessives or
    auxiliaries between (:func:`_directions`); a negated one ("no increase
    in", "did not rise") and one after "avoid", "prevent" or "risk" state no
    direction.

    Flagged, for an output's (measure, direction): (1) reversed: the input
    says the opposite with a word of a compatible type (:data:`_COMPATIBLE`:
    a state "high" against a state "low" or "hypotension", a change "raises"
    against "lowers", a comparison against a comparison) and never this
    direction; (2) invented: the input gives the measure only ambiguous
    words ("improves", "affects", "normalises", "controls": the direction
    depends on the patient) and the output commits to one, unless it is
    the measure's one good direction (:data:`GOOD_DIRECTION`: oxygen up).

    Not caught: a measure not in the table (cholesterol, HbA1c, a liver
    test, "levels" with no name), a measure named only by a pronoun ("lower
    it"), a direction word farther from its measure or in another clause
    ("increases blood pressure and heart rate" gives heart rate none), a
    state read against a change ("hypertension" -> "raises blood
    pressure" passes: it may be a cause or a treatment), a reversed
    comparison whose groups are swapped, lay verbs not in the list
    ("speeds up", "beating slowly"), an output direction for a measure the
    input names with no direction word at all, and Spanish."""
    source = _directions(source_norm)
    if not source:
        return []
    stated: dict[str, set[tuple[str | None, str]]] = {}
    for measure, direction, kind, _, _ in source:
        stated.setdefault(measure, set()).add((direction, kind))
    flags = []
    for measure, direction, kind, start, end in _directions(output_norm):
        said = stated.get(measure)
        if direction is None or not said:
            continue
        directions = {d for d, _ in said if d is not None}
        if direction in directions:
            continue
        opposite = "down" if direction == "up" else "up"
        if any(d == opposite and k in _COMPATIBLE[kind] for d, k in said):
            detail = f"reversed: input says {opposite}"
        elif not directions and GOOD_DIRECTION.get(measure) != direction:
            detail = "direction not in input: the input's verb gives none"
        else:
            continue
        flags.append(FaithfulnessFlag("direction", output[start:end], start, end, detail))
    return flags


# ---------------------------------------------------------------- person

_FIRST_OUT = {"en": re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b"),
              "es": re.compile(r"\b(?:yo|mi|mis|conmigo|mio|mia|mios|mias)\b")}
_FIRST_IN = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b")
_MALE = re.compile(r"\b(?:he|him|his|himself|he's|mr|man|male|boy|gentleman|son|father|husband|brother)\b")
_FEMALE = re.compile(r"\b(?:she|her|hers|herself|she's|mrs|ms|miss|woman|female|girl|lady|daughter|mother|wife|"
                     r"sister|pregnan\w*|vagina\w*|uter\w*|ovar\w*|breast|gravida|para)\b")
_THIRD_OUT = {"en": (re.compile(r"\b(?:he|him|his|himself|he's)\b"), re.compile(r"\b(?:she|her|hers|herself|she's)\b")),
              "es": (re.compile(r"\bel\b(?=\s+(?:tiene|esta|es|ha|dice|refiere|niega|presenta))|\bel mismo\b"),
                     re.compile(r"\bella\b"))}


#: Relatives and carers an output may name, each group with the input
#: words that name it: a group the input does not name is someone made up or
#: put in another's place ("the patient's parents were talked to" for a
#: legal guardian). "mother" and "family" are not checked: a delivery
#: note's patient is a mother, and "family doctor" or "family history" name
#: nobody.
RELATIVES = {
    "parent": (r"parents?", r"parents?|mother|father|mom|dad"),
    "father": (r"fathers?|dad", r"fathers?|dad|parents?"),
    "son": (r"sons?", r"sons?|children|child"),
    "daughter": (r"daughters?", r"daughters?|children|child"),
    "sibling": (r"brothers?|sisters?|siblings?", r"brothers?|sisters?|siblings?"),
    "spouse": (r"wife|wives|husbands?|spouses?", r"wife|wives|husbands?|spouses?|partner"),
    "grandparent": (r"grand(?:mother|father|parent)s?", r"grand(?:mother|father|parent)s?"),
    "guardian": (r"guardians?", r"guardians?"),
    "caregiver": (r"caregivers?|carers?", r"caregivers?|carers?|care givers?"),
}
_RELATIVES = {name: (re.compile(rf"\b(?:{out})\b"), re.compile(rf"\b(?:{named})\b"))
              for name, (out, named) in RELATIVES.items()}

#: A subject pronoun and the next word, for the who-did-it rule.
_SUBJECT_VERB = re.compile(r"\b(i|he|she|you|we|they)\s+([a-z]{4,})\b")


def _person_flags(source_norm: str, output: str, output_norm: str, language: str) -> list[FaithfulnessFlag]:
    flags = []
    first_in = _FIRST_IN.search(source_norm)
    possessive_in = re.search(r"\b(?:my|mine|myself)\b", source_norm)
    for m in _FIRST_OUT[language].finditer(output_norm):
        if first_in and (possessive_in or m.group(0) not in ("my", "mine", "myself")):
            continue
        if language == "en" and m.group(0) == "i" and (
                re.match(r"\s*(?:\.|,|v\b)", output_norm[m.end():])
                or re.search(r"\b(?:type|grade|stage|class|phase|factor|nerve|level)\s+$", output_norm[:m.start()])):
            continue  # a roman numeral ("type I diabetes") or list letter "i."
        if output[m.start():m.end()] == "MI":
            continue  # myocardial infarction, not Spanish "mi"
        flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                      "first person not in input" if not first_in else
                                      "'my' not in input: speaking as the patient?"))
    male_in, female_in = bool(_MALE.search(source_norm)), bool(_FEMALE.search(source_norm))
    third_in = male_in or female_in or bool(re.search(r"\b(?:patient|pt|they|child|infant|baby|who)\b", source_norm))
    for pattern, sex, other_in, same_in in ((_THIRD_OUT[language][0], "male", female_in, male_in),
                                            (_THIRD_OUT[language][1], "female", male_in, female_in)):
        for m in pattern.finditer(output_norm):
            if same_in:
                continue
            detail = f"swapped: input refers to a {'female' if sex == 'male' else 'male'} person" if other_in \
                else "sex not in input" if third_in else "no third person in input"
            flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(), detail))
    if language == "en":
        for name, (out, named) in _RELATIVES.items():
            if named.search(source_norm):
                continue
            for m in out.finditer(output_norm):
                flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                              f"relative not in input ({name})"))
    # who did it: "I froze a wart on him" -> "he froze a wart on you"
    if language == "en":
        doers: dict[str, set[str]] = {}
        for m in _SUBJECT_VERB.finditer(source_norm):
            doers.setdefault(m.group(2), set()).add(m.group(1))
        for m in _SUBJECT_VERB.finditer(output_norm):
            subject, verb = m.group(1), m.group(2)
            was = doers.get(verb)
            if was and subject not in was and ("i" in was or subject == "i") and \
                    not any(f.start == m.start() for f in flags):
                flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                              f"swapped: input says {'/'.join(sorted(was))} {verb}"))
    return flags


# ---------------------------------------------------------------- the check


def faithfulness_check(source: str, output: str, *, language: str = "en") -> FaithfulnessResult:
    """Flag what ``output`` states that ``source`` does not (rules in the
    module docstring).

    Args:
        source: the clinician's text (English).
        output: the model's rewrite, in ``language``.
        language: ``"en"`` or ``"es"``; for ``"es"`` only the kinds in
            :data:`LANGUAGE_KINDS` are checked.

    Returns:
        :class:`FaithfulnessResult` with flags sorted by output offset.

    Raises:
        TypeError: ``source`` or ``output`` is not a string.
        ValueError: ``language`` is not one of :data:`LANGUAGES`.
        RuntimeError: the anatomy ontology package is not installed.
    """
    if not isinstance(source, str) or not isinstance(output, str):
        raise TypeError("source and output must be strings")
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, not {language!r}")
    source_norm, output_norm = normalize(source), normalize(output)
    kinds = LANGUAGE_KINDS[language]
    flags: list[FaithfulnessFlag] = []
    if output_norm.strip():
        flags += _number_flags(source, source_norm, output, output_norm, language)
        flags += _laterality_flags(source, output, output_norm)
        flags += _person_flags(source_norm, output, output_norm, language)
        if "drug" in kinds:
            flags += _drug_flags(source, source_norm, output)
        # the output's anatomy names, read once for the two kinds that need them
        named = _sites(output_norm, _anatomy_index()) if {"body_site", "organ_function"} & set(kinds) else []
        if "body_site" in kinds:
            flags += _site_flags(source_norm, output, output_norm, named)
        if "vital_sign" in kinds:
            flags += [FaithfulnessFlag("vital_sign", output[start:end], start, end, f"{sign} not in input")
                      for start, end, sign in vital_sign_spans(source_norm, output_norm)]
        if "organ_function" in kinds:
            flags += [FaithfulnessFlag("organ_function", output[start:end], start, end,
                                       "failure or damage not in input")
                      for start, end in organ_function_spans(source_norm, output_norm,
                                                             [start for start, *_ in named])]
        if "direction" in kinds:
            flags += _direction_flags(source_norm, output, output_norm)
        if "negation" in kinds:
            flags += _negation_flags(source_norm, output, output_norm)
    flags.sort(key=lambda f: (f.start, f.end, f.kind))
    return FaithfulnessResult(flags=tuple(flags), checked=kinds)


def warm() -> None:
    """Load the drug dictionary, the number words, the anatomy index (a few
    seconds once per process; the index is cached on disk) and the stop
    words of the negation kind's head-word rule."""
    faithfulness_check("Aspirin 81 mg daily to the left heart, no fever.", "Two hearts on the right.")
    faithfulness_check("Nonspecific bowel gas pattern.", "No gas.")
