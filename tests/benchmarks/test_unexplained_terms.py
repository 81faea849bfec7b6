"""The unexplained-term detector of ``python -m bench unexplained_terms``
(:func:`bench.stored_texts.unexplained_terms`) on hand-written texts."""

from bench.stored_texts import unexplained_terms, wilson


def terms(text: str) -> list[str]:
    return [u.term for u in unexplained_terms(text)]


def test_unexplained_abbreviation_is_counted():
    found = unexplained_terms("The ECG showed a STEMI.")
    assert [(u.term, u.kind) for u in found] == [("ECG", "abbreviation"), ("STEMI", "abbreviation")]


def test_abbreviation_after_its_plain_words_in_parentheses_is_explained():
    assert terms("You had a type of heart attack (STEMI).") == []


def test_statistics_in_parentheses_are_not_an_explanation():
    assert terms("Fewer problems with the new drug (RR 0.43, 95% CI 0.26 to 0.71).") == ["RR", "CI"]


def test_explained_term_is_not_counted():
    assert terms("There is a pleural effusion, which means fluid around the lungs.") == []
    assert terms("You have a condition called tachycardia.") == []
    assert terms("The scan showed tricuspid regurgitation (a leaky heart valve).") == []


def test_unexplained_term_is_counted():
    assert terms("The scan showed tricuspid regurgitation.") == ["tricuspid regurgitation"]
    assert terms("Hemostasis was assured.") == ["Hemostasis"]


def test_lay_words_and_known_abbreviations_are_not_counted():
    assert terms("She has a headache and feels sick to her stomach after the flu.") == []
    assert terms("The HIV test and the MRI were normal.") == []
    assert terms("CENTRAL NERVOUS SYSTEM : no problems found.") == []


def test_wilson_interval():
    low, high = wilson(31, 40)
    assert round(low, 3) == 0.625 and round(high, 3) == 0.877
    assert wilson(0, 0) == (0.0, 1.0)
