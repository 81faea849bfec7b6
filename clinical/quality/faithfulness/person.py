"""The ``person`` kind of the faithfulness check: who is who.

First person singular ("I", "my", "me"; Spanish "yo", "mi", "mis") when
the input has no first person (the model speaking as the clinician or as
the patient); "he"/"she" (his/her/him) of a sex the input does not give:
the input names nobody in the third person, or names someone without a
sex ("the patient says he": ``detail`` "sex not in input"), or only the
other sex (``detail``: "swapped"). A sex is given by a pronoun or a word
such as "man", "mother", "pregnant". An action the input gives to "I"
given to someone else ("I froze" -> "he froze"). A relative or carer the
input does not name (:data:`RELATIVES`: "the patient's parents" for a
legal guardian). The relatives and the who-did-it rule are English only;
the pronouns are checked in English and Spanish.
"""

from __future__ import annotations

import re

from clinical.quality.faithfulness.common import FaithfulnessFlag

_FIRST_OUT = {"en": re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b"),
              "es": re.compile(r"\b(?:yo|mi|mis|conmigo|mio|mia|mios|mias)\b")}
_FIRST_IN = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b")
_MALE = re.compile(r"\b(?:he|him|his|himself|he's|mr|man|male|boy|gentleman|son|father|husband|brother)\b")
_FEMALE = re.compile(r"\b(?:she|her|hers|herself|she's|mrs|ms|miss|woman|female|girl|lady|daughter|mother|wife|"
                     r"sister|pregnan\w*|vagina\w*|uter\w*|ovar\w*|breast|gravida|para)\b")
_THIRD_OUT = {"en": (re.compile(r"\b(?:he|him|his|himself|he's)\b"), re.compile(r"\b(?:she|her|hers|herself|she's)\b")),
              "es": (re.compile(r"\bel\b(?=\s+(?:tiene|esta|es|ha|dice|refiere|niega|presenta))|\bel mismo\b"),
                     re.compile(r"\bella\b"))}


#: Relatives and carers an output may name, each group with the input
#: words that name it: a group the input does not name is someone made up or
#: put in another's place ("the patient's parents were talked to" for a
#: legal guardian). "mother" and "family" are not checked: a delivery
#: note's patient is a mother, and "family doctor" or "family history" name
#: nobody.
RELATIVES = {
    "parent": (r"parents?", r"parents?|mother|father|mom|dad"),
    "father": (r"fathers?|dad", r"fathers?|dad|parents?"),
    "son": (r"sons?", r"sons?|children|child"),
    "daughter": (r"daughters?", r"daughters?|children|child"),
    "sibling": (r"brothers?|sisters?|siblings?", r"brothers?|sisters?|siblings?"),
    "spouse": (r"wife|wives|husbands?|spouses?", r"wife|wives|husbands?|spouses?|partner"),
    "grandparent": (r"grand(?:mother|father|parent)s?", r"grand(?:mother|father|parent)s?"),
    "guardian": (r"guardians?", r"guardians?"),
    "caregiver": (r"caregivers?|carers?", r"caregivers?|carers?|care givers?"),
}
_RELATIVES = {name: (re.compile(rf"\b(?:{out})\b"), re.compile(rf"\b(?:{named})\b"))
              for name, (out, named) in RELATIVES.items()}

#: A subject pronoun and the next word, for the who-did-it rule.
_SUBJECT_VERB = re.compile(r"\b(i|he|she|you|we|they)\s+([a-z]{4,})\b")


def person_flags(source_norm: str, output: str, output_norm: str, language: str) -> list[FaithfulnessFlag]:
    """``person`` flags of ``output`` (``language``) against the input, both
    folded by :func:`clinical.quality.textnorm.normalize` (``source_norm``,
    ``output_norm``)."""
    flags = []
    first_in = _FIRST_IN.search(source_norm)
    possessive_in = re.search(r"\b(?:my|mine|myself)\b", source_norm)
    for m in _FIRST_OUT[language].finditer(output_norm):
        if first_in and (possessive_in or m.group(0) not in ("my", "mine", "myself")):
            continue
        if language == "en" and m.group(0) == "i" and (
                re.match(r"\s*(?:\.|,|v\b)", output_norm[m.end():])
                or re.search(r"\b(?:type|grade|stage|class|phase|factor|nerve|level)\s+$", output_norm[:m.start()])):
            continue  # a roman numeral ("type I diabetes") or list letter "i."
        if output[m.start():m.end()] == "MI":
            continue  # myocardial infarction, not Spanish "mi"
        flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                      "first person not in input" if not first_in else
                                      "'my' not in input: speaking as the patient?"))
    male_in, female_in = bool(_MALE.search(source_norm)), bool(_FEMALE.search(source_norm))
    third_in = male_in or female_in or bool(re.search(r"\b(?:patient|pt|they|child|infant|baby|who)\b", source_norm))
    for pattern, sex, other_in, same_in in ((_THIRD_OUT[language][0], "male", female_in, male_in),
                                            (_THIRD_OUT[language][1], "female", male_in, female_in)):
        for m in pattern.finditer(output_norm):
            if same_in:
                continue
            detail = f"swapped: input refers to a {'female' if sex == 'male' else 'male'} person" if other_in \
                else "sex not in input" if third_in else "no third person in input"
            flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(), detail))
    if language == "en":
        for name, (out, named) in _RELATIVES.items():
            if named.search(source_norm):
                continue
            for m in out.finditer(output_norm):
                flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                              f"relative not in input ({name})"))
    # who did it: "I froze a wart on him" -> "he froze a wart on you"
    if language == "en":
        doers: dict[str, set[str]] = {}
        for m in _SUBJECT_VERB.finditer(source_norm):
            doers.setdefault(m.group(2), set()).add(m.group(1))
        for m in _SUBJECT_VERB.finditer(output_norm):
            subject, verb = m.group(1), m.group(2)
            was = doers.get(verb)
            if was and subject not in was and ("i" in was or subject == "i") and \
                    not any(f.start == m.start() for f in flags):
                flags.append(FaithfulnessFlag("person", output[m.start():m.end()], m.start(), m.end(),
                                              f"swapped: input says {'/'.join(sorted(was))} {verb}"))
    return flags
