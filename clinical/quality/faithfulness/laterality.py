"""The ``laterality`` kind of the faithfulness check: "left", "right",
"both sides"/"bilateral" (Spanish izquierdo/derecho/ambos lados) in the
output when the input names no side, or names only the other side
(``detail`` says "flipped"); a bilateral input supports left and right.
English and Spanish outputs."""

from __future__ import annotations

import re

from clinical.quality.faithfulness.common import FaithfulnessFlag
from clinical.quality.safety_vocab import LATERALITY_INPUT

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


def laterality_flags(source: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:
    """``laterality`` flags of ``output`` against ``source`` (``output_norm``:
    the output folded by :func:`clinical.quality.textnorm.normalize`)."""
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
