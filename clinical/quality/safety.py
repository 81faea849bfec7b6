"""Deterministic safety check: did the clinically important facts of the
input survive the rewrite?

Every item of these kinds found in the input must be present in the output
(rules and examples: ``docs/safety-check.md``):

* ``dose``: a number with a dose unit (``25 mg``, ``2 tablets``, ``10 units``);
* ``measurement``: a number with any other unit (``95%``, ``120 mmHg``,
  ``3 days``, ``2.5 cm``, ``54-year-old``, ``140 mg/dL``);
* ``number``: a number with no unit (``1+``, ``3 of 5``); list markers
  (``1)``, ``2 )``) are not facts and are skipped;
* ``drug``: a drug or drug class name (drug-named-entity-recognition 2.0.9,
  offline dictionary from DrugBank, MeSH, NHS and MedlinePlus);
* ``laterality``: left, right, bilateral;
* ``negation``: NegEx cues (Chapman et al. 2001, "A simple algorithm for
  identifying negated findings and diseases in discharge summaries"), the
  subset "no", "not"/"n't", "without", "denies"/"denied", "negative for",
  each with its scope (up to five words, ending at punctuation or "but",
  "however", ...); NegEx pseudo-negations ("no change", "not only") are
  not cues;
* ``uncertainty``: a hedge of the input ("possible", "probably",
  "suspicious for", "cannot be excluded", "nonspecific": ConText's
  probable-existence cues, Harkema et al. 2009), so that the output does
  not state as certain what the note does not; present when the output
  has a word of doubt ("maybe", "might", "not sure", "check for", ...),
  one per cue;
* ``term`` (English output only): a medical term built on a known word
  part ("fasciotomy", "ischemic") that the output neither keeps nor
  explains with a plain word for one of its parts
  (:mod:`clinical.quality.terms`);
* ``lay_term``: in English output, a Human Phenotype Ontology term that
  the output replaced with plain words matching none of the layperson
  synonyms HPO gives it ("pleural effusion" as "fluid in the lung", where
  HPO says "fluid around lungs"; :mod:`clinical.quality.vetted_terms`),
  where no word of it is a ``term`` missing already; in Spanish output, an
  HPO term that the output does not say by HPO's official Spanish label
  ("constipado" for constipated, where HPO says "estreñimiento").

The output may rewrite numbers as words (num2words 0.5.14, English and
Spanish, cardinals, ordinals, "half"), units as their spelled forms in
either language (``mg`` → "milligrams"/"miligramos"), a brand as its
generic name or another synonym (``Lasix`` → "furosemide"), and sides and
negations in either language. Matching is on lower-case text with accents
removed. Pure Python over compiled regular expressions: about 5 ms for a
2,400-character input (``bench/safety_timing.py``).
"""

from __future__ import annotations

import calendar
import re
import threading
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from difflib import SequenceMatcher
from functools import lru_cache

from clinical.quality import safety_vocab as vocab
from clinical.quality import terms
from clinical.quality.vetted_terms import lay_term_findings, spanish_term_findings

KINDS = ("dose", "measurement", "number", "drug", "laterality", "negation", "uncertainty", "extent", "term",
         "lay_term")


@dataclass(frozen=True)
class SafetyItem:
    """One fact of the input: ``kind`` (see :data:`KINDS`) and the input's
    ``text`` for it (e.g. ``"25 mg"``, ``"No pericardial effusion"``)."""

    kind: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class SafetyResult:
    """Outcome: ``passed`` is True when nothing is ``missing``; ``checked``
    lists every item found in the input."""

    passed: bool
    missing: tuple[SafetyItem, ...]
    checked: tuple[SafetyItem, ...]

    def missing_dicts(self) -> list[dict[str, str]]:
        """``[{"kind", "text"}]``, as stored on the translation."""
        return [item.as_dict() for item in self.missing]

    def missing_counts(self) -> dict[str, int]:
        """Missing items by kind (no clinical text), for the audit log."""
        counts: dict[str, int] = {}
        for item in self.missing:
            counts[item.kind] = counts.get(item.kind, 0) + 1
        return counts


# ---------------------------------------------------------------- normalise

