"""The ``negation`` kind of the faithfulness check: polarity.

NegEx-style cues (Chapman et al. 2001) with a forward scope of five words
(backward for "absent", "ruled out", "negative", ...). Flagged: a content
word the output negates that the input states without any negation
anywhere near it ("you do not have a fever" for "Fever."), and a content
word the input negates that the output states with no negation in its
sentence ("you have a fever" for "No fever."). Words are compared by their
first five letters. Where the input's only negations are implicit
("nonspecific", "afebrile"), each negates its own root only, and the
output's negated head word (the first content word after the cue, three
letters or more and not one of scikit-learn's English stop words) is
flagged when the input states it ("no gas" for "nonspecific bowel gas
pattern"). A double negative the input does not have is flagged too: a
negative subject and a negated verb in one clause ("None of the studies
did not address it" for "None of the included studies addressed it",
which reads as its opposite). Limited recall by design: a rewording of the
negated word is not seen. English outputs only.
"""

from __future__ import annotations

import re

from clinical.quality.faithfulness.common import SENTENCE_END, WORD, FaithfulnessFlag

#: Forward negation cues (NegEx triggers, Chapman et al. 2001, the common
#: subset, with the lay forms a rewrite uses).
NEGATION_FORWARD = re.compile(
    r"\b(?:no|not|without|denies|denied|deny|denying|never|none|nothing|neither|nor|negative\s+for|free\s+of|"
    r"absence\s+of|rule\s+out|ruled\s+out|r/o|w/o|wo|cannot|can't|unable\s+to|lack\s+of|lacks|lacking|non)\b|n't\b")
#: Backward cues: the negated words come before ("fever is absent").
NEGATION_BACKWARD = re.compile(
    r"\b(?:absent|negative|ruled\s+out|excluded|resolved|unremarkable|normal|clear|gone|free|"
    r"within\s+normal\s+limits|wnl)\b")
#: Cues that mark an output negation as a claim (not "normal", "clear").
STRONG_CUE = re.compile(r"no|not|without|never|none|nothing|neither|nor|denies|denied|deny|n't|cannot|can't|"
                        r"absent|negative|ruled\s+out|excluded|free\s+of|absence\s+of|lack\s+of")
#: NegEx pseudo-triggers that do not negate ("no change", "not only").
PSEUDO = re.compile(r"\b(?:no\s+(?:increase|change|further|longer|doubt|matter)|not\s+only|not\s+necessarily|"
                    r"not\s+certain|cannot\s+be\s+(?:ruled\s+out|excluded)|can\s+not\s+be\s+(?:ruled\s+out|excluded)|"
                    r"without\s+difficulty)\b")
#: Implicit negation in clinical words: a- / non- / un- / -free adjectives
#: ("atraumatic", "nontender", "afebrile") mark a negated finding.
IMPLICIT_PREFIXES = ("non", "un", "in", "dis", "an", "a")
IMPLICIT_SUFFIXES = ("free", "less")
IMPLICIT_NEGATION = re.compile(rf"\b(?:{'|'.join(IMPLICIT_PREFIXES)})[a-z]{{4,}}\b"
                               rf"|\b[a-z]+(?:{'|'.join(IMPLICIT_SUFFIXES)})\b")
#: The prefix and suffix of an implicit negation, stripped to leave the root it negates.
_IMPLICIT_PARTS = re.compile(rf"^(?:{'|'.join(IMPLICIT_PREFIXES)})(?=[a-z]{{4}})|(?:{'|'.join(IMPLICIT_SUFFIXES)})$")
#: Conjunctions and subordinating or relative words that start another
#: clause, shared by the negation scope (:data:`SCOPE_TERMINATORS`) and the
#: one-clause rule of :data:`DOUBLE_NEGATIVE` (:data:`CLAUSE_WORDS`).
_CLAUSE_START = {"but", "although", "though", "which", "who", "because", "since", "and", "or", "while", "when",
                 "if", "as"}
