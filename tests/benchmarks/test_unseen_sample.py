"""``python -m bench unseen_sample``: the draw of unseen Cochrane sentences
is reproducible, a second sample shares no abstract with the first, and
the report counts the verdicts (the poster: tests/live/test_unseen_sample_post.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import unseen_sample
from bench.corpora import corpus_file
from bench.unseen_sample import rows_read, sentences_draw

FIRST_SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "quality" / "unseen-cochrane-sample.jsonl"


def abstracts() -> list[str]:
    return corpus_file("cochrane-val.source").read_text(encoding="utf-8").splitlines()


def test_draw_gives_the_committed_first_sample_row_for_row():
    committed = [{key: row[key] for key in ("n", "line", "input")} for row in rows_read(FIRST_SAMPLE)]
    assert sentences_draw(abstracts(), n=40, seed=2911) == committed


def test_second_sample_shares_no_abstract_with_the_first():
    source = abstracts()
    first = sentences_draw(source, n=40, seed=2911)
    second = sentences_draw(source, n=40, seed=2911, skip=40)
    assert [row["n"] for row in second] == list(range(40, 80))
    assert not {row["line"] for row in first} & {row["line"] for row in second}
    assert 0 not in {row["line"] for row in first + second}  # the abstract pasted on the page is left out
    for row in second:
        assert unseen_sample.MIN_WORDS <= len(row["input"].split()) <= unseen_sample.MAX_WORDS
        assert row["input"] in source[row["line"]]


def test_draw_refuses_more_sentences_than_the_abstracts_hold():
    short = ["the pasted one", "Too short.", "This abstract has exactly one sentence of more than eight words."]
    with pytest.raises(ValueError, match="only 1 abstracts"):
        sentences_draw(short, n=2, seed=1)


def test_report_counts_the_verdicts_a_reader_wrote():
    rows = [{"n": 0, "line": 3, "input": "a", "delivered": "b", "fast": "c", "verification": "verified",
             "rerun_reason": "low_self_check", "self_check": {"p_yes": 0.4321}, "verdict": "wrong",
             "reason": "flipped"},
            {"n": 1, "line": 4, "input": "d", "delivered": "d", "fast": "d", "verification": "not_needed",
             "verdict": "correct"},
            {"n": 2, "line": 5, "input": "e | f", "delivered": "e", "verification": "not_needed"}]
    text = unseen_sample.render(rows)
    assert text.startswith("**1 correct**, **0 lossy**, **1 wrong**, 1 not judged of 3; the gate re-ran 1.")
    assert "| 0 | 3 | a | b (fast: c) | re-run (low_self_check), P(yes) 0.43 | wrong | flipped |" in text
    assert "| 1 | 4 | d | d | passed | correct |  |" in text
    assert "e \\| f" in text  # a pipe in the sentence does not break the table