def normalize(text: str) -> str:
    """Lower-case, accents removed, dashes as spaces, single spaces."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = re.sub(r"[\u2010-\u2015-]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _numeric_space(text: str) -> str:
    """Normalised text in which "and"/"y" are dropped, so that "one hundred
    and twenty" and "ochenta y uno" match num2words forms written the same way."""
    return re.sub(r"\s+", " ", re.sub(r"\b(?:and|y)\b(?!/)", " ", normalize(text))).strip()


# ---------------------------------------------------------------- numbers and units

_UNIT_RE = "|".join(f"(?P<u_{key}>{pattern})" for key, (_, pattern, _) in vocab.UNITS.items())
_PER_RE = "|".join(f"(?P<p_{key}>{pattern})" for key, (pattern, _) in vocab.PER_UNITS.items())
_QUANTITY = re.compile(
    r"(?<![A-Za-z\d.,])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?P<ord>st|nd|rd|th)?"
    rf"(?:\s*-?\s*(?:{_UNIT_RE})(?:\s*/\s*(?:{_PER_RE}))?(?![A-Za-z]))?",
    re.IGNORECASE)
_ENUMERATION = re.compile(r"\s*\)")
_OUTPUT_NUMBER = re.compile(r"(?<![a-z\d])\d+(?:[.,]\d+)*|(?<![a-z\d])[.,]\d+")
_LEADING_NUMBER = re.compile(r"\d*[.,]?\d+")


def _forms_re(forms) -> re.Pattern:
    alternatives = sorted((re.escape(normalize(f)) for f in forms), key=len, reverse=True)
    return re.compile(r"\s*(?:[a-z]+\s+){0,2}?(?:" + "|".join(alternatives) + r")(?![a-z])")


_UNIT_OUT = {key: _forms_re(forms) for key, (_, _, forms) in vocab.UNITS.items()}
_PER_OUT = {key: re.compile(r"\s*(?:/|per|por|a|an|each|every|cada|al|a la)?\s*(?:[a-z]+\s+){0,2}?(?:"
                            + "|".join(sorted(map(re.escape, forms), key=len, reverse=True)) + r")(?![a-z])")
            for key, (_, forms) in vocab.PER_UNITS.items()}


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "")).normalize()
    except InvalidOperation:
        return None


def _output_values(token: str, language: str) -> set[Decimal]:
    """Values a digit token of the output may mean ("1,5" is 1.5 in Spanish).

    A token that is no number ("1.041.77", a confidence interval whose dash
    was lost) also means its leading number, the one the input side reads.
    """
    values = {_decimal(token)}
    if values == {None}:
        values.add(_decimal(_LEADING_NUMBER.match(token).group(0)))
    if "," in token:
        alt = token.replace(".", "").replace(",", ".")
        if language != "en" or re.fullmatch(r"\d+,\d{1,2}", token):
            values.add(_decimal(alt))
    if language != "en" and re.fullmatch(r"\d{1,3}(?:\.\d{3})+", token):
        values.add(_decimal(token.replace(".", "")))
    return {v for v in values if v is not None}


@lru_cache(maxsize=4096)
def number_words(value: Decimal, ordinal: bool = False) -> tuple[str, ...]:
    """Ways to write ``value`` in words, English and Spanish, normalised
    like :func:`_numeric_space` (num2words 0.5.14)."""
    from num2words import num2words

    forms: set[str] = set()
    is_int = value == value.to_integral_value()
    number = int(value) if is_int else float(value)
    for lang in ("en", "es"):
        try:
            forms.add(num2words(number, lang=lang))
            if is_int and (ordinal or 0 < number <= 31):
                forms.add(num2words(number, lang=lang, to="ordinal"))
        except (NotImplementedError, OverflowError, ValueError, TypeError):
            continue
    if not is_int and value % 1 == Decimal("0.5"):
        whole = int(value)
        forms.update({"half", "a half", "one half", "medio", "media"} if whole == 0 else
                     {f"{num2words(whole)} and a half", f"{num2words(whole, lang='es')} y medio",
                      f"{num2words(whole, lang='es')} y media"})
    if not is_int:
        forms.update(f.replace(" punto ", " coma ") for f in list(forms))
    forms.update(re.sub(r"uno\b", "un", f) for f in list(forms))
    forms.update(re.sub(r"uno\b", "una", f) for f in list(forms))
    out = {_numeric_space(f) for f in forms if f}
    return tuple(sorted(out, key=len, reverse=True))