SCOPE_TERMINATORS = _CLAUSE_START | {"however", "except", "so"}
#: Not "so", "however" or "except", which end a negation's scope but may
#: stand inside one clause ("nothing so far has not worked").
CLAUSE_WORDS = _CLAUSE_START | {"whom", "whose", "that", "where", "unless", "nor"}
STOPWORDS = {"the", "any", "of", "for", "to", "in", "on", "at", "with", "is", "are", "was", "were", "be", "been",
             "has", "have", "had", "evidence", "signs", "sign", "acute", "other", "significant", "obvious",
             "known", "history", "there", "this", "that", "your", "you", "they", "them", "their", "his", "her",
             "she", "him", "from", "into", "about", "very", "more", "less", "much", "some", "all", "also",
             "does", "did", "doing", "done", "will", "would", "could", "should", "can", "may", "might", "must",
             "patient", "seem", "seems", "seen", "found", "feel", "feels", "felt", "show", "shows", "showed",
             "appear", "appears", "noted", "note", "present", "presents", "get", "gets", "got", "make",
             "made", "take", "taken", "took", "need", "needs", "like", "well", "just", "still", "time", "today",
             "good", "issue", "problem", "problems", "thing", "things", "really", "reports", "report",
             "state", "states", "said", "says", "tell", "tells", "told", "being", "such", "than", "then",
             "what", "where", "here", "these", "those", "it's", "its", "it", "we", "our", "my", "me", "i",
             "because", "normal", "abnormal", "change", "changes", "changed", "sure", "able", "certain",
             "clear", "likely", "unlikely", "left", "right", "side", "sides", "both", "definite", "definitely", "cause", "caused", "causing"}


def _stem(word: str) -> str:
    return word[:5]


def _negated_spans(norm: str) -> list[tuple[int, int, set[str], int, int]]:
    """``(cue start, cue end, scope stems, scope start, scope end)`` per cue."""
    pseudo = [m.span() for m in PSEUDO.finditer(norm)]
    spans = []
    for cue in NEGATION_FORWARD.finditer(norm):
        if any(a <= cue.start() < b for a, b in pseudo):
            continue
        rest = norm[cue.end():]
        stop = SENTENCE_END.search(rest)
        scope, end = [], cue.end()
        for word in WORD.finditer(rest[: stop.start() if stop else len(rest)]):
            if word.group(0) in SCOPE_TERMINATORS or len(scope) >= 5:
                break
            scope.append(word.group(0))
            end = cue.end() + word.end()
        spans.append((cue.start(), cue.end(), {_stem(w) for w in scope if _content(w)}, cue.end(), end))
    for cue in NEGATION_BACKWARD.finditer(norm):
        if any(a <= cue.start() < b for a, b in pseudo):
            continue
        before = norm[:cue.start()]
        stop = max(before.rfind(c) for c in ".;:!?\n")
        words = list(WORD.finditer(before[stop + 1:]))
        scope = []
        for word in reversed(words):
            if word.group(0) in SCOPE_TERMINATORS or len(scope) >= 5:
                break
            scope.append(word.group(0))
        spans.append((cue.start(), cue.end(), {_stem(w) for w in scope if _content(w)},
                      stop + 1 + (words[-len(scope)].start() if scope else 0), cue.start()))
    return spans


def _content(word: str) -> bool:
    return len(word) >= 4 and word not in STOPWORDS and word.replace("'", "") not in STOPWORDS


def _head_word(word: str) -> bool:
    """A word that may head a negated phrase: a content word, or a three-letter
    word that is not one of scikit-learn's English stop words ("gas", "leg")."""
    if len(word) == 3:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return word not in ENGLISH_STOP_WORDS and word not in STOPWORDS
    return _content(word)


def _implicit_roots(norm: str) -> set[str]:
    """Stems of the roots implicit negations negate ("nonspecific" -> "speci")."""
    return {_stem(_IMPLICIT_PARTS.sub("", m.group(0))) for m in IMPLICIT_NEGATION.finditer(norm)}


