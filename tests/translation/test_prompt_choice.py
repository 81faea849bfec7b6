"""Which prompt a translation gets: retrieved worked examples for one
English sentence (what was measured), today's instructions otherwise; the
fast run and the re-run build the same messages from the stored version."""

from __future__ import annotations

import pytest

from clinical.models import translation_messages, translation_prompt_version
from clinical.translation import services
from inference.examples import default_pool, normalise
from inference.prompts import EXAMPLES_PROMPT_VERSION, PROMPT_VERSION

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("text, language, version", [
    ("There is 1+ pretibial edema.", "en", EXAMPLES_PROMPT_VERSION),
    ("There is 1+ pretibial edema.", "es", PROMPT_VERSION),
    ("There is 1+ pretibial edema. No calf tenderness.", "en", PROMPT_VERSION),
])
def test_the_prompt_version_follows_the_input(text, language, version):
    assert translation_prompt_version(text=text, language=language) == version


def test_a_site_can_turn_the_examples_off(settings):
    settings.PROMPT_EXAMPLES = False
    assert translation_prompt_version(text="There is 1+ pretibial edema.", language="en") == PROMPT_VERSION


def test_a_sentence_gets_pool_examples_never_itself_and_the_rerun_builds_the_same(clinician):
    pool_sentence = default_pool().examples[0].original
    row = services.translation_create(user=clinician, text=pool_sentence)
    assert row.prompt_version == EXAMPLES_PROMPT_VERSION
    messages = translation_messages(row)
    assert messages[0]["role"] == "system" and messages[-1]["content"] == pool_sentence.strip()
    shown = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
    assert len(shown) == 6 and normalise(pool_sentence) not in {normalise(s) for s in shown}
    assert translation_messages(row) == messages  # the re-run's messages
