"""Medical terms of the input that the output neither keeps nor explains.

Part of the safety check (:func:`clinical.quality.safety.safety_check`,
kind ``term``, English output only): a term replaced by words that none of
its meanings support is a fact lost, as much as a dropped dose. Rules and
examples: ``docs/safety-check.md``.

A **term** is a word of the input of at least five letters that is not a
Dale-Chall easy word (nor a plain inflection of one) and that is built on
a medical word part of :data:`WORD_PARTS` (a suffix such as ``-ectomy`` or
``-itis``, a prefix such as ``hyper-``, a root such as ``hemat-``), or
that is by itself a Human Phenotype Ontology term with a layperson
synonym (:func:`inference.lay_terms.find_terms`: "vertigo", "Dizziness").
The words of a longer HPO term ("gait disturbance") are terms only by
their word parts; the layperson synonym ("Macroscopic hematuria": "Bloody
urine") then adds plain words for each of them.

The output **keeps** a term when one of its words starts with the term's
first six letters (all but the last of a shorter term: "fasciotomies"
keeps "fasciotomy", "ischemia" "ischemic"), or is a piece of it
of at least five letters ("adrenal" of "adrenalectomy", "bilirubin" of
"hyperbilirubinemia"). It **explains** the term when it has a plain word
for one of the term's medical parts (:data:`WORD_PARTS`) or, for an HPO
term, a word of its layperson synonym. The body site a term names is not
its meaning: "stretch the muscles around the bottom of your feet" names
the site of a plantar fasciotomy but not the cut, so it does not explain
it. Plain words are matched at the start of an
output word ("remov" matches "removed", "removal"), and only where the
output has it more often than the input ("The tone is characterized by a
limp" does not explain "paratonia" by the input's own "tone").

So "Partial plantar fasciotomy" rewritten as "partial foot tightening"
misses "fasciotomy" (no cut is named), while "a cut to release the tight
tissue under the foot" explains it; "Gross hematuria" as
"blood in the urine" explains it. A term whose medical part follows the
privative prefix ``a-``/``an-`` ("without", "not": aphasia, apnea, anemia,
atrophy) is explained only by a plain word for that part *and* a word of
absence or loss (:data:`PRIVATIVE`): "stable speech" for "stable expressive
aphasia" names the speech but not its loss, "trouble speaking" explains it.
So is a term of the suffix ``-stasis``/``-static`` ("stopping, controlling":
hemostasis, cytostatic; not metastasis or homeostasis, :data:`STOPPING`):
"it seemed to be bleeding" for "hemostatic" names the blood, not its stop,
"bloodless" (a word of the suffix -less, "without") explains it.
Limits by design: otherwise one plain word for one part is enough, and a
word with no known part is not checked at all.

The word parts and their plain meanings are the standard tables of
medical terminology (Chabner, *The Language of Medicine*, 12th ed.,
"Suffixes", "Prefixes" and "Combining forms"; MedlinePlus, "Understanding
Medical Words"). Pure Python: median 0.16 ms, P95 0.38 ms per laymaker
sentence once the HPO index is loaded (the 250 rewrites of laymaker-dev).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from clinical.quality.textnorm import normalize
from inference.lay_terms import HPO_LAYPERSON, easy_word, find_terms

#: Medical word parts, as a regular expression over a lower-case word, and
#: the plain words (stems, matched at the start of an output word) that
#: explain them. Sources in the module docstring.
WORD_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # procedures
    (r"ectom(?:y|ies|ized?)$", ("remov", "cut out", "cut away", "take out", "taken out", "took out", "excis",
                               "resect")),
    (r"(?<!s)tom(?:y|ies)$", ("cut", "incision", "open", "release", "slit")),
    (r"stom(?:y|ies)$", ("opening", "hole", "stoma", "bag", "connect")),
    (r"plast(?:y|ies)$", ("repair", "reshap", "rebuil", "reconstruct", "fix", "replac", "widen", "stretch")),
    (r"(?<!micro)scop(?:y|ies|e|es|ic)$", ("camera", "scope", "look", "view", "examin", "tube", "light",
                                           "keyhole", "key hole", "key-hole")),
    (r"^microscop", ("tiny", "small", "seen", "visible", "microscope")),
    (r"(?:graph(?:y|ies|ic)|gram|grams)$", ("picture", "image", "imaging", "scan", "x-ray", "xray", "record",
                                           "test", "trace", "tracing", "ultrasound")),
    (r"centes[ie]s$", ("needle", "drain", "fluid", "remov", "puncture", "tap")),
    (r"(?:desis|pex(?:y|ies))$", ("fus", "join", "fix", "attach", "secur", "stiffen")),
    (r"rrhaph(?:y|ies)$", ("stitch", "sew", "suture", "repair", "close")),
    (r"trips(?:y|ies)$", ("crush", "break", "shatter")),
    (r"(?<!para)lys(?:is|es)$", ("break", "loosen", "free", "releas", "destroy", "dissolv", "separat")),
    (r"paraly[st]", ("paraly", "cannot move", "can't move", "unable to move", "not move", "weak")),
    (r"biops(?:y|ies)$", ("sample", "piece", "tissue", "test")),
    # conditions
    (r"it(?:is|ides)$", ("inflam", "swell", "swoll", "infect", "irritat", "sore", "red")),
    (r"(?:a)?emi(?:a|as|c)$", ("blood", "level", "count")),
    (r"uri(?:a|as|c)$", ("urine", "pee", "urinat", "wee")),
    (r"(?:algia|algias|dynia)$", ("pain", "hurt", "ache", "aching", "sore", "tender")),
    (r"path(?:y|ies|ic)$", ("disease", "problem", "damage", "disorder", "condition", "illness", "trouble")),
    (r"megal(?:y|ies|ic)$", ("enlarg", "big", "large", "swell", "swoll", "grow")),
    (r"om(?:a|as|ata)$", ("tumor", "tumour", "growth", "lump", "mass", "swell", "swoll", "cancer", "collection",
                          "bump", "cyst", "spot")),
    (r"pleg(?:ia|ic)$", ("paraly", "weak", "cannot move", "can't move", "unable to move", "not move")),
    (r"pares(?:is|es)$", ("weak", "paraly")),
    (r"troph(?:y|ies|ic)$", ("size", "shrink", "shrunk", "small", "grow", "waste", "wasting", "thick", "bulk",
                             "big", "large")),
    (r"peni(?:a|as|c)$", ("low", "few", "lack", "not enough", "shortage", "decreas", "reduc", "less")),
    (r"cytos(?:is|es)$", ("high", "many", "increas", "too many", "raised", "elevat", "more")),
    (r"rrh(?:ea|oea|eas|ag(?:e|es|ic|ing|ia))$", ("flow", "discharge", "leak", "running", "bleed", "loose",
                                                   "watery", "runny")),
    (r"phas(?:ia|ic)$", ("speech", "speak", "spoke", "language", "talk", "word", "express", "understand")),
    (r"phag(?:ia|ic)$", ("swallow", "eat")),
    (r"ton(?:ia|ic|us)$", ("tone", "tight", "stiff", "floppy", "tense", "tension", "resist", "relax", "loose",
                           "rigid")),
    (r"scleros(?:is|es)$", ("harden", "hard", "stiff", "scar", "thick")),
    (r"stenos(?:is|es)$", ("narrow", "tight", "block", "constrict")),
    (r"ptos(?:is|es)$", ("droop", "sag", "fall", "low")),
    (r"lithias(?:is|es)$", ("stone",)),
    (r"cele$", ("bulge", "hernia", "swell", "swoll", "pouch")),
    (r"pnea$", ("breath",)),
    (r"ectas(?:is|ia|es)$", ("widen", "stretch", "dilat", "enlarg", "swell", "swoll", "bulg")),
    # prefixes (on a word of eight letters or more, so "hyper-" is a prefix, not the word)
    (r"^hyper(?=.{3})", ("high", "rais", "too much", "elevat", "increas", "over", "more", "excess", "extra",
                         "fast", "strong", "big")),
    (r"^hypo(?=.{4})", ("low", "too little", "decreas", "under", "less", "reduc", "slow", "weak", "small",
                        "not enough")),
    (r"^brady(?=.{3})", ("slow",)),
    (r"^tachy(?=.{3})", ("fast", "rapid", "quick", "racing")),
    (r"^dys(?=.{4})", ("difficult", "trouble", "hard", "problem", "abnormal", "pain", "bad", "poor", "weak",
                       "not working", "not work", "n't work", "well", "disorder")),
    (r"^poly(?=.{4})", ("many", "much", "multiple", "more", "several", "frequent", "a lot")),
    (r"^olig(?=.{4})", ("few", "little", "less", "low", "small amount")),
    (r"^hemi(?=.{4})", ("half", "one side", "side")),
    # roots that are not body sites
    (r"^ha?em(?:at|o)|(?<!sc)ha?emat", ("blood", "bleed", "bruis")),
    (r"isch(?:a)?em", ("blood", "oxygen", "circulation", "flow")),
    (r"thromb", ("clot",)),
    (r"embol", ("clot", "block", "plug")),
    (r"aden(?:o|itis|oma|ectom|opath)", ("gland", "node", "lymph")),
    (r"lith(?:o|ias|s?$)", ("stone",)),
    (r"neoplas", ("tumor", "tumour", "cancer", "growth", "mass", "lump")),
    (r"carcin", ("cancer", "tumor", "tumour", "malignan")),
    (r"^onco", ("cancer", "tumor", "tumour")),
    (r"^lip(?:o|id)", ("fat",)),
    (r"glyc", ("sugar", "glucose")),
    (r"necro", ("dead", "death", "dying", "die")),
    (r"^pyo|purulen", ("pus", "infect")),
    (r"cyan", ("blue", "oxygen")),
    (r"erythem|erythr", ("red",)),
    (r"leuk", ("white",)),
    (r"febr|pyrex", ("fever", "temperature")),
    (r"ather(?:o|ec)", ("fat", "plaque", "deposit", "clog", "harden", "block")),
    (r"fibro", ("scar", "fibrous", "tissue", "thick", "harden")),
    (r"edem|oedem", ("swell", "swoll", "fluid", "puff")),
    (r"ecchym|contus", ("bruis",)),
    (r"steato", ("fat",)),
    (r"calcul(?:i|us|ous)$|calcif", ("stone", "calcium", "harden")),
)

#: Words of absence, loss or lack: with the plain word for its part, one of
#: them (or a word of the suffix -less, :data:`PRIVATIVE_SUFFIX`) explains a
#: term of the privative prefix ``a-``/``an-`` (Chabner, "Prefixes": a-, an-
#: "no, not, without"), matched as whole words or, with a trailing ``*``, as
#: word starts.
PRIVATIVE = ("no", "not", "none", "without", "cannot", "unable", "loss", "lost", "lack*", "trouble*", "difficult*",
             "hard", "absen*", "low*", "reduc*", "decreas*", "less", "little", "shrink*", "shrunk*", "small*",
             "thin*", "wast*", "weak*", "stop*", "problem*", "disorder*", "disturb*", "poor*", "never")
#: A word of the suffix -less, "without" (bloodless, painless, motionless),
#: but not the conjunctions and adverbs that end in it.
PRIVATIVE_SUFFIX = r"(?<![a-z])(?!(?:nevertheless|nonetheless|regardless|unless)(?![a-z]))[a-z]{3,}less(?![a-z])"
_PRIVATIVE = re.compile("|".join(rf"(?<![a-z]){re.escape(w.rstrip('*'))}" + ("" if w.endswith("*") else "(?![a-z])")
                                 for w in PRIVATIVE) + r"|n't(?![a-z])|" + PRIVATIVE_SUFFIX)

#: A term of the suffix -stasis/-static, "stopping, controlling" (Chabner,
#: "Suffixes"): like a privative term, its plain part alone says the
#: opposite. Metastasis ("beyond" + "placing": spread) and homeostasis
#: ("staying the same") are not a stopping.
STOPPING = re.compile(r"(?<!meta)(?<!homeo)sta(?:sis|ses|tic|tically)$")

#: Everyday words that the patterns above would read as terms.
NOT_TERMS = re.compile(r"^(?:systemic|academic|endemic|epidemic|pandemic|polemic|sympath|empath|apath|catastroph|"
                       r"troph(?:y|ies)$|program|diagram|kilogram|milligram|microgram|telegram|photograph|paragraph|"
                       r"autograph|demograph|geograph|biograph|analys|catalys|hypothes|hypocri|polyest|polymer|"
                       r"polytech|polygon|anatom|telescop|horoscop|kaleidoscop)")

#: A term word has at least this many letters (and is not an easy word).
MIN_TERM_LETTERS = 5
#: Endings that make an easy word no term ("marked", "bigger", "sickness").
EASY_ENDINGS = ("s", "es", "ed", "d", "ing", "ly", "er", "ness")
#: Letters a kept word and a term share at their start (all but the
#: term's last, at most six): "fasciotomies" keeps "fasciotomy", "ischemia"
#: "ischemic", "obesity" "obese"; "hematoma" does not keep "hematuria".
STEM_LETTERS = 6

#: A piece of a term that keeps it ("adrenal" of "adrenalectomy") has at least this many letters.
PIECE_LETTERS = 5

_WORD = re.compile(r"[a-z]+")
#: Words of an HPO layperson synonym that explain nothing.
_STOPWORDS = {"the", "and", "for", "with", "from", "that", "this", "into", "your", "are", "was", "has", "have",
              "not", "its", "all", "any", "one", "too", "of", "in", "on", "or", "to", "a", "an"}


@dataclass(frozen=True)
class Term:
    """One medical word of the input: ``word`` as written, its character
    offsets ``start``/``end`` in the input, ``plain``: the stems of the
    plain words that explain it, and ``privative``: its medical part
    follows the prefix ``a-``/``an-`` or it ends in the suffix of stopping
    (:data:`STOPPING`), so a plain word explains it only beside a word of
    :data:`PRIVATIVE`."""

    word: str
    start: int
    end: int
    plain: tuple[str, ...]
    privative: bool = False


@functools.cache
def _compiled_parts() -> tuple[tuple[re.Pattern, tuple[str, ...]], ...]:
    return tuple((re.compile(pattern), plain) for pattern, plain in WORD_PARTS)


def _word_part_plain(word: str) -> tuple[bool, set[str], bool]:
    """``(has a medical word part, the plain words of its parts, a part
    follows the privative prefix a-/an- or the word ends in -stasis/-static)``
    for one lower-case word."""
    plain: set[str] = set()
    medical = privative = False
    for pattern, words in _compiled_parts():
        if match := pattern.search(word):
            medical = True
            plain.update(words)
            privative = privative or (word[0] == "a" and match.start() == 1) or (
                word.startswith("an") and match.start() == 2)
    privative = privative or (medical and bool(STOPPING.search(word)))
    return medical, plain, privative


def input_terms(text: str) -> list[Term]:
    """The medical terms of ``text`` (see the module docstring), each word
    once, in text order.

    Returns:
        ``[Term]``; empty for a text with none.
    """
    norm = normalize(text)
    lay: dict[int, set[str]] = {}
    single: set[int] = set()  # one-word HPO terms ("vertigo"), themselves terms
    for start, surface, (_, definition, source) in find_terms(text):
        if source != HPO_LAYPERSON:
            continue
        plain = {w for w in _WORD.findall(normalize(definition)) if len(w) >= 3 and w not in _STOPWORDS}
        words = list(_WORD.finditer(norm, start, start + len(surface)))
        for m in words:
            lay.setdefault(m.start(), set()).update(plain)
        if len(words) == 1:
            single.add(words[0].start())
    terms: list[Term] = []
    seen: set[str] = set()
    for m in _WORD.finditer(norm):
        word = m.group(0)
        if (len(word) < MIN_TERM_LETTERS or word in seen or easy_word(word, EASY_ENDINGS)
                or NOT_TERMS.match(word)):
            continue
        medical, plain, privative = _word_part_plain(word)
        if m.start() in lay:
            medical = medical or m.start() in single
            plain |= lay[m.start()]
        if not medical:
            continue
        seen.add(word)
        terms.append(Term(text[m.start():m.start() + len(word)], m.start(), m.start() + len(word),
                          tuple(sorted(plain)), privative))
    return terms


def term_kept(term: Term, output_norm: str, input_norm: str = "") -> bool:
    """The output keeps or explains ``term`` (rules in the module
    docstring). A plain word explains it only where the output has it more
    often than the input (``input_norm``): "The tone is characterized by
    a limp" does not explain "paratonia" with the input's own "tone". Both
    texts are :func:`~clinical.quality.textnorm.normalize`'d."""
    word = normalize(term.word)
    words = _WORD.findall(output_norm)
    stem = word[:min(STEM_LETTERS, len(word) - 1)]
    if any(w.startswith(stem) for w in words):
        return True
    if any(len(w) >= PIECE_LETTERS and w in word for w in words):
        return True
    explained = any(_count(plain, output_norm) > _count(plain, input_norm) for plain in term.plain)
    if explained and term.privative:
        return len(_PRIVATIVE.findall(output_norm)) > len(_PRIVATIVE.findall(input_norm))
    return explained


def _count(plain: str, norm: str) -> int:
    return len(re.findall(rf"(?<![a-z]){re.escape(plain)}", norm))


def terms_checked(*, input_text: str, output_text: str) -> list[tuple[Term, bool]]:
    """Each term of the input with whether ``output_text`` keeps or explains
    it (:func:`term_kept`), in input order (English output)."""
    input_norm, output_norm = normalize(input_text), normalize(output_text)
    return [(term, term_kept(term, output_norm, input_norm)) for term in input_terms(input_text)]


def terms_missing(*, input_text: str, output_text: str) -> list[Term]:
    """The input's terms that ``output_text`` neither keeps nor explains,
    in input order (English output)."""
    return [term for term, kept in terms_checked(input_text=input_text, output_text=output_text) if not kept]