def _occurrences(value: Decimal, ordinal: bool, digits: list[tuple[int, set[Decimal]]], text: str) -> list[int]:
    """End offsets in the numeric-space output where ``value`` is written."""
    ends = [end for end, values in digits if value in values]
    for form in number_words(value, ordinal):
        ends.extend(m.end() for m in re.finditer(rf"(?<![a-z]){re.escape(form)}(?![a-z])", text))
    return ends


#: A date as US notes write it, month/day/year ("6/15/2009"), or
#: day/month/year where the first number cannot be a month.
_DATE = re.compile(r"(?<![\d/.,])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])")


def _date_months(input_text: str) -> dict[int, int]:
    """``{input offset of a date's month number: the month, 1-12}``."""
    months = {}
    for match in _DATE.finditer(input_text):
        first, second = int(match.group(1)), int(match.group(2))
        if 1 <= first <= 12:
            months[match.start(1)] = first
        elif 1 <= second <= 12:
            months[match.start(2)] = second
    return months


@lru_cache(maxsize=12)
def _month_named(month: int) -> re.Pattern:
    """The month written as a name beside a day ("June 15", "15th of June",
    "15 de junio"): a date's month number is kept that way."""
    names = "|".join(sorted({calendar.month_name[month].lower(), calendar.month_abbr[month].lower(),
                             vocab.MONTHS_ES[month - 1]}, key=len, reverse=True))
    day = r"\d{1,2}(?:st|nd|rd|th)?"
    return re.compile(rf"(?<![a-z])(?:{names})\.?\s+(?:the\s+)?{day}(?![\d/])|"
                      rf"(?<![\d/]){day}\s+(?:of\s+|de\s+)?(?:{names})(?![a-z])")


def _quantity_items(input_text: str) -> list[tuple[SafetyItem, Decimal, bool, str | None, str | None, int]]:
    """Each number of ``input_text`` as ``(item, value, ordinal, unit key,
    per-unit key, offset)``."""
    items = []
    for match in _QUANTITY.finditer(input_text):
        value = _decimal(match.group("num"))
        if value is None or _ENUMERATION.match(input_text, match.end()) and match.group(0).isdigit():
            continue  # a list marker such as "1 ) appendectomy", not a fact
        groups = {k: v for k, v in match.groupdict().items() if v is not None}
        unit = next((k[2:] for k in groups if k.startswith("u_")), None)
        per = next((k[2:] for k in groups if k.startswith("p_")), None)
        if unit is None:
            kind = "number"
        else:
            kind = vocab.UNITS[unit][0]
            if kind == "dose" and per in ("dl", "l"):
                kind = "measurement"  # a concentration (mg/dL), not an amount given
        text = match.group(0).strip()
        items.append((SafetyItem(kind, text), value, bool(match.group("ord")), unit, per, match.start()))
    return items


def _quantity_present(value, ordinal, unit, per, digits, text) -> bool:
    for end in _occurrences(value, ordinal, digits, text):
        if unit is None:
            return True
        after = _UNIT_OUT[unit].match(text, end)
        if after is None:
            continue
        if per is None or _PER_OUT[per].match(text, after.end()):
            return True
    return False


# ---------------------------------------------------------------- drugs

_drug_lock = threading.Lock()
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-]*")


def find_drugs(text: str) -> list[dict]:
    """Drug mentions of ``text`` (drug-named-entity-recognition), keeping
    medicines and drug classes: entries with a MedlinePlus or NHS page, a
    MeSH "pharmacologic action" (D27.505) branch, or a DrugBank small
    molecule. Proteins, antigens, reagents and organisms the dictionary
    also holds are dropped."""
    from drug_named_entity_recognition import find_drugs as library_find_drugs

    with _drug_lock:  # the library keeps module-level state
        matches = library_find_drugs(_WORD.findall(text), is_ignore_case=True)
    kept = []
    for data, _, _ in matches:
        if (data.get("medline_plus_id") or data.get("nhs_url")
                or any(t.startswith("D27.505") for t in data.get("mesh_tree") or ())
                or (data.get("drugbank_id") and data.get("smiles"))):
            kept.append(data)
    return kept


def _fuzzy_word(name: str, words: list[str]) -> bool:
    """A Spanish spelling of a drug (aspirin → aspirina, furosemide → furosemida)."""
    return any(w[:3] == name[:3] and SequenceMatcher(None, name, w).ratio() >= 0.8 for w in words)


