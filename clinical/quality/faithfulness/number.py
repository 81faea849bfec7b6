"""The ``number`` and ``unit`` kinds of the faithfulness check.

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

Both are checked for English and Spanish outputs.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation

from clinical.quality.faithfulness.common import FaithfulnessFlag
from clinical.quality.safety import _numeric_space, number_words  # one folding for forms and matches
from clinical.quality.safety_vocab import UNITS
from clinical.quality.textnorm import normalize

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


def number_flags(source: str, source_norm: str, output: str, output_norm: str,
                 language: str) -> list[FaithfulnessFlag]:
    """``number`` and ``unit`` flags of ``output`` (``language``) against
    ``source`` (English); ``source_norm`` and ``output_norm`` are the two
    texts folded by :func:`clinical.quality.textnorm.normalize` (offsets
    unchanged). Flags in the order found."""
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
