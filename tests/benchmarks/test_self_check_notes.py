"""bench/self_check_notes.py: notes built from consecutive rows and the
whole-note check counted against the sentence checks (no model)."""

from __future__ import annotations

from bench.self_check_notes import notes_build, notes_summary


def test_notes_are_consecutive_rows_by_id_in_threes_then_sixes():
    rows = [{"id": str(i)} for i in (10, 2, 1, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14)]
    notes = notes_build(rows, rows_3=6, rows_6=8)
    assert [[r["id"] for r in note] for note in notes] == [["1", "2", "3"], ["4", "5", "6"],
                                                           ["7", "8", "9", "10", "11", "12"]]  # 13, 14: too short


def test_a_wrong_sentence_is_caught_by_its_own_check_where_the_whole_note_passes():
    measured = [
        {"verdicts": ["correct", "wrong", None], "p_note": 0.8, "p_sentences": [0.9, 0.3, 0.7],
         "ms_note": 900, "ms_sentences": 2100},
        {"verdicts": ["correct", "lossy", "correct"], "p_note": 0.4, "p_sentences": [0.9, 0.8, 0.7],
         "ms_note": 1100, "ms_sentences": 2300},
    ]
    s = notes_summary(measured, 0.6)["3"]
    assert (s["with_wrong"], s["wrong_doubted_whole"], s["wrong_doubted_by_sentence"]) == (1, 0, 1)
    assert (s["clean_doubted_whole"], s["clean_doubted_by_sentence"]) == (1, 0)
    assert (s["sentences_rerun_whole"], s["sentences_rerun_by_sentence"], s["sentences"]) == (3, 1, 6)
    assert (s["wrong_sentences"], s["wrong_sentences_doubted_by_sentence"]) == (1, 1)
    assert (s["ms_note_p50"], s["ms_sentences_p50"]) == (1000, 2200)