def _drug_present(data: dict, output_norm: str, output_drugs: set[str], language: str) -> bool:
    if (data.get("name") or "").lower() in output_drugs:
        return True
    names = {normalize(data["matching_string"]), normalize(data.get("name") or "")} - {""}
    if any(re.search(rf"(?<![a-z]){re.escape(n)}(?![a-z])", output_norm) for n in names):
        return True
    if language != "en":
        words = re.findall(r"[a-z]+", output_norm)
        return any(_fuzzy_word(n, words) for n in names if " " not in n)
    return False


# ---------------------------------------------------------------- laterality and negation

_LATERALITY_IN = [(re.compile(p, re.IGNORECASE), side) for p, side in vocab.LATERALITY_INPUT]
_LATERALITY_OUT = {side: re.compile(p) for side, p in vocab.LATERALITY_OUTPUT.items()}
_NEG_IN = re.compile(vocab.NEGATION_INPUT, re.IGNORECASE)
_PSEUDO = re.compile(vocab.PSEUDO_NEGATION, re.IGNORECASE)
_NEG_OUT = re.compile(vocab.NEGATION_OUTPUT)
_SCOPE_END = re.compile(r"[.;:!?\n]")


def _stem(word: str) -> str:
    return normalize(word)[:5]


def _negation_items(input_text: str) -> list[tuple[SafetyItem, set[str]]]:
    pseudo = [m.span() for m in _PSEUDO.finditer(input_text)]
    items = []
    for cue in _NEG_IN.finditer(input_text):
        if any(a <= cue.start() < b for a, b in pseudo):
            continue
        rest = input_text[cue.end():]
        stop = _SCOPE_END.search(rest)
        scope, end = [], cue.end()
        for word in re.finditer(r"[^\W\d_][\w'-]*", rest[: stop.start() if stop else len(rest)]):
            if word.group(0).lower() in vocab.SCOPE_TERMINATORS or len(scope) >= vocab.SCOPE_WORDS:
                break
            scope.append(word.group(0))
            end = cue.end() + word.end()
        start = cue.start() if not cue.group(0).lower().startswith("n't") else \
            input_text.rfind(" ", 0, cue.start()) + 1
        text = input_text[start:end].strip()
        stems = {_stem(w) for w in scope if len(w) >= 3 and w.lower() not in vocab.SCOPE_STOPWORDS}
        items.append((SafetyItem("negation", text), stems))
    return items


_NOT = re.compile(r"not\b|[a-z]+n't\b", re.IGNORECASE)


def _negations_missing(items, output_norm: str) -> set[int]:
    """Pair each input negation with an output negation word: first one
    followed (within 8 words of the same sentence) by a word of its scope,
    then by count. A "not" whose scope word the output writes with the
    prefix un- ("not feeling well" as "feeling unwell", "not able" as
    "unable") is kept without a negation word; a "no" is not ("no known
    allergies" is not "unknown allergies")."""
    prefixed = {index for index, (item, stems) in enumerate(items) if _NOT.match(item.text)
                and any(re.search(rf"(?<![a-z])un{re.escape(stem)}", output_norm) for stem in stems)}
    items = [(None, set()) if index in prefixed else item for index, item in enumerate(items)]
    cues = []
    for m in _NEG_OUT.finditer(output_norm):
        rest = output_norm[m.end():]
        stop = _SCOPE_END.search(rest)
        following = re.findall(r"[a-z][a-z'-]*", rest[: stop.start() if stop else len(rest)])[:8]
        cues.append({_stem(w) for w in following})
    free = list(range(len(cues)))
    unmatched = []
    for index, (item, stems) in enumerate(items):
        if item is None:
            continue
        hit = next((i for i in free if stems & cues[i]), None)
        if hit is None:
            unmatched.append(index)
        else:
            free.remove(hit)
    missing = set()
    for index in unmatched:
        if free:
            free.pop(0)
        else:
            missing.add(index)
    return missing


_UNCERTAINTY_IN = re.compile(vocab.UNCERTAINTY_INPUT)
_UNCERTAINTY_OUT = re.compile(vocab.UNCERTAINTY_INPUT + "|" + vocab.UNCERTAINTY_OUTPUT)  # a cue kept is a doubt kept


_EXTENT_IN = re.compile(vocab.EXTENT_INPUT)
_EXTENT_OUT = re.compile(vocab.EXTENT_OUTPUT)


