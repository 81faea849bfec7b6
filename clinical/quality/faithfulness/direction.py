"""The ``direction`` kind of the faithfulness check: a direction of change
the input does not state (the rule and its limits: :func:`direction_flags`).

A measure whose value goes up or down (blood pressure, heart rate,
breathing rate, blood sugar, temperature, oxygen, potassium, sodium,
calcium, magnesium, phosphate, chloride: :data:`DIRECTION_MEASURES`),
paired with the direction word that governs it in its clause ("lower blood
pressure", "potassium was high", "hyperkalemia"): flagged when the output
says the opposite of the input, of the same type (a high or low state, or
a change: "hypertension" -> "a medicine to lower blood pressure" is
treatment, not a reversal), or when the input gives the measure only an
ambiguous verb whose direction depends on the patient ("Naloxone improves
blood pressure", in shock: raises it) and the output commits to one
("helps lower blood pressure"). Pain, risk and symptoms are no measures
here: "improves pain" -> "reduces pain" says the same. English outputs
only.
"""

from __future__ import annotations

import re

from clinical.quality.faithfulness.common import FaithfulnessFlag
from clinical.quality.faithfulness.negation import SCOPE_TERMINATORS

#: Measures whose value an output may say goes up or down, with the words
#: that name them (regular expressions over folded text). The vital signs
#: of HL7 FHIR R4's Vital Signs profile (:mod:`clinical.quality.vitals`)
#: and the common serum analytes of a basic metabolic panel (LOINC 51990-0:
#: glucose, sodium, potassium, chloride, calcium) with magnesium and
#: phosphate. None is a symptom or a risk: pain, risk and symptoms have one
#: good direction, so "improves pain" -> "reduces pain" says the same.
DIRECTION_MEASURES: dict[str, str] = {
    "blood pressure": r"blood[ -]pressures?|\b[sd]?bp\b|systolic(?: blood)?(?: pressures?)?"
                      r"|diastolic(?: blood)?(?: pressures?)?|arterial pressures?",
    "heart rate": r"heart[ -]?rates?|pulse(?: rates?)?|heart ?beats?|\bhr\b",
    "respiratory rate": r"(?:breathing|respiratory|respiration) rates?",
    "blood sugar": r"(?:blood |plasma |serum |fasting )?(?:sugars?|glucose)(?: levels?)?",
    "body temperature": r"(?:body )?temperatures?|\btemp\b",
    "oxygen": r"(?:blood )?(?:oxygen|o2)(?: levels?| saturations?| sats?)?|\bspo2\b|\bsaturations?\b|oxygenation",
    "potassium": r"potassium",
    "sodium": r"sodium",
    "calcium": r"calcium",
    "magnesium": r"magnesium",
    "phosphate": r"phosphates?|phosphorus",
    "chloride": r"chloride",
}
#: A measure's good direction where it has one whatever the context
#: (oxygen: more is better), for the rule of an ambiguous input verb:
#: "improves oxygenation" -> "raises oxygen levels" is its one reading.
GOOD_DIRECTION = {"oxygen": "up"}
#: Findings that name a measure and its direction at once (the prefixes
#: hyper-/hypo-, tachy-/brady-; fever), as a state: ``(pattern, measure,
#: direction)``. "hypoglycaemic agents" are medicines that lower sugar,
#: not a low sugar, and are not read.
DIRECTION_FINDINGS: tuple[tuple[str, str, str], ...] = (
    (r"(?<!anti-)(?<!anti)\bhypertensi\w*|\bhtn\b", "blood pressure", "up"),
    (r"\bhypotensi\w*", "blood pressure", "down"),
    (r"\btachycardi\w*", "heart rate", "up"),
    (r"\bbradycardi\w*", "heart rate", "down"),
    (r"\btachypn\w*", "respiratory rate", "up"),
    (r"\bbradypn\w*", "respiratory rate", "down"),
    (r"\bhyperglyc\w*", "blood sugar", "up"),
    (r"\bhypoglyc\w*(?!\s+(?:agents?|drugs?|medicines?|medications?|therap\w*|treatments?))", "blood sugar", "down"),
    (r"\bfebrile\b|\bfevers?\b|\bpyrexi\w*|\bhypertherm\w*", "body temperature", "up"),
    (r"\bhypotherm\w*", "body temperature", "down"),
    (r"\bhypox\w*|\bdesaturat\w*", "oxygen", "down"),
    (r"\bhyperox\w*", "oxygen", "up"),
    (r"\bhyperkal\w*", "potassium", "up"),
    (r"\bhypokal\w*", "potassium", "down"),
    (r"\bhypernatr\w*", "sodium", "up"),
    (r"\bhyponatr\w*", "sodium", "down"),
    (r"\bhypercalc\w*", "calcium", "up"),
    (r"\bhypocalc\w*", "calcium", "down"),
    (r"\bhypermagnes\w*", "magnesium", "up"),
    (r"\bhypomagnes\w*", "magnesium", "down"),
    (r"\bhyperphosphat\w*", "phosphate", "up"),
    (r"\bhypophosphat\w*", "phosphate", "down"),
)
#: Direction words, each with its direction and its type: a ``state`` (the
#: value is high or low), a ``change`` (something raises or lowers it) or
#: ``any`` (a participle, "elevated", "reduced": either). A reversal is
#: flagged only within one type: "hypertension" (a high state) -> "a
#: medicine to lower your blood pressure" (a change down) is treatment,
#: not a reversal. The ambiguous words of an input ("improves",
#: "affects", "normalises"...) have the direction ``None``.
DIRECTION_WORDS: dict[str, tuple[str | None, str]] = {
    **dict.fromkeys(("high", "highest", "fast", "rapid", "racing"), ("up", "state")),
    **dict.fromkeys(("higher", "faster", "greater"), ("up", "comparative")),
    **dict.fromkeys(("elevated", "raised", "increased"), ("up", "any")),
    **dict.fromkeys(("decreased", "reduced", "lowered"), ("down", "any")),
    **dict.fromkeys(("low", "lowest", "slow", "depressed"), ("down", "state")),
    **dict.fromkeys(("slower",), ("down", "comparative")),
    **dict.fromkeys(("raise", "raises", "raising", "increase", "increases", "increasing", "rise",
                     "rises", "rising", "rose", "risen", "boost", "boosts", "boosted", "boosting", "elevate",
                     "elevates", "elevating", "elevation", "spike", "spikes", "spiked", "climb", "climbs",
                     "climbed", "up"), ("up", "change")),
    **dict.fromkeys(("lowers", "lowering", "decrease", "decreases", "decreasing",
                     "reduce", "reduces", "reducing", "reduction", "reductions", "fall", "falls",
                     "falling", "fell", "fallen", "drop", "drops", "dropped", "dropping", "decline", "declines",
                     "declined", "declining", "down"), ("down", "change")),
    **dict.fromkeys(("improve", "improves", "improved", "improving", "improvement", "improvements", "affect",
                     "affects", "affected", "affecting", "effect", "effects", "change", "changes", "changed",
                     "changing", "normalise", "normalises", "normalised", "normalising", "normalize",
                     "normalizes", "normalized", "normalizing", "normalisation", "normalization", "control",
                     "controls", "controlled", "controlling", "manage", "manages", "managed", "managing",
                     "management", "regulate", "regulates", "regulated", "regulating", "regulation",
                     "stabilise", "stabilises", "stabilised", "stabilize", "stabilizes", "stabilized",
                     "alter", "alters", "altered", "influence", "influences", "impact", "impacts"),
                    (None, "change")),
}
#: "lower" is a verb ("helps lower blood pressure": a change) after these
#: words, else a comparative ("had lower blood pressure": a state).
_LOWER_VERB_AFTER = {"to", "help", "helps", "helped", "helping", "can", "may", "might", "will", "would", "could",
                     "should", "does", "did", "do", "also", "which", "that", "it", "they", "and", "or"}
