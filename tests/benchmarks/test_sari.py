"""SARI (bench.quality.corpus_sari) against the reference implementation on the
worked example of Xu et al. (2016)."""

from __future__ import annotations

import pytest

from bench.quality import corpus_sari, sentence_sari, tokenize

# The example of Xu et al. 2016 as used in the reference implementation
# (github.com/cocoxu/simplification SARI.py, main()): one source, three
# candidate outputs, three references. Expected values: the reference
# implementation's SARIsent and its per-operation averages for each
# candidate (keep F1, deletion precision, addition F1), computed by
# running its code.
SOURCE = "About 95 species are currently accepted ."
REFERENCES = ["About 95 species are currently known .", "About 95 species are now accepted .",
              "95 species are now accepted ."]
REFERENCE_VALUES = [
    ("About 95 you now get in .", 0.2682782411698074, 0.22150139017608894, 0.5, 0.08333333333333333),
    ("About 95 species are now agreed .", 0.5889995423074248, 0.709458944382592, 0.736111111111111,
     0.32142857142857145),
    ("About 95 species are currently agreed .", 0.5071608864657479, 0.7714826593972436, 0.75, 0.0),
]


@pytest.mark.parametrize("output,sari,keep,delete,add", REFERENCE_VALUES)
def test_matches_the_reference_implementation_on_the_papers_example(output, sari, keep, delete, add):
    score = sentence_sari(SOURCE, output, REFERENCES)
    assert score.sari == pytest.approx(sari, abs=1e-9)
    assert (score.keep, score.delete, score.add) == pytest.approx((keep, delete, add), abs=1e-9)


def test_an_output_equal_to_the_references_scores_one():
    reference = "the cat sat on the rug"
    score = sentence_sari("the cat sat on the mat today", reference, [reference, reference])
    assert score.sari == pytest.approx(1.0)


def test_copying_the_source_gets_no_deletion_or_addition_credit():
    score = sentence_sari(SOURCE, SOURCE, REFERENCES)
    assert score.delete == 0 and score.add == 0 and 0 < score.keep < 1


def test_corpus_score_is_the_mean_of_sentence_scores_after_tokenizing():
    outputs = [c for c, *_ in REFERENCE_VALUES]
    corpus = corpus_sari([SOURCE] * 3, outputs, [REFERENCES] * 3, tokenized=True)
    assert corpus.sari == pytest.approx(sum(v[1] for v in REFERENCE_VALUES) / 3, abs=1e-12)
    assert tokenize("There is 1+ pretibial edema.") == "there is 1 + pretibial edema ."
    untokenized = corpus_sari(["About 95 species are currently accepted."], ["About 95 species are now agreed."],
                              [[r.replace(" .", ".") for r in REFERENCES]])
    assert untokenized.sari == pytest.approx(REFERENCE_VALUES[1][1], abs=1e-12)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        sentence_sari(SOURCE, SOURCE, [])
    with pytest.raises(ValueError):
        corpus_sari([SOURCE], [], [REFERENCES])
