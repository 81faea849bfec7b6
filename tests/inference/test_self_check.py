"""The model's self-check of a rewrite (:mod:`inference.self_check`)."""

from __future__ import annotations

import math

import pytest
import pytest_asyncio

from inference.llamacpp_engine import LlamaCppEngine
from inference.self_check import SELF_CHECK_SYSTEM, self_check_messages, self_check_run, yes_probability
from inference.weights import default_gguf_path


def test_yes_gives_its_probability_and_no_the_rest():
    assert yes_probability("Yes", math.log(0.8)) == pytest.approx(0.8)
    assert yes_probability(" no.", math.log(0.9)) == pytest.approx(0.1)
    assert yes_probability("YES", 0.0) == 1.0


def test_a_token_that_is_no_answer_scores_one_half():
    assert yes_probability("The", math.log(0.99)) == 0.5
    assert yes_probability("", 0.0) == 0.5


def test_the_question_names_both_texts_after_a_shared_system_message():
    first = self_check_messages(" There was no hematoma . ", "There was no blood clot.")
    second = self_check_messages("No edema .", "No swelling.")

    assert first[0] == second[0] == {"role": "system", "content": SELF_CHECK_SYSTEM}
    assert first[1]["content"].endswith("Clinical sentence: There was no hematoma .\nRewrite: There was no blood clot.")
    assert "Answer Yes or No" in first[1]["content"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def default_engine():
    engine = LlamaCppEngine(str(default_gguf_path()), n_ctx=2048, precision="q4_k_m", max_batch=1)
    await engine.start()
    yield engine
    await engine.shutdown()


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_the_default_model_trusts_a_copy_and_doubts_a_contradiction(default_engine):
    source = "There was no hematoma ."

    copy = await self_check_run(default_engine, "copy", source, "There was no hematoma .")
    contradiction = await self_check_run(default_engine, "contradiction", source,
                                         "There was a large bruise on the leg.")
    other_organ = await self_check_run(default_engine, "organ", "The pancreas , spleen , and liver were unremarkable .",
                                       "The heart was enlarged.")

    assert copy > 0.9
    assert contradiction < 0.5 and other_organ < 0.5
