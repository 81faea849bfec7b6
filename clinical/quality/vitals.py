"""Vital signs an output names that its input gives no ground for: the
``vital_sign`` kind of the faithfulness check
(:mod:`clinical.quality.faithfulness`).

A plain-language rewrite that speaks of "your blood pressure" when the
note never measured or named one states a finding the clinician did not
make ("my blood pressure is too high" for "your levels are high"; "an
increase in blood pressure" for hyperemia, which is more blood flow).
Numbers, drugs and sites do not see it.

The signs are those of HL7 FHIR R4's Vital Signs profile
(``observation-vitalsigns``, LOINC panel 85353-1) that a lay text names
with words of their own: blood pressure, heart rate, respiratory rate,
body temperature and oxygen saturation (height, weight, BMI and head
circumference are left out: "weight" is an everyday word). Each has the
words an output uses for it (:data:`VITAL_SIGN_WORDS`, first pattern) and the
words of an input that ground it (second pattern): the sign's name, its
abbreviation (BP, HR, RR, SpO2), its unit (mmHg, bpm) and the findings
defined by it (hypertension, tachycardia, tachypnea, fever, hypoxia).
Both are matched on text folded by :func:`clinical.quality.textnorm.normalize`.
"""

from __future__ import annotations

import re

#: ``{sign: (output words, input words that ground them)}``, regular
#: expressions over folded text. An output "blood pressure
#: medicine/pill" names a drug class, not a measurement (the drug check
#: reads drugs), so it is not matched.
VITAL_SIGN_WORDS: dict[str, tuple[str, str]] = {
    "blood pressure": (
        r"\bblood pressures?\b(?!\s+(?:medicine|medication|pill|drug|tablet)s?\b)|\bsystolic\b|\bdiastolic\b",
        r"blood pressure|\b[sd]?bp\b|systolic|diastolic|hypertensi|hypotensi|\bhtn\b|mm ?hg|orthostat"
        r"|pressor|eclampsia|normotensi|\b\d{2,3}\s*/\s*\d{2,3}\b"),
    "heart rate": (
        r"\bheart rates?\b|\bpulse rates?\b|\bbeats? (?:per|a|each) minute\b",
        r"heart rate|\bhr\b|pulse|\bbpm\b|beats? (?:per|a) minute|tachycardi|bradycardi|arrhythmi"
        r"|fibrillat|flutter|palpitat|heart ?beat|rhythm|\brate\b"),
    "respiratory rate": (
        r"\b(?:breathing|respiratory|respiration) rates?\b|\bbreaths? (?:per|a|each) minute\b",
        r"respiratory rate|respiration|\brr\b|tachypn|bradypn|breaths|apnea|apnoea|hyperventil"),
    "body temperature": (
        r"\b(?:body )?temperatures?\b",
        r"temperature|\btemp\b|fever|febrile|pyrexi|hypertherm|hypotherm|°|\bdeg|chills|rigors|warm|\bcold\b|\bcool"),
    "oxygen saturation": (
        r"\boxygen (?:levels?|saturations?|sats?)\b|\b(?:levels?|amount) of oxygen\b|\bblood oxygen\b",
        r"oxygen|\bo2\b|spo2|\bsats?\b|saturat|hypox|desat|cyanos|room air|\bra\b|pulse ox"),
}
#: :data:`VITAL_SIGN_WORDS` compiled once.
VITAL_SIGNS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    sign: (re.compile(said), re.compile(grounds)) for sign, (said, grounds) in VITAL_SIGN_WORDS.items()}


def vital_sign_spans(source_norm: str, output_norm: str) -> list[tuple[int, int, str]]:
    """The vital signs ``output_norm`` names that ``source_norm`` does not
    ground (both folded by :func:`clinical.quality.textnorm.normalize`).

    Returns:
        ``[(start, end, sign)]``: character offsets in the output (the same
        in the unfolded output) and the sign's name, in output order.
    """
    spans = []
    for sign, (said, grounds) in VITAL_SIGNS.items():
        if grounds.search(source_norm):
            continue
        spans += [(m.start(), m.end(), sign) for m in said.finditer(output_norm)]
    return sorted(spans)
