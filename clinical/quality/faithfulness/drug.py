"""The ``drug`` kind of the faithfulness check: a medicine or drug class
in the output (drug-named-entity-recognition 2.0.9, the same dictionary
and filter as the safety check) that the input does not name, by any of
its names. English outputs only."""

from __future__ import annotations

import re
import threading

from clinical.quality.faithfulness.anatomy import anatomy_index
from clinical.quality.faithfulness.common import FaithfulnessFlag
from clinical.quality.textnorm import normalize

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
                    normalize(data.get("matching_string", "")) in anatomy_index()["names"]:
                continue  # an everyday word, or a body site ("thyroid") the dictionary also holds
            kept.append((data, words[first].start(), words[max(first, last - 1)].end()))  # end exclusive
    return kept


def drug_flags(source: str, source_norm: str, output: str) -> list[FaithfulnessFlag]:
    """``drug`` flags of ``output`` against ``source`` (``source_norm``: it
    folded by :func:`clinical.quality.textnorm.normalize`)."""
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
