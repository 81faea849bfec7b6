"""Claims that an organ is failing, damaged or not working when the input
says no such thing: the ``organ_function`` kind of the faithfulness check
(:mod:`clinical.quality.faithfulness`).

A test result is not an organ's failure: "Elevated liver function tests"
rewritten as "the liver is not working as well as it should" tells a
patient their liver is failing, which the clinician did not find (raised
liver enzymes mostly mean irritation of liver cells, with the liver's
work intact). The words of such a claim are everyday words ("not
working", "failing", "damaged"), so no number, drug, site or negation rule
sees them: the site named is the right one.

Flagged: an output that names a body site (any anatomy term, including
the class words "organ" and "body") and says, not negated, that something
fails, is damaged or does not work (:data:`CLAIM`), when the input has no
word of lost function or harm (:data:`GROUNDS`: failure, insufficiency,
dysfunction, impairment, damage, injury, infarct, ischemia, deficiency,
paralysis, necrosis, atrophy, fibrosis, the "-pathy" diseases, trauma,
lesions, reduced function or ejection fraction, and the abbreviations of
organ failures: CHF, AKI, CKD, ESRD, ARDS, COPD, CVA, MI). The word lists
are a hand table from the vocabulary of organ dysfunction (the SOFA
score's organ systems, Vincent et al. 1996, and the clinical terms for
lost or reduced function); what they are worth is their false-positive
rate on text that is faithful by construction, measured by
``python -m bench faithfulness_rates`` on the clinicians' rewrites, the
four published systems and the Cochrane plain-language summaries (see
``docs/quality/faithfulness.md``).

The input is grounded as a whole (a failure named anywhere grounds any
claim): a claim about the wrong organ is the ``body_site`` kind's to see.
Both texts are matched folded by :func:`clinical.quality.textnorm.normalize`.
"""

from __future__ import annotations

import re

#: What an output says when it claims lost function, on folded text
#: ("failed to", "a failure to consider": an act that failed, not an organ). The
#: forms with no negation of their own ("failing", "damaged") are skipped
#: after a negation (:data:`NEGATED_BEFORE`); "not working" is the claim.
CLAIM = re.compile(
    r"(?:(?:\b(?:do|does|did|is|are|was|were|will|would|can|could|may|might)\s+)?\bnot|\b[a-z]*n't|\bno longer|\bnever|\bstopp?(?:ed|s)?|\bquit)\s+(?:been\s+|be\s+|really\s+|fully\s+)?"
    r"work(?:ing|s)?\b(?!\s+out)"
    r"|\bfail(?:s|ed|ing|ures?)?\b(?!\s+to\b)"
    r"|\bdamag(?:e|ed|es|ing)\b"
    r"|\b(?:shutting|shut|shuts) down\b|\b(?:giving|gave|gives|give) out\b|\bworn out\b")
#: The claim words that carry no negation: read only when no negation
#: stands in the three words before them ("no damage", "isn't failing").
_NEGATABLE = re.compile(r"fail|damag|shut|giv|gave|worn")
NEGATED_BEFORE = re.compile(r"(?:\bno|\bnot|\b[a-z]*n't|\bwithout|\bnever|\bnor|\bneither)\s+(?:[a-z']+\s+){0,3}$")
#: Input words that ground a claim of lost function or harm (folded text).
GROUNDS = re.compile(
    r"fail|insufficien|dysfunction|malfunction|impair|damag|injur|infarct|ischa?emi|deficien|deficit"
    r"|paraly|pares[ie]s|plegi|palsy|necro[st]|atroph|degenerat|cirrho|fibros|sclero[st]|pathy|pathic"
    r"|trauma|lesion|lacerat|contus|fractur|ruptur|\btear\b|\btorn\b|wound|burn|ulcer|hemorrhag|haemorrhag"
    r"|bleed|stroke|arrest|shock|coma\b|anoxi|hypoxi|toxic|overdose|poison|obstruct|occlu|stenos|uremi"
    r"|encephalopath|nonfunction|non-function|not function|(?:decreas|reduc|poor|low|diminish|worsen|declin)\w*"
    r"\s+(?:[a-z]+\s+){0,2}(?:function|ejection|output|clearance|gfr)|ejection fraction|\bef\b|\blvef\b"
    r"|hypokines|akines|dyskines|\b(?:chf|hf|hfref|hfpef|aki|ckd|esrd|arf|ards|copd|cva|tia|mi|stemi|nstemi)\b")


def organ_function_spans(source_norm: str, output_norm: str, site_starts: list[int]) -> list[tuple[int, int]]:
    """The claims of lost organ function in ``output_norm`` that
    ``source_norm`` does not ground (both folded by
    :func:`clinical.quality.textnorm.normalize`).

    Args:
        source_norm: the folded input.
        output_norm: the folded output.
        site_starts: offsets in the output of the body sites it names
            (any anatomy term, class words such as "organ" and "body"
            included); with none, nothing is flagged.

    Returns:
        ``[(start, end)]``: character offsets of each claim in the output
        (the same in the unfolded output), in output order.
    """
    if not site_starts or GROUNDS.search(source_norm):
        return []
    spans = []
    for m in CLAIM.finditer(output_norm):
        if _NEGATABLE.match(m.group(0)):
            sentence_start = max(output_norm.rfind(c, 0, m.start()) for c in ".;!?\n") + 1
            if NEGATED_BEFORE.search(output_norm[sentence_start:m.start()]):
                continue
        spans.append((m.start(), m.end()))
    return spans
