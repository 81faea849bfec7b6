"""The anatomy index the ``body_site`` and ``organ_function`` kinds read:
UBERON (the Uberon multi-species anatomy ontology, release 2026-04-01, as
shipped inside cellxgene-ontology-guide 1.11.1: labels, exact synonyms and
the is_a/part_of ancestors of 16,000 terms), with the hand tables that
complete it for clinical and lay text: Latin/Greek combining forms
(:data:`COMBINING_FORMS`), site abbreviations (:data:`ABBREVIATIONS`) and
lay words UBERON lacks as exact synonyms (:data:`LAY_WORDS`).

:func:`prepare` builds the index (about 2 s) and caches it as JSON under
``$CLINICAL_CACHE/faithfulness``; :func:`anatomy_index` loads it once per
process; :func:`find_sites` reads the anatomy names of a normalised text.
No network.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from pathlib import Path

from clinical.quality.faithfulness.common import WORD
from clinical.quality.textnorm import normalize

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

#: Version of the index's build: a new one makes a new cache file.
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
            key = " ".join(WORD.findall(normalize(name)))
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
def anatomy_index() -> dict:
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


def find_sites(norm: str, index: dict, *, guard: bool = True, overlap: bool = False
               ) -> list[tuple[int, int, str, list[str]]]:
    """``(start, end, name, ids)`` of the anatomy names of ``index``
    (:func:`anatomy_index`) in ``norm`` (text folded by
    :func:`clinical.quality.textnorm.normalize`), character offsets, in
    text order; longer names first, no overlaps unless ``overlap``.
    ``guard`` skips words that are sites only in context ("5 feet", "came
    back", "keep an eye on")."""
    words = list(WORD.finditer(norm))
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
