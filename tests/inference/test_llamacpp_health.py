"""The llama.cpp engine's health, on the real SmolLM2 GGUF.

llama.cpp runs inside the server process, so what kills vLLM's separate
engine core (a SIGKILL) would kill the whole replica here, and its
supervisor restarts it. What the engine can survive and must report is a
failure inside the library: a ``llama_decode`` error return (provoked for
real below with a token id outside the vocabulary: llama.cpp answers -1
and leaves its context's KV cache in an unknown state) or a worker thread
that takes no more work. Either makes it ``dead``; the supervisor builds a
fresh engine that serves."""

from __future__ import annotations

import asyncio

import pytest

from inference.base import EngineDead, GenerationParams, generate_text
from inference.llamacpp_engine import LlamaCppEngine
from inference.prompts import build_messages
from inference.supervisor import EngineSupervisor
from inference.weights import smollm2_gguf_path

pytestmark = pytest.mark.slow  # loads SmolLM2

MESSAGES = build_messages("No acute distress.")


def small_engine() -> LlamaCppEngine:
    return LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=1024, n_threads=1, precision="q4_1", max_batch=1)


async def test_a_failed_llama_decode_marks_the_engine_dead_and_refuses_later_requests():
    engine = small_engine()
    try:
        text, _ = await generate_text(engine, "before", MESSAGES, GenerationParams(max_tokens=4))
        assert text and engine.health().state == "ready"

        invalid_token = 10 ** 7  # SmolLM2 has 49,152
        with pytest.raises(EngineDead, match="RuntimeError inside llama.cpp decode"):
            await asyncio.get_running_loop().run_in_executor(
                engine._executor, engine._eval, engine._llm, [invalid_token])
        health = engine.health()
        assert (health.state, health.reason) == ("dead", "RuntimeError inside llama.cpp decode")
        with pytest.raises(EngineDead):
            await generate_text(engine, "after", MESSAGES, GenerationParams(max_tokens=4))
    finally:
        await engine.shutdown()


def stop_worker_thread(engine) -> None:
    engine._executor.shutdown(wait=True)  # the serial engine's worker takes no more work


def stop_batch_thread(engine) -> None:
    engine._batcher.close()  # the batched engine's step thread ends


@pytest.mark.parametrize(("max_batch", "stop", "reason"), [
    (1, stop_worker_thread, "llama.cpp worker thread stopped"),
    (2, stop_batch_thread, "llama.cpp batch thread stopped"),
])
async def test_a_dead_llamacpp_engine_is_rebuilt_by_the_supervisor_and_serves(max_batch, stop, reason):
    supervisor = EngineSupervisor(
        lambda: LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=1024, n_threads=1, precision="q4_1",
                               max_batch=max_batch),
        backoff_s=0.1)
    try:
        first = await supervisor.get()
        stop(first)
        assert first.health().reason == reason
        with pytest.raises(EngineDead):
            await generate_text(first, "dead", MESSAGES, GenerationParams(max_tokens=4))

        engine = await supervisor.get(wait=True)
        assert engine is not first and engine.health().alive
        text, logprobs = await generate_text(engine, "rebuilt", MESSAGES, GenerationParams(max_tokens=8))
        assert text and len(logprobs) >= 1
        assert (supervisor.deaths, supervisor.rebuilds) == (1, 1)
    finally:
        await supervisor.shutdown()


async def test_a_failed_batched_decode_marks_the_engine_dead_and_ends_every_request():
    """The batched engine (``max_batch`` > 1): a ``llama_decode`` error in a
    step (a prompt with a token id outside the vocabulary, so llama.cpp
    answers -1) ends the running request and a waiting one with
    ``EngineDead``, and the engine refuses later requests."""
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=1024, n_threads=1, precision="q4_1", max_batch=2)
    try:
        text, _ = await generate_text(engine, "before", MESSAGES, GenerationParams(max_tokens=4))
        assert text and engine.health().state == "ready"

        real_prompt_tokens = engine._prompt_tokens

        def poisoned(job):
            tokens, instructions = real_prompt_tokens(job)
            if job.request_id == "poisoned":
                tokens = tokens[:-1] + [10 ** 7]  # SmolLM2 has 49,152
            return tokens, instructions

        engine._prompt_tokens = poisoned
        results = await asyncio.gather(
            generate_text(engine, "poisoned", MESSAGES, GenerationParams(max_tokens=4)),
            generate_text(engine, "beside", build_messages("Mild edema."), GenerationParams(max_tokens=64)),
            return_exceptions=True,
        )
        assert isinstance(results[0], EngineDead), results
        assert isinstance(results[1], EngineDead), results
        health = engine.health()
        assert (health.state, health.reason) == ("dead", "llama_decode returned -1")
        with pytest.raises(EngineDead):
            await generate_text(engine, "after", MESSAGES, GenerationParams(max_tokens=4))
    finally:
        await engine.shutdown()