def _paired_cue_items(kind: str, cues_in: re.Pattern, words_out: re.Pattern, input_text: str,
                      output_norm: str) -> list[tuple[SafetyItem, bool]]:
    """``[(item, present)]``: each cue of the input (``cues_in``: a hedge
    for ``uncertainty``, a qualifier of extent such as "partially" or "not
    completely" for ``extent``), paired by count with the output's words
    that keep it (``words_out``: words of doubt, words of part); the last
    cues go missing first."""
    cues = list(cues_in.finditer(normalize(input_text)))
    kept = len(words_out.findall(output_norm))
    return [(SafetyItem(kind, cue.group(0)), index < kept) for index, cue in enumerate(cues)]


# ---------------------------------------------------------------- the check

def safety_check(*, input_text: str, output_text: str, language: str = "en") -> SafetyResult:
    """Check that every dose, measurement, number, drug, side, negation,
    hedge and qualifier of extent of ``input_text`` is present in
    ``output_text``, and that every medical term is kept or explained
    (English output) or said by its vetted Spanish label (Spanish output;
    rules above).

    Args:
        input_text: the clinician's text (English).
        output_text: the model's output, in ``language`` (``en`` or ``es``).

    Returns:
        :class:`SafetyResult`; items are listed once each in input order,
        except negations, which are counted one per cue, and ``lay_term``
        items, which are listed (after the others) only where they are
        missing.
    """
    checked: list[SafetyItem] = []
    missing: list[SafetyItem] = []
    seen: set[tuple[str, str]] = set()

    def record(item: SafetyItem, present: bool) -> None:
        key = (item.kind, normalize(item.text))
        if key in seen and item.kind != "negation":
            return
        seen.add(key)
        checked.append(item)
        if not present:
            missing.append(item)

    output_norm = normalize(output_text)
    numeric = _numeric_space(output_text)
    digits = [(m.end(), _output_values(m.group(0), language)) for m in _OUTPUT_NUMBER.finditer(numeric)]
    months = _date_months(input_text)
    for item, value, ordinal, unit, per, start in _quantity_items(input_text):
        record(item, _quantity_present(value, ordinal, unit, per, digits, numeric)
               or (start in months and bool(_month_named(months[start]).search(output_norm))))

    input_drugs = find_drugs(input_text)
    if input_drugs:
        output_drugs = {(d.get("name") or "").lower() for d in find_drugs(output_text)}
        for data in input_drugs:
            record(SafetyItem("drug", data["matching_string"]),
                   _drug_present(data, output_norm, output_drugs, language))

    for pattern, side in _LATERALITY_IN:
        for match in pattern.finditer(input_text):
            record(SafetyItem("laterality", match.group(0)), bool(_LATERALITY_OUT[side].search(output_norm)))

    negations = _negation_items(input_text)
    missing_negations = _negations_missing(negations, output_norm)
    for index, (item, _) in enumerate(negations):
        record(item, index not in missing_negations)

    for kind, cues_in, words_out in (("uncertainty", _UNCERTAINTY_IN, _UNCERTAINTY_OUT),
                                     ("extent", _EXTENT_IN, _EXTENT_OUT)):
        for item, present in _paired_cue_items(kind, cues_in, words_out, input_text, output_norm):
            record(item, present)

    if language == "en":
        checked_terms = terms.terms_checked(input_text=input_text, output_text=output_text)
        for term, kept in checked_terms:
            record(SafetyItem("term", term.word), kept)
        # A term neither kept nor explained is a `term` item already; one
        # explained with words no vetted vocabulary gives is a `lay_term`.
        unexplained = [term.start for term, kept in checked_terms if not kept]
        for finding in lay_term_findings(input_text=input_text, output_text=output_text):
            if not any(finding.start <= start < finding.end for start in unexplained):
                record(SafetyItem("lay_term", finding.term), False)
    elif language == "es":
        for finding in spanish_term_findings(input_text=input_text, output_text=output_text):
            record(SafetyItem("lay_term", finding.term), False)

    return SafetyResult(passed=not missing, missing=tuple(missing), checked=tuple(checked))


def warm() -> None:
    """Load the drug dictionary (about 2 s once per process)."""
    safety_check(input_text="Aspirin 81 mg daily, left side, no fever.", output_text="")
