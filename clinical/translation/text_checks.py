"""Checks of every text a user submits (a diagnosis to translate, an edited
handout): characters that make a text read differently from how it is
stored, and, for a diagnosis, a language the product cannot translate.

The language check uses py3langid (a maintained, offline port of langid.py;
its model ships in the wheel): docs/decisions/language-identification.md
says why, and how it was measured.
"""

from __future__ import annotations

import functools
import unicodedata

from django.core.exceptions import ValidationError

#: Unicode's explicit embeddings, overrides and isolates (UAX #9).
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: Unicode tag characters (U+E0000-U+E007F): invisible, they carry hidden
#: ASCII ("ASCII smuggling") a reader cannot see but a model reads.
TAG_CHARACTERS = range(0xE0000, 0xE0080)

#: The language a diagnosis must be written in (the prompts, the quality
#: checks and the calibration are English; Spanish is an output language only).
INPUT_LANGUAGE = "en"
#: The languages the identifier chooses among: English and the languages
#: hospitals most often receive notes in. Restricting the set keeps English
#: clinical shorthand ("No psoriasis .") from being read as Latin or Welsh.
CANDIDATE_LANGUAGES = ("en", "es", "fr", "de", "it", "pt", "nl", "pl", "tr", "ar", "fa", "he", "ru", "uk",
                       "el", "hi", "zh", "ja", "ko", "vi")
#: A Latin-script text is refused when the identifier gives English a
#: probability below this: the lowest of the 250 English diagnoses of
#: data/laymaker-dev.csv is 0.061, so the margin is three times; Spanish
#: sentences ("Fractura de tibia izquierda.") score 0.000-0.008.
ENGLISH_MIN_PROBABILITY = 0.02
#: Latin-script texts with fewer letters are too short to tell apart
#: ("Asma leve." and "Asthma." differ by a letter) and are accepted.
MIN_LETTERS_FOR_LANGUAGE = 12


def submitted_characters_check(text: str, *, what: str, allowed_controls: str = "\t\n\r") -> None:
    """Refuse characters no submitted text may hold.

    Args:
        text: the text, already NFC-normalised.
        what: how the message names the text ("The text", "The handout text").
        allowed_controls: control characters allowed (tab, newline, CR).

    Raises:
        ValidationError: code ``"invalid"``: control characters other than
            ``allowed_controls``, lone surrogates, bidirectional overrides and
            isolates (which make a text read differently from how it is
            stored: CVE-2021-42574), or Unicode tag characters.
    """
    if any(unicodedata.category(ch) in {"Cc", "Cs"} and ch not in allowed_controls for ch in text):
        raise ValidationError(f"{what} contains control characters.", code="invalid")
    if any(ch in BIDI_CONTROLS for ch in text):
        raise ValidationError(f"{what} contains bidirectional override characters.", code="invalid")
    if any(ord(ch) in TAG_CHARACTERS for ch in text):
        raise ValidationError(f"{what} contains invisible tag characters.", code="invalid")


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(CANDIDATE_LANGUAGES))
    return identifier


def warm() -> None:
    """Load the language identifier's model (about 0.6 s on two cores), so
    the first diagnosis after a start does not wait for it."""
    _identifier()


def english_probability(text: str) -> float:
    """py3langid's probability, in [0, 1], that ``text`` is English, among
    :data:`CANDIDATE_LANGUAGES`."""
    return float(dict(_identifier().rank(text)).get(INPUT_LANGUAGE, 0.0))


def input_language_check(text: str) -> None:
    """Refuse a diagnosis the product cannot translate: written mostly in a
    script other than Latin (Arabic, Cyrillic, Chinese, ...), or, with at
    least :data:`MIN_LETTERS_FOR_LANGUAGE` letters, with an English
    probability below :data:`ENGLISH_MIN_PROBABILITY`.

    Raises:
        ValidationError: code ``"unsupported_language"``.
    """
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return
    non_latin = sum(not unicodedata.name(ch, "").startswith("LATIN") for ch in letters)
    latin_text = non_latin * 2 <= len(letters)
    if latin_text and (len(letters) < MIN_LETTERS_FOR_LANGUAGE
                       or english_probability(text) >= ENGLISH_MIN_PROBABILITY):
        return
    raise ValidationError(
        "The diagnosis must be written in English: this text looks like another language, which the "
        "model cannot translate reliably. Nothing was translated.", code="unsupported_language")
