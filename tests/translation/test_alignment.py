"""A translation side by side, sentence by sentence
(clinical/translation/alignment.py): each source sentence beside its
plain sentence, its status, and each check's finding where it stands."""

from __future__ import annotations

import pytest

from clinical.models import RERUN_AS_WRITTEN, Rerun, Translation
from clinical.rerun import execute
from clinical.translation import admission, finish
from clinical.translation.alignment import AS_WRITTEN, DOUBTED, RERUN, REWRITTEN, translation_sentences
from inference.fake_engine import FakeEngine
from inference.parts import translation_parts_join, translation_parts_spans, translation_units
from inference.prompts import ClusterPrompt

pytestmark = pytest.mark.django_db

NOTE = "Mild left knee effusion. No fracture is seen. She is well."
SENTENCES = ["Mild left knee effusion.", "No fracture is seen.", "She is well."]
FAST = ["There is a little extra fluid in your left knee.", "The bone is broken.", "She is doing well."]
BETTER = "No broken bone was seen."


def finished(user, *, text=NOTE, answers=FAST, p_yes=(0.9, 0.3, 0.8), output=None, cuts=None, **fields):
    row = admission.translation_create(user=user, text=text)
    Translation.objects.filter(pk=row.pk).update(**fields)
    row.refresh_from_db()
    units = translation_units(row)
    checks = None
    if len(units) > 1:
        checks = [{"input": u.source, "answer": a, "cut": bool(cuts and cuts[i]), "p_yes": p}
                  for i, (u, a, p) in enumerate(zip(units, answers, p_yes))]
    if output is None:
        output = translation_parts_join(units, list(answers), cut=cuts or ()) if checks else answers[0]
    return finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=output,
        figures=finish.TranslationFigures(tokens_out=30, confidence=0.97, self_check=min(p_yes),
                                          sentence_checks=checks))


def spans_point_at_their_text(row, sentences):
    delivered = row.verified_rerun.output_text if row.verified_rerun else row.output_text
    for sentence in sentences:
        source = sentence["source"]
        assert row.input_text[source["start"]:source["end"]] == source["text"]
        if sentence["plain"]:
            plain = sentence["plain"]
            assert delivered[plain["start"]:plain["end"]] == plain["text"]
        for flag in sentence["flags"]:
            assert delivered[flag["start"]:flag["end"]] == flag["text"]
            assert sentence["plain"]["start"] <= flag["start"] < sentence["plain"]["end"]
        for item in sentence["missing"]:
            assert row.input_text[item["start"]:item["end"]].lower() == item["text"].lower()
            assert source["start"] <= item["start"] < source["end"]


def test_a_doubted_note_pairs_each_sentence_and_marks_the_doubted_one_with_what_it_lost(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    row = finished(clinician)
    sentences = translation_sentences(row)
    assert [s["source"]["text"] for s in sentences] == SENTENCES
    assert [s["plain"]["text"] for s in sentences] == FAST
    assert [s["status"] for s in sentences] == [REWRITTEN, DOUBTED, REWRITTEN]
    assert sentences[1]["p_yes"] == 0.3 and sentences[1]["reasons"] == ["low_self_check"]
    assert "doubt" in sentences[1]["why"]
    lost = {item["text"].lower() for item in sentences[1]["missing"]}
    assert lost and all(word in NOTE.split(".")[1].lower() for word in lost)  # "no" / "fracture", sentence 2
    assert not sentences[0]["missing"] and not sentences[2]["missing"]
    spans_point_at_their_text(row, sentences)


def test_a_sentence_the_rerun_replaced_is_marked_rerun_with_its_reason_and_its_new_place(clinician, settings,
                                                                                      monkeypatch):
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    monkeypatch.setattr(execute, "rerun_engine_get",
                        lambda: FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.85}))
    row = finished(clinician)
    rerun = execute.rerun_execute(translation_id=row.pk)
    assert rerun.output_text == f"{FAST[0]} {BETTER} {FAST[2]}"
    row = Translation.objects.prefetch_related("reruns").get(pk=row.pk)
    sentences = translation_sentences(row)
    assert [s["plain"]["text"] for s in sentences] == [FAST[0], BETTER, FAST[2]]
    assert [s["status"] for s in sentences] == [REWRITTEN, RERUN, REWRITTEN]
    assert sentences[1]["reasons"] == ["low_self_check", "safety_failed"]
    assert sentences[1]["p_yes"] == 0.85 and sentences[1]["why"].startswith("Re-run in full precision because")
    assert not any(s["missing"] for s in sentences)  # the verified text's check: nothing lost
    spans_point_at_their_text(row, sentences)


def test_a_sentence_the_rerun_gave_as_written_says_so_and_asks_the_clinician_to_explain_it(clinician, settings,
                                                                                        monkeypatch):
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    settings.SELF_CHECK_COPY = "always"
    monkeypatch.setattr(execute, "rerun_engine_get",
                        lambda: FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.2}))
    row = finished(clinician)
    rerun = execute.rerun_execute(translation_id=row.pk)
    assert any(r.get("kept") == RERUN_AS_WRITTEN for r in rerun.candidates)
    row = Translation.objects.prefetch_related("reruns").get(pk=row.pk)
    sentences = translation_sentences(row)
    assert sentences[1]["status"] == AS_WRITTEN and sentences[1]["plain"]["text"] == SENTENCES[1]
    assert "explain it to the patient yourself" in sentences[1]["why"]
    spans_point_at_their_text(row, sentences)