#: The types whose opposite directions contradict each other: a state
#: ("high") or a finding ("hypertension") and a change ("lowers") do not
#: (a treatment of the state), nor a comparison between groups ("lower heart
#: rate than placebo") and anything but another comparison.
_COMPATIBLE = {"finding": {"finding", "state"}, "state": {"state", "finding", "any"},
               "comparative": {"comparative"}, "change": {"change", "any"}, "any": {"any", "state", "change"}}
#: A direction after these words names a condition to avoid, not a value
#: ("aimed to avoid high blood sugar", "the risk of low blood pressure").
_AVOIDED = {"avoid", "avoids", "avoided", "avoiding", "prevent", "prevents", "prevented", "preventing",
            "prevention", "risk", "risks"}
_MOVE_VERBS = {"go", "goes", "went", "gone", "going", "come", "comes", "came", "coming", "move", "moves", "moved",
               "moving", "push", "pushes", "pushed", "bring", "brings", "brought", "drive", "drives", "drove"}
#: Words that may stand between a direction word and the measure it
#: governs: before the measure ("an increase in your blood pressure"),
#: after it ("blood pressure was too high", "blood pressure did not go up").
_BEFORE_FILLERS = {"the", "a", "an", "your", "his", "her", "their", "its", "my", "our", "patient's", "patients'",
                   "of", "in", "on", "blood", "serum", "plasma", "mean", "average", "resting", "body", "very",
                   "too", "slightly", "significantly", "dangerously", "abnormally", "markedly", "mildly", "both",
                   "levels", "level", "s"}