#: A double negative: a negative subject ("none of", "nobody", "nothing",
#: "neither") and a negated verb in the same clause ("None of the studies
#: did not address it"), which reads as the opposite ("all of them did").
#: The clause ends at a punctuation mark or a clause word
#: (:data:`CLAUSE_WORDS`: "none dropped out because it was not ..." is not one).
DOUBLE_NEGATIVE = re.compile(
    r"\b(?:none|nobody|no\s+one|nothing|neither)\b"
    r"(?:(?!\b(?:" + "|".join(sorted(CLAUSE_WORDS)) + r")\b)[^.;:!?,\n])*?"
    r"\b(?:(?:do|does|did|is|are|was|were|has|have|had|can|could|will|would|should|may|might|must)"
    r"(?:\s+not\b|n't\b)|cannot\b|never\b)")


def negation_flags(source_norm: str, output: str, output_norm: str) -> list[FaithfulnessFlag]:
    """``negation`` flags of ``output`` against the input, both folded by
    :func:`clinical.quality.textnorm.normalize` (``source_norm``,
    ``output_norm``): negated in the output and affirmed in the input,
    affirmed in the output and negated in the input, and a double negative
    the input does not have (rules in the module docstring)."""
    in_neg = _negated_spans(source_norm)
    out_neg = _negated_spans(output_norm)
    in_negated = set().union(*(s for _, _, s, _, _ in in_neg)) if in_neg else set()
    in_all = {_stem(w.group(0)) for w in WORD.finditer(source_norm) if _content(w.group(0))}
    flags = []
    # (1) the output negates what the input states plainly: only when the input has no explicit negation.
    # With no negation at all, any negated content word counts; with only implicit ones ("nonspecific"),
    # which negate their own root, the negated head word counts, if it is not such a root.
    raw_input_cue = NEGATION_FORWARD.search(source_norm) or NEGATION_BACKWARD.search(source_norm)
    if not raw_input_cue:
        implicit = bool(IMPLICIT_NEGATION.search(source_norm))
        if implicit:
            roots = _implicit_roots(source_norm)
            in_heads = {_stem(w.group(0)) for w in WORD.finditer(source_norm) if _head_word(w.group(0))} - roots
        for cue_start, cue_end, stems, _, scope_end in out_neg:
            if not STRONG_CUE.fullmatch(output_norm[cue_start:cue_end]):
                continue
            if implicit:
                words = [w.group(0) for w in WORD.finditer(output_norm[cue_end:scope_end])]
                head = next((w for w in words if _head_word(w)), None)
                if any(_stem(w) in roots for w in (words[:words.index(head) + 1] if head else words)):
                    continue  # the input's own implicit negation in words: "not clear" for "unclear"
                hit = {_stem(head)} & in_heads if head else set()
            else:
                hit = stems & in_all
            if hit:
                start, end = min(cue_start, scope_end), max(cue_end, scope_end)
                flags.append(FaithfulnessFlag("negation", output[start:end], start, end,
                                              "negated in output, affirmed in input"))
    # (2) the output affirms what the input negates: a negated input word in an output sentence with no negation
    if in_neg:
        for sentence in re.finditer(r"[^.;:!?\n]+", output_norm):
            text = sentence.group(0)
            if NEGATION_FORWARD.search(text) or NEGATION_BACKWARD.search(text) or IMPLICIT_NEGATION.search(text):
                continue
            for word in WORD.finditer(text):
                stem = _stem(word.group(0))
                if _content(word.group(0)) and stem in in_negated and stem not in _affirmed_stems(source_norm, in_neg):
                    start, end = sentence.start() + word.start(), sentence.start() + word.end()
                    flags.append(FaithfulnessFlag("negation", output[start:end], start, end,
                                                  "affirmed in output, negated in input"))
                    break
    # (3) a double negative the input does not have: it turns "none did" into "all did"
    if not DOUBLE_NEGATIVE.search(source_norm):
        for match in DOUBLE_NEGATIVE.finditer(output_norm):
            flags.append(FaithfulnessFlag("negation", output[match.start():match.end()], match.start(),
                                          match.end(), "double negative, not in input"))
    return flags


def _affirmed_stems(norm: str, spans) -> set[str]:
    """Stems of words outside every negation scope and cue."""
    covered = [(min(a, c), max(b, d)) for a, b, _, c, d in spans]
    return {_stem(w.group(0)) for w in WORD.finditer(norm)
            if _content(w.group(0)) and not any(a <= w.start() < b for a, b in covered)}
