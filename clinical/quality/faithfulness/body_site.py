"""The ``body_site`` kind of the faithfulness check: an organ or body part
named in the output that the input does not support, over the UBERON
index of :mod:`clinical.quality.faithfulness.anatomy`.

An output term is supported when the input names the same term, a part
of it, or a whole it is part of (e.g. "heart" by "aortic valve"), or uses
a Latin/Greek combining form of it ("cardiac", "renal", "cerebral":
:data:`~clinical.quality.faithfulness.anatomy.COMBINING_FORMS`, a hand
table whose source is given there; "upper"/"lower" before "extremity"
narrow it to an arm or a leg, :data:`QUALIFIED_ROOTS`). A few lay words
that UBERON lacks as exact synonyms ("belly", "spine", "bladder") are
mapped to UBERON terms in
:data:`~clinical.quality.faithfulness.anatomy.LAY_WORDS`; class words that
name no site ("organ", "tissue", "blood") are ignored
(:data:`GENERIC_SITES`). A site placed inside an organ it is no part of
("the muscles in your brain") is flagged too. English outputs only.
"""

from __future__ import annotations

import itertools
import re

from clinical.quality.faithfulness.anatomy import anatomy_index, find_sites
from clinical.quality.faithfulness.common import FaithfulnessFlag

#: Output words whose UBERON term names no particular site, or that a
#: plain text uses in other senses ("blood pressure", "the body",
#: "tube", "the system"); not flagged and not used as support.
GENERIC_SITES = {"organ", "tissue", "blood", "body", "tube", "duct", "sac", "valve", "gland", "cell", "system",
                 "region", "structure", "fluid", "organism", "lobe", "wall", "layer", "space", "cavity",
                 "surface", "membrane", "vessel", "nail", "hair", "trunk", "bridge", "root", "crown", "temple",
                 "palm", "sole", "side", "lining", "skin", "part", "segment", "chamber", "opening", "tip",
                 "edge", "pit", "arch", "process", "body part", "spot", "cord", "plate", "ring", "neck of organ",
                 "adult", "adults", "fat", "involuntary muscle"}

#: Organs that a text may wrongly place another site in ("the muscles in
#: your brain"); regions such as "chest" or "leg" hold many sites UBERON
#: does not list as their parts, so they are not checked this way.
ORGANS = ("heart", "brain", "kidney", "lung", "liver", "stomach", "eye", "urinary bladder", "uterus",
          "intestine", "prostate gland", "thyroid gland", "spleen", "pancreas")
_RELATION = re.compile(r"\s+(?:in|of|inside|within)\s+(?:your|the|his|her|their|my)\s+")
#: How far up (part_of/is_a steps) two terms may share a specific
#: ancestor to count as neighbours ("ear canal" and "middle ear": ear).
SIBLING_DISTANCE = 2

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
    for _, _, _, term_ids in find_sites(source_norm, index, guard=False, overlap=True):
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


def site_flags(source_norm: str, output: str, output_norm: str,
                named: list[tuple[int, int, str, list[str]]]) -> list[FaithfulnessFlag]:
    """``body_site`` flags for the sites ``named`` in the output (:func:`find_sites`)."""
    index = anatomy_index()
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
