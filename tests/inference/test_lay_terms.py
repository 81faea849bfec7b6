"""The vocabulary's plain words for a sentence's medical terms (HPO
layperson synonyms), as the prompt lists them after the sentence."""

import re

from inference.lay_terms import (
    HPO,
    HPO_LAYPERSON,
    SPANISH_LABELS_FILE,
    find_terms,
    hpo_obo_path,
    lay_hints,
    spanish_hints,
    spanish_labels,
    spanish_terms,
)


def test_terms_with_a_layperson_synonym_get_plain_words_in_text_order():
    assert lay_hints("Hematuria and acute cholecystitis.") == [
        ("Hematuria", "blood in urine"), ("cholecystitis", "gallbladder inflammation")]


def test_the_longest_term_wins_over_the_terms_inside_it():
    assert lay_hints("Cervical lymphadenopathy was noted.") == [
        ("Cervical lymphadenopathy", "swollen lymph nodes in the neck")]


def test_a_term_without_a_layperson_synonym_or_made_of_easy_words_gets_none():
    sources = {surface.lower(): source for _, surface, (_, _, source) in find_terms("Nausea and paratonia.")}
    assert sources.get("nausea") == HPO  # its layperson synonym is the term itself
    assert lay_hints("Nausea.") == []
    assert lay_hints("She has pain and a fever.") == []  # easy words: nothing to explain
    assert lay_hints("") == []


def test_a_term_written_twice_is_listed_once():
    assert lay_hints("Hypertension. Hypertension again.") == [("Hypertension", "high blood pressure")]


def test_the_glossary_reads_the_same_vocabulary():
    from clinical.quality.glossary import glossary_terms

    by_term = {t.term: t for t in glossary_terms("Hematuria.")}
    assert by_term["Hematuria"].source == HPO_LAYPERSON and by_term["Hematuria"].definition == "Blood in urine."


def test_spanish_terms_are_hpos_official_spanish_labels_in_text_order():
    assert spanish_terms("Constipation and moderate aortic stenosis, no pleural effusions; constipation.") == [
        ("Constipation", "Estreñimiento"),
        ("aortic stenosis", "Estenosis de la válvula aórtica"),
        ("pleural effusions", "Derrame pleural"),
    ]
    assert spanish_terms("She walks daily.") == []


def test_the_spanish_labels_file_names_terms_of_the_installed_ontology():
    obo = hpo_obo_path().read_text(encoding="utf-8")
    names = dict(re.findall(r"^\[Term\]\nid: (HP:\d+)\nname: (.+)$", obo, re.MULTILINE))
    rows = [line.split("\t") for line in SPANISH_LABELS_FILE.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(rows) > 10_000
    assert all(names.get(hpo_id) == name for hpo_id, name, _ in rows)  # the same term, by id and English name
    assert spanish_labels() == {name: label for _, name, label in rows}
    assert all(label.strip() == label and label for label in spanish_labels().values())


def test_the_prompt_lists_only_labels_that_differ_from_the_term():
    assert spanish_hints("Edema and ataxia; constipation.") == [("constipation", "Estreñimiento")]
    assert [t for t, _ in spanish_terms("Edema and ataxia; constipation.")] == ["Edema", "ataxia", "constipation"]
