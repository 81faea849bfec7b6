"""The llama.cpp engine on the real SmolLM2 model."""

from __future__ import annotations

import asyncio
import math

import pytest
import pytest_asyncio

from inference.base import GenerationParams
from inference.llamacpp_engine import LlamaCppEngine
from inference.models import smollm2_gguf_path
from inference.prompts import build_messages
from tests.data import laymaker_sentences


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine():
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1")
    await engine.start()
    yield engine
    await engine.shutdown()


async def collect(engine, request_id, text, **params):
    deltas = []
    async for delta in engine.generate(request_id, build_messages(text), GenerationParams(**params)):
        deltas.append(delta)
    return deltas


@pytest.mark.asyncio(loop_scope="module")
async def test_stream_has_one_logprob_per_token_and_a_finish_reason(engine):
    deltas = await collect(engine, "r1", laymaker_sentences()[0], max_tokens=24)
    assert len(deltas) >= 2
    assert deltas[0].prompt_tokens > 20 and deltas[0].admitted_ns is not None
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].finish_reason in ("stop", "length")
    logprobs = [lp for d in deltas for lp in d.token_logprobs]
    assert all(lp <= 0 and math.isfinite(lp) for lp in logprobs)
    assert "".join(d.text for d in deltas).strip()


@pytest.mark.asyncio(loop_scope="module")
async def test_logprobs_match_llama_cpp_own_logprobs(engine):
    """Our decode loop's logprobs equal the library's (logits_all=True) ones."""
    from llama_cpp import Llama

    text = laymaker_sentences()[3]
    deltas = await collect(engine, "r2", text, max_tokens=12, ignore_eos=True)
    ours = [lp for d in deltas for lp in d.token_logprobs]
    reference = Llama(model_path=str(smollm2_gguf_path()), n_ctx=2048, logits_all=True, verbose=False)
    prompt = engine._formatter(messages=build_messages(text)).prompt
    out = reference.create_completion(prompt, max_tokens=12, temperature=0.0, logprobs=1)
    theirs = out["choices"][0]["logprobs"]["token_logprobs"]
    assert "".join(d.text for d in deltas) == out["choices"][0]["text"]
    assert ours == pytest.approx(theirs, abs=2e-3)
    reference.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_greedy_output_is_deterministic_with_a_warm_prefix_cache(engine):
    text = laymaker_sentences()[10]
    first = await collect(engine, "r3", text, max_tokens=16)
    second = await collect(engine, "r4", text, max_tokens=16)
    assert [d.text for d in first] == [d.text for d in second]


@pytest.mark.asyncio(loop_scope="module")
async def test_concurrent_requests_queue_and_an_abort_stops_one(engine):
    """Two requests at once: llama.cpp serves them one after the other; the
    aborted one stops early while the other completes."""
    sentences = laymaker_sentences()
    stop_after = 3
    seen = 0

    async def aborted():
        nonlocal seen
        deltas = []
        async for delta in engine.generate("abort-me", build_messages(sentences[20]),
                                           GenerationParams(max_tokens=60, ignore_eos=True)):
            deltas.append(delta)
            seen += 1
            if seen == stop_after:
                await engine.abort("abort-me")
        return deltas

    survivor, stopped = await asyncio.gather(
        collect(engine, "keep-me", sentences[21], max_tokens=20, ignore_eos=True), aborted())
    assert len([lp for d in survivor for lp in d.token_logprobs]) == 20
    assert survivor[-1].finish_reason == "length"
    assert stop_after <= len(stopped) <= stop_after + 1
    assert all(d.finish_reason is None for d in stopped)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_full_queue_refuses_admission_with_a_retry_estimate(engine):
    from inference.base import EngineBusy

    engine.max_queue = 1
    try:
        stream = engine.generate("depth-1", build_messages(laymaker_sentences()[40]),
                                 GenerationParams(max_tokens=8, ignore_eos=True))
        await stream.__anext__()
        assert engine.queue_depth() == 1
        with pytest.raises(EngineBusy) as busy:
            engine.admit()
        assert busy.value.retry_after_s >= 1
        await stream.aclose()
        assert engine.queue_depth() == 0
        engine.admit()  # room again
    finally:
        engine.max_queue = None
