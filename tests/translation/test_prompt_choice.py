"""Which prompt a translation gets, and that the stored row renders the
same requests again (the fast run and the re-run): worked examples by
cluster (the default) or retrieved per sentence, sentence by sentence,
for English input; today's instructions in one request otherwise."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from clinical.translation import admission
from clinical.translation.prompting import translation_prompt_version
from inference.examples import default_pool, default_router, normalise
from inference.parts import translation_message_parts, translation_messages, translation_parts
from inference.prompts import (
    EXAMPLES_PROMPT_VERSION,
    PROMPT_VERSION,
    SPANISH_TERMS_PROMPT_VERSION,
    ClusterPrompt,
    build_messages,
    hints_strip,
)

pytestmark = pytest.mark.django_db

CLUSTERED = ClusterPrompt(24, 8, 0, hints=django_settings.PROMPT_HINTS,
                          headings=django_settings.PROMPT_HEADINGS).version
NOTE = "There is 1+ pretibial edema.\nABDOMEN : Soft, nontender. No calf tenderness."


@pytest.mark.parametrize("text, language, version", [
    ("There is 1+ pretibial edema.", "en", CLUSTERED),
    ("There is 1+ pretibial edema.", "es", PROMPT_VERSION),  # "Edema" = "edema": nothing to list
    ("Acute cholecystitis.", "es", SPANISH_TERMS_PROMPT_VERSION),
    ("She feels well and walks daily.", "es", PROMPT_VERSION),  # no term with a Spanish label
    ("There is 1+ pretibial edema. No calf tenderness.", "en", CLUSTERED),
    (" ".join(["No edema."] * 41), "en", PROMPT_VERSION),  # over PROMPT_MAX_SENTENCES
])
def test_the_prompt_version_follows_the_input(text, language, version):
    assert translation_prompt_version(text=text, language=language) == version


def test_the_version_carries_the_cluster_settings_and_zero_clusters_retrieve_per_sentence(settings):
    settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES, settings.PROMPT_RETRIEVED_K = 12, 4, 2
    settings.PROMPT_HINTS = settings.PROMPT_HEADINGS = False
    assert translation_prompt_version(text=NOTE, language="en") == "2026-11-25.2+c12x4k2"
    settings.PROMPT_HINTS = True
    assert translation_prompt_version(text=NOTE, language="en") == "2026-11-25.3+c12x4k2"
    settings.PROMPT_HEADINGS = True
    assert translation_prompt_version(text=NOTE, language="en") == "2026-11-25.3+c12x4k2h"
    settings.PROMPT_CLUSTERS = 0
    assert translation_prompt_version(text=NOTE, language="en") == EXAMPLES_PROMPT_VERSION


def test_a_site_can_turn_the_examples_off(settings):
    settings.PROMPT_EXAMPLES = False
    assert translation_prompt_version(text="There is 1+ pretibial edema.", language="en") == PROMPT_VERSION


def test_a_note_is_one_request_per_sentence_each_with_its_cluster_prefix(clinician, settings):
    settings.PROMPT_HEADINGS = False
    row = admission.translation_create(user=clinician, text=NOTE)
    parts = translation_parts(row)
    assert [p.separator for p in parts] == ["", "\n", " "]
    assert [hints_strip(p.messages[-1]["content"]) for p in parts] == [
        "There is 1+ pretibial edema.", "ABDOMEN : Soft, nontender.", "No calf tenderness."]
    router = default_router(24, 8)
    for part in parts:
        _, fixed = router.route(hints_strip(part.messages[-1]["content"]))
        assert [m["content"] for m in part.messages[1:-1:2]] == [e.original.strip() for e in fixed]
    assert translation_message_parts(row) == [p.messages for p in parts]
    with pytest.raises(ValueError, match="translation_message_parts"):
        translation_messages(row)


def test_a_heading_is_copied_and_the_model_gets_only_its_findings(clinician, settings):
    settings.PROMPT_HEADINGS, settings.PROMPT_HINTS = True, False
    row = admission.translation_create(user=clinician, text=NOTE)
    parts = translation_parts(row)
    assert [(p.separator, p.prefix) for p in parts] == [("", ""), ("\n", "ABDOMEN : "), (" ", "")]
    assert [p.messages[-1]["content"] for p in parts] == [
        "There is 1+ pretibial edema.", "Soft, nontender.", "No calf tenderness."]
    _, fixed = default_router(24, 8).route("Soft, nontender.")  # routed by its findings, not the heading
    assert [m["content"] for m in parts[1].messages[1:-1:2]] == [e.original.strip() for e in fixed]
    one = admission.translation_create(user=clinician, text="NEUROLOGIC : I can not assess at this time.")
    (part,) = translation_parts(one)
    assert part.prefix == "NEUROLOGIC : " and part.messages[-1]["content"] == "I can not assess at this time."
    with pytest.raises(ValueError, match="verbatim heading"):  # one request, but not the whole text
        translation_messages(one)
    settings.PROMPT_HEADINGS = False  # a stored row renders as it was made
    assert translation_parts(one) == [part]


def test_a_stored_row_renders_the_same_requests_after_the_settings_change(clinician, settings):
    row = admission.translation_create(user=clinician, text=NOTE)
    before = translation_message_parts(row)
    settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES, settings.PROMPT_RETRIEVED_K = 6, 2, 3
    assert translation_message_parts(row) == before
    settings.PROMPT_EXAMPLES = False
    assert translation_message_parts(row) == before


def test_one_sentence_is_one_request_from_the_text_itself(clinician):
    row = admission.translation_create(user=clinician, text="There is 1+ pretibial edema.")
    assert len(translation_message_parts(row)) == 1
    assert translation_messages(row) == translation_message_parts(row)[0]
    assert hints_strip(translation_messages(row)[-1]["content"]) == "There is 1+ pretibial edema."


def test_a_pool_sentence_gets_pool_examples_never_itself_and_the_rerun_builds_the_same(clinician, settings):
    pool_sentence = default_pool().examples[0].original
    for clusters, version in ((24, CLUSTERED), (0, EXAMPLES_PROMPT_VERSION)):
        settings.PROMPT_CLUSTERS = clusters
        row = admission.translation_create(user=clinician, text=pool_sentence)
        assert row.prompt_version == version
        messages = translation_messages(row)
        assert messages[0]["role"] == "system" and messages[-1]["content"] == pool_sentence.strip()
        shown = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
        assert shown and normalise(pool_sentence) not in {normalise(s) for s in shown}
        assert translation_messages(row) == messages  # the re-run's messages


def test_rows_of_the_earlier_prompts_render_as_they_did(clinician, settings):
    settings.PROMPT_CLUSTERS = 0
    sentence = "There is 1+ pretibial edema ."
    row = admission.translation_create(user=clinician, text=sentence)
    assert translation_messages(row) == build_messages(sentence, examples=default_pool().retrieve(sentence, 6))
    settings.PROMPT_EXAMPLES = False
    row = admission.translation_create(user=clinician, text=NOTE)
    assert translation_message_parts(row) == [build_messages(NOTE)]


def test_hpo_plain_words_follow_a_sentence_and_a_stored_row_keeps_them(clinician, settings):
    settings.PROMPT_HINTS, settings.PROMPT_HEADINGS = True, False
    row = admission.translation_create(user=clinician, text="Acute cholecystitis.\nNo acute distress.")
    assert row.prompt_version == ClusterPrompt(24, 8, 0, hints=True).version
    first, second = translation_message_parts(row)
    assert first[-1]["content"].startswith("Acute cholecystitis.\n\n(Plain words")
    assert "cholecystitis = gallbladder inflammation" in first[-1]["content"]
    assert second[-1]["content"] == "No acute distress."  # no HPO term: the .2 messages exactly
    settings.PROMPT_HINTS = False
    assert translation_message_parts(row) == [first, second]
    older = admission.translation_create(user=clinician, text="Acute cholecystitis.")
    assert older.prompt_version == ClusterPrompt(24, 8, 0).version
    assert translation_messages(older)[-1]["content"] == "Acute cholecystitis."


def test_a_spanish_translation_renders_its_terms_spanish_labels_after_the_diagnosis(clinician):
    translation = admission.translation_create(
        user=clinician, text="Moderate aortic stenosis. The patient reports constipation.",
        reading_level=6, language="es")
    assert translation.prompt_version == SPANISH_TERMS_PROMPT_VERSION
    (part,) = translation_parts(translation)
    last = part.messages[-1]["content"]
    assert last.startswith("Moderate aortic stenosis. The patient reports constipation.\n\n(The Spanish medical terms")
    assert "aortic stenosis = estenosis de la válvula aórtica; constipation = estreñimiento)" in last
    assert "Write your answer in Spanish." in part.messages[0]["content"]
    assert hints_strip(last) == "Moderate aortic stenosis. The patient reports constipation."