def test_a_flagged_word_of_one_sentence_is_located_in_the_delivered_text(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    answers = ["There is a little extra fluid in your right knee.", FAST[1], FAST[2]]
    row = finished(clinician, answers=answers, p_yes=(0.9, 0.9, 0.9))
    sentences = translation_sentences(row)
    flags = sentences[0]["flags"]
    assert [(f["kind"], f["text"]) for f in flags] == [("laterality", "right")]
    assert row.output_text[flags[0]["start"]:flags[0]["end"]] == "right"
    assert {item["text"].lower() for item in sentences[0]["missing"]} >= {"left"}
    assert sentences[0]["status"] == REWRITTEN and sentences[0]["why"].startswith("The checks found 1 lost and 1 flagged")
    spans_point_at_their_text(row, sentences)


def test_one_sentence_stands_beside_the_whole_text(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    row = finished(clinician, text="Mild left knee effusion.", answers=["Some fluid in your right knee."],
                   p_yes=(0.95,))
    [sentence] = translation_sentences(row)
    assert sentence["source"] == {"text": "Mild left knee effusion.", "start": 0, "end": 24}
    assert sentence["plain"]["text"] == "Some fluid in your right knee." and sentence["status"] == REWRITTEN
    assert [f["text"] for f in sentence["flags"]] == ["right"]
    spans_point_at_their_text(row, [sentence])


def test_a_copied_heading_and_a_cut_answer_keep_their_places(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    text = "HEENT : Pupils equal.\nNECK : Supple. No lymphadenopathy."
    version = ClusterPrompt(24, 8, 0, hints=False, headings=True).version
    row = finished(clinician, text=text, answers=["Your eyes look the same", "It moves freely.", "No swollen glands."],
                   p_yes=(0.9, 0.9, 0.9), cuts=[True, False, False], prompt_version=version)
    sentences = translation_sentences(row)
    assert [s["source"]["text"] for s in sentences] == ["HEENT : Pupils equal.", "NECK : Supple.",
                                                        "No lymphadenopathy."]
    assert [s["plain"]["text"] for s in sentences] == ["HEENT : Your eyes look the same", "NECK : It moves freely.",
                                                       "No swollen glands."]
    spans_point_at_their_text(row, sentences)


def test_a_note_rerun_whole_stands_as_one_pair(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    row = finished(clinician)
    Rerun.objects.update_or_create(translation=row, defaults={
        "status": Rerun.Status.COMPLETED, "candidate": "full_precision", "self_check": 0.9,
        "output_text": "A knee with fluid. Nothing broken. She is fine."})
    row = Translation.objects.prefetch_related("reruns").get(pk=row.pk)
    [sentence] = translation_sentences(row)
    assert sentence["source"]["text"] == NOTE and sentence["status"] == RERUN
    assert sentence["plain"]["text"] == "A knee with fluid. Nothing broken. She is fine."


def test_a_translation_that_did_not_complete_has_no_sentences(clinician):
    row = admission.translation_create(user=clinician, text=NOTE)
    assert translation_sentences(row) == []


def test_spans_of_joined_parts_exclude_the_period_the_joiner_added():
    units = translation_units(Translation(input_text=NOTE, prompt_version="2026-11-25.2+c24x8k0",
                                          language="en", reading_level=6))
    text, spans = translation_parts_spans(units, ["Some fluid in the knee", "", "she is well"])
    assert text == "Some fluid in the knee. She is well"
    assert spans == [(0, 22), None, (24, 35)]


def test_a_kept_term_is_explained_where_it_stands_from_the_vetted_vocabulary(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    text = "Mild cardiomegaly. Aspirin daily."
    row = finished(clinician, text=text, answers=["Your heart is a bit big (cardiomegaly).", "Take aspirin every day."],
                   p_yes=(0.9, 0.9))
    assert {entry["term"].lower() for entry in row.glossary} >= {"cardiomegaly", "aspirin"}
    first, second = translation_sentences(row)
    [term] = first["terms"]
    assert row.output_text[term["start"]:term["end"]] == "cardiomegaly"
    assert term["definition"] == "Enlarged heart." and term["source_name"].startswith("Human Phenotype Ontology")
    [drug] = second["terms"]
    assert row.output_text[drug["start"]:drug["end"]] == "aspirin"
    assert drug["definition"] == "A medicine (no vetted plain definition)."  # said, not written by the model


def test_a_spanish_text_explains_a_term_where_it_names_it_by_hpos_spanish_label(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    text = "Small left pleural effusion."
    row = admission.translation_create(user=clinician, text=text, language="es")
    answer = "Tiene un pequeño derrame pleural en el lado izquierdo: líquido alrededor del pulmón."
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=answer,
                                    figures=finish.TranslationFigures(tokens_out=20, confidence=0.97, self_check=0.9))
    [sentence] = translation_sentences(row)
    [term] = sentence["terms"]
    assert term["term"] == "pleural effusion" and answer[term["start"]:term["end"]] == "derrame pleural"
    assert term["definition"] == "Fluid around lungs."
