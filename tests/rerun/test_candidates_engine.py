"""The re-run's candidates on a real engine: SmolLM2-135M through llama.cpp
(the small model the suite uses) as the worker's engine. Its greedy
rewrite of a note with a dose loses facts, so the re-run must keep the
candidate that passes both checks instead."""

from __future__ import annotations

import pytest

from clinical.models import Translation
from clinical.rerun import execute
from clinical.rerun.worker_engine import run_in_engine_loop
from clinical.translation import admission, finish
from inference.llamacpp_engine import LlamaCppEngine
from inference.weights import smollm2_gguf_path

NOTE = "No pericardial effusion. Metoprolol 25 mg daily."
FAST_TEXT = "There is no fluid around your heart. Take your heart medicine every day."  # lost the dose and drug


@pytest.fixture(scope="module")
def smollm2_engine():
    """SmolLM2 on the re-run lane's own event loop, as the worker runs it."""
    # One thread: the suite shares two cores; spinning threads of a busy machine cost 10x here.
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, n_threads=1, precision="q4_1", max_batch=1)
    run_in_engine_loop(engine.start())
    yield engine
    run_in_engine_loop(engine.shutdown())


@pytest.mark.django_db(transaction=True)
def test_the_rerun_keeps_a_candidate_that_passes_over_one_that_fails(clinician, settings, monkeypatch,
                                                                       smollm2_engine):
    settings.RERUN_CANDIDATES = ("full_precision", "span_replacement")
    settings.MAX_OUTPUT_TOKENS = 48
    # The one-example prompt (no retrieved examples): on it SmolLM2's greedy
    # rewrite of this note loses the dose, the failing candidate the test needs.
    settings.PROMPT_EXAMPLES = False
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: smollm2_engine)
    row = admission.translation_create(user=clinician, text=NOTE)
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                      output_text=FAST_TEXT, figures=finish.TranslationFigures(
                                          tokens_out=16, confidence=0.6))
    assert row.safety_passed is False and row.verification == Translation.Verification.PENDING

    done = execute.rerun_execute(translation_id=row.pk)

    tried = {record["name"]: record for record in done.candidates}
    failing = [r for r in tried.values() if not (r["safety_passed"] and r["faithfulness_passed"])]
    assert failing and all(r["tokens"] > 0 for r in failing), (
        f"the premise: SmolLM2's greedy rewrite of this note fails a check; it did not: {done.candidates}")
    assert tried[done.candidate]["safety_passed"] and tried[done.candidate]["faithfulness_passed"]
    assert done.safety_passed and done.faithfulness_passed  # the verified text is the passing candidate
    assert "25 mg" in done.output_text and "Metoprolol" in done.output_text
    assert done.engine == "llamacpp" and done.engine_precision == "q4_1" and done.precision == "fp32"
    row.refresh_from_db()
    assert row.verification == Translation.Verification.VERIFIED and row.verified_rerun == done
    assert row.output_text == FAST_TEXT  # the fast text is kept beside it


@pytest.mark.django_db(transaction=True)
def test_a_note_of_two_sentences_is_rerun_sentence_by_sentence(clinician, settings, smollm2_engine):
    from inference.base import GenerationParams, generate_text
    from inference.parts import translation_message_parts, translation_parts, translation_parts_join

    settings.RERUN_CANDIDATES = ("full_precision",)
    settings.MAX_OUTPUT_TOKENS = 24
    row = admission.translation_create(user=clinician, text=NOTE)
    parts = translation_message_parts(row)
    assert len(parts) == 2  # the fast run made two requests: so must the re-run

    chosen, records = execute.rerun_candidates_run(translation=row, engine=smollm2_engine, request_prefix="two")

    alone = [run_in_engine_loop(generate_text(smollm2_engine, f"alone-{i}", messages, GenerationParams(max_tokens=24)))[0]
             for i, messages in enumerate(parts)]
    assert chosen.name == "full_precision" and records[0]["name"] == "full_precision"
    assert chosen.text == translation_parts_join(translation_parts(row), alone).strip()
    assert chosen.text and records[0]["tokens"] > 0
