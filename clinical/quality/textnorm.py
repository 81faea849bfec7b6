"""Text folding shared by the checks: lower case, accents removed, offsets
kept (so a match in the folded text points into the original)."""

from __future__ import annotations

import unicodedata


def normalize(text: str) -> str:
    """Lower-case, accents removed; same length as ``text`` for the
    characters used here, so offsets map back to the output."""
    out = []
    for ch in text.replace("\u2019", "'").replace("\u2018", "'"):
        base = unicodedata.normalize("NFKD", ch)
        base = "".join(c for c in base if not unicodedata.combining(c)) or ch
        out.append(base[0].lower() if len(base[0].lower()) == 1 else ch)
    return "".join(out)