_AFTER_FILLERS = {"is", "was", "were", "are", "be", "been", "being", "has", "have", "had", "level", "levels",
                  "reading", "readings", "value", "values", "very", "too", "slightly", "a", "bit", "little",
                  "quite", "rather", "significantly", "markedly", "mildly", "got", "gets", "get", "getting",
                  "became", "becomes", "become", "went", "goes", "go", "going", "gone", "stayed", "stays",
                  "remained", "remains", "may", "might", "can", "could", "will", "would", "to", "also", "still",
                  "often", "usually", "dangerously", "abnormally", "much", "somewhat", "did", "does", "do",
                  "not", "no", "never", "t", "s", "that"}
_NEGATORS = {"no", "not", "never", "without", "neither", "nor", "t", "non", "cannot"}
#: A clause ends at a punctuation mark or a conjunction (as the negation
#: kind's scope does, :data:`SCOPE_TERMINATORS`), so a direction word governs
#: a measure of its own clause only.
_CLAUSE_BREAK = re.compile(r"[.;:!?,()\n]|\b(?:" + "|".join(sorted(SCOPE_TERMINATORS | {"whereas", "than", "versus",
                                                                                      "vs", "compared"}))
                           + r")\b")
_DIRECTION_MEASURE_RE = re.compile(r"\b(?:" + "|".join(f"(?P<m{i}>{p})" for i, p in enumerate(DIRECTION_MEASURES.values()))
                                    + r")\b")
_MEASURE_NAMES = list(DIRECTION_MEASURES)
_FINDINGS_RE = [(re.compile(p), m, d) for p, m, d in DIRECTION_FINDINGS]
_TOKEN = re.compile(r"[a-z0-9]+")
_BEFORE_WINDOW, _AFTER_WINDOW = 4, 5


def _direction_of(token: str, previous: str | None) -> tuple[str | None, str] | None:
    if token in ("up", "down") and previous not in _MOVE_VERBS:
        return None  # "go up", "went down"; not "set up"
    if token == "lower":
        return ("down", "change") if previous in _LOWER_VERB_AFTER else ("down", "comparative")
    return DIRECTION_WORDS.get(token)


