"""What every kind of the faithfulness check shares: the kinds and
languages (:data:`KINDS`, :data:`LANGUAGE_KINDS`), one flag
(:class:`FaithfulnessFlag`), the outcome (:class:`FaithfulnessResult`) and
the word and sentence patterns the kinds read normalised text with
(:data:`WORD`, :data:`SENTENCE_END`)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

KINDS = ("number", "unit", "drug", "laterality", "body_site", "vital_sign", "organ_function", "direction", "negation",
         "person")
LANGUAGES = ("en", "es")
#: Kinds checked per output language (the others' words are English:
#: see the package docstring).
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


#: A word of normalised text (letters and apostrophes).
WORD = re.compile(r"[a-z][a-z']*")
#: What ends a sentence or a clause for a negation's scope.
SENTENCE_END = re.compile(r"[.;:!?\n]")