def _directions(norm: str) -> list[tuple[str, str | None, str, int, int]]:
    """``(measure, direction, type, start, end)`` for each measure of
    ``norm`` that a direction word of its clause governs (the span covers
    both), and each finding that names one (:data:`DIRECTION_FINDINGS`).
    ``direction`` is "up", "down" or ``None`` (an ambiguous word:
    "improves"). A negated direction ("no increase in", "did not rise") is
    left out: it states no direction."""
    found = []
    for pattern, measure, direction in _FINDINGS_RE:
        found += [(measure, direction, "finding", m.start(), m.end()) for m in pattern.finditer(norm)]
    breaks = [b.span() for b in _CLAUSE_BREAK.finditer(norm)] + [(len(norm), len(norm))]
    for m in _DIRECTION_MEASURE_RE.finditer(norm):
        measure = _MEASURE_NAMES[int(m.lastgroup[1:])]
        clause_start = max((e for _, e in breaks if e <= m.start()), default=0)
        clause_end = min(b for b, _ in breaks if b >= m.end())
        # before: the nearest direction word, only fillers between
        before = list(_TOKEN.finditer(norm[clause_start:m.start()]))
        for i in range(len(before) - 1, max(-1, len(before) - 2 - _BEFORE_WINDOW), -1):
            word = before[i].group(0)
            got = _direction_of(word, before[i - 1].group(0) if i else None)
            if got is not None:
                near = {w.group(0) for w in before[max(0, i - 2):i]}
                if not near & _NEGATORS:
                    found.append((measure, *got, clause_start + before[i].start(), m.end()))
                break
            if word not in _BEFORE_FILLERS:
                break
        # after: the nearest direction word, only fillers between
        after = list(_TOKEN.finditer(norm[m.end():clause_end]))
        negated = False
        for i, tok in enumerate(after[:_AFTER_WINDOW + 1]):
            word = tok.group(0)
            got = _direction_of(word, after[i - 1].group(0) if i else None)
            if got is not None:
                if not negated:
                    found.append((measure, *got, m.start(), m.end() + tok.end()))
                break
            if word not in _AFTER_FILLERS:
                break
            negated = negated or word in _NEGATORS
    return [item for item in found if not set(_TOKEN.findall(norm[max(0, item[3] - 30):item[3]])[-3:]) & _AVOIDED]


def direction_flags(source_norm: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:
    """``direction`` flags: a direction of change the input does not state.

    Source: a Cochrane abstract sentence the product had never seen
    (docs/quality/unseen-cochrane-sample.md): "Naloxone improves blood
    pressure" (in shock: raises it) came back as "Naloxone helps lower
    blood pressure" and passed every check. Measures: the vital signs of
    HL7 FHIR R4's Vital Signs profile and the analytes of a basic metabolic
    panel (:data:`DIRECTION_MEASURES`); findings that name a direction by
    their prefix (hyper-/hypo-, tachy-/brady-, fever:
    :data:`DIRECTION_FINDINGS`). A direction word governs a measure when it
    stands next to it in its clause with only articles, possessives or
    auxiliaries between (:func:`_directions`); a negated one ("no increase
    in", "did not rise") and one after "avoid", "prevent" or "risk" state no
    direction.

    Flagged, for an output's (measure, direction): (1) reversed: the input
    says the opposite with a word of a compatible type (:data:`_COMPATIBLE`:
    a state "high" against a state "low" or "hypotension", a change "raises"
    against "lowers", a comparison against a comparison) and never this
    direction; (2) invented: the input gives the measure only ambiguous
    words ("improves", "affects", "normalises", "controls": the direction
    depends on the patient) and the output commits to one, unless it is
    the measure's one good direction (:data:`GOOD_DIRECTION`: oxygen up).

    Not caught: a measure not in the table (cholesterol, HbA1c, a liver
    test, "levels" with no name), a measure named only by a pronoun ("lower
    it"), a direction word farther from its measure or in another clause
    ("increases blood pressure and heart rate" gives heart rate none), a
    state read against a change ("hypertension" -> "raises blood
    pressure" passes: it may be a cause or a treatment), a reversed
    comparison whose groups are swapped, lay verbs not in the list
    ("speeds up", "beating slowly"), an output direction for a measure the
    input names with no direction word at all, and Spanish."""
    source = _directions(source_norm)
    if not source:
        return []
    stated: dict[str, set[tuple[str | None, str]]] = {}
    for measure, direction, kind, _, _ in source:
        stated.setdefault(measure, set()).add((direction, kind))
    flags = []
    for measure, direction, kind, start, end in _directions(output_norm):
        said = stated.get(measure)
        if direction is None or not said:
            continue
        directions = {d for d, _ in said if d is not None}
        if direction in directions:
            continue
        opposite = "down" if direction == "up" else "up"
        if any(d == opposite and k in _COMPATIBLE[kind] for d, k in said):
            detail = f"reversed: input says {opposite}"
        elif not directions and GOOD_DIRECTION.get(measure) != direction:
            detail = "direction not in input: the input's verb gives none"
        else:
            continue
        flags.append(FaithfulnessFlag("direction", output[start:end], start, end, detail))
    return flags
