"""The llama.cpp engine on the real SmolLM2 model."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import pytest_asyncio

from inference.base import GenerationParams
from inference.llamacpp_engine import LlamaCppEngine
from inference.prompts import build_messages
from inference.weights import smollm2_gguf_path
from tests.data import laymaker_sentences

pytestmark = pytest.mark.slow  # loads SmolLM2


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine():
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", max_batch=1)
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
        # Room again. admit() reserves the place: give it
        # back, as no request follows here.
        engine.admit().release()
    finally:
        engine.max_queue = None


@pytest.mark.asyncio(loop_scope="module")
async def test_queued_background_work_never_turns_a_translation_away(engine):
    """Background jobs (the model's own checks) fill the queue for more
    background jobs, not for a translation, which would run before them anyway."""
    from inference.base import EngineBusy

    engine.max_queue = 1
    try:
        stream = engine.generate("background-1", build_messages(laymaker_sentences()[41]),
                                 GenerationParams(max_tokens=64, ignore_eos=True, background=True))
        await stream.__anext__()
        assert (engine.queue_depth(), engine.interactive_queue_depth()) == (1, 0)
        with pytest.raises(EngineBusy):
            engine.admit(background=True)
        engine.admit()  # a translation is admitted
        translation = await collect(engine, "after-background", laymaker_sentences()[42], max_tokens=4)
        assert translation[-1].finish_reason in ("stop", "length")
        await stream.aclose()
    finally:
        engine.max_queue = None


async def stream_events(engine, request_id, text, events, **params):
    """Collect ``request_id``'s deltas, appending ``(request_id, kind)`` to
    the shared ``events`` as they arrive: ``"first"`` for the first delta,
    ``"end"`` after the last, ``"preempted"`` when the engine preempts it."""
    from inference.base import EnginePreempted

    deltas = []
    try:
        async for delta in engine.generate(request_id, build_messages(text), GenerationParams(**params)):
            if not deltas:
                events.append((request_id, "first"))
            deltas.append(delta)
    except EnginePreempted:
        events.append((request_id, "preempted"))
        return deltas
    events.append((request_id, "end"))
    return deltas


@pytest.mark.asyncio(loop_scope="module")
async def test_an_interactive_request_preempts_a_running_background_one(engine):
    """A long background request is running when a
    clinician's translation arrives: the translation starts at once, without
    waiting for the background request's remaining tokens, and the
    background caller gets EnginePreempted."""
    sentences = laymaker_sentences()
    events: list[tuple[str, str]] = []
    background_tokens = 192

    background = asyncio.create_task(stream_events(
        engine, "long-bg", sentences[50], events,
        max_tokens=background_tokens, ignore_eos=True, background=True))
    while ("long-bg", "first") not in events:
        await asyncio.sleep(0.005)
    foreground = await stream_events(engine, "translate-fg", sentences[51], events,
                                     max_tokens=12, ignore_eos=True)
    partial = await background

    assert ("long-bg", "preempted") in events
    assert 1 <= len(partial) < background_tokens and all(d.finish_reason is None for d in partial)
    assert len(foreground) == 12 and foreground[-1].finish_reason == "length"
    # The foreground request began work after the background one stopped and
    # well before the background one could have produced its 192 tokens.
    assert events.index(("long-bg", "preempted")) < events.index(("translate-fg", "first"))
    assert len(partial) < background_tokens // 4
    assert engine.queue_depth() == 0
    # The engine works on normally afterwards (its KV cache reused correctly).
    again = await collect(engine, "after-preempt", sentences[51], max_tokens=12, ignore_eos=True)
    assert [d.text for d in again] == [d.text for d in foreground]


@pytest.mark.asyncio(loop_scope="module")
async def test_queued_interactive_requests_go_first_in_arrival_order(engine):
    """While an interactive request runs, a background request and then two
    interactive ones queue: the interactive ones run next, in arrival order,
    and the background one last, to the end (nothing preempts it then)."""
    sentences = laymaker_sentences()
    events: list[tuple[str, str]] = []
    running = asyncio.create_task(stream_events(engine, "fg-1", sentences[60], events,
                                                max_tokens=16, ignore_eos=True))
    while ("fg-1", "first") not in events:
        await asyncio.sleep(0.005)
    background = asyncio.create_task(stream_events(engine, "bg", sentences[61], events,
                                                   max_tokens=8, ignore_eos=True, background=True))
    second = asyncio.create_task(stream_events(engine, "fg-2", sentences[62], events,
                                               max_tokens=8, ignore_eos=True))
    third = asyncio.create_task(stream_events(engine, "fg-3", sentences[63], events,
                                              max_tokens=8, ignore_eos=True))
    results = await asyncio.gather(running, background, second, third)

    starts = [request_id for request_id, kind in events if kind == "first"]
    assert starts == ["fg-1", "fg-2", "fg-3", "bg"]
    assert all(kind == "end" for _, kind in events if kind != "first")
    assert [sum(len(d.token_logprobs) for d in r) for r in results] == [16, 8, 8, 8]
    admitted = [r[0].admitted_ns for r in results]
    assert admitted[0] < admitted[2] < admitted[3] < admitted[1]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_translation_after_a_self_check_gets_its_instructions_back_from_a_snapshot(engine):
    """A self-check evaluates other instructions and evicts the
    translation's; the next translation writes them back from the KV-cache
    snapshot instead of reading them again, and decodes exactly as an engine
    with a cold cache does."""
    from inference.self_check import self_check_messages

    text = laymaker_sentences()[12]
    cold = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", prefix_snapshots=0, max_batch=1)
    await cold.start()
    try:
        reference = [d.text for d in await collect(cold, "cold", text, max_tokens=16)]
        assert cold.prefix_snapshots.restored == 0 and len(cold.prefix_snapshots) == 0
    finally:
        await cold.shutdown()

    await collect(engine, "before", laymaker_sentences()[11], max_tokens=4)
    check = self_check_messages(laymaker_sentences()[11], "Your blood pressure is high.")
    async for _ in engine.generate("before-check", check, GenerationParams(max_tokens=1, background=True)):
        pass
    restored, evaluated = engine.prefix_snapshots.restored, engine.prefix_evaluations
    after = await collect(engine, "after", text, max_tokens=16)
    # The translation's instructions were not read again: the serial engine
    # writes them back from a snapshot; the batched one still holds them in
    # their holder sequence (inference.llamacpp_batch).
    assert engine.prefix_evaluations == evaluated
    if engine.max_batch == 1:
        assert engine.prefix_snapshots.restored == restored + 1
    assert [d.text for d in after] == reference


async def test_an_instruction_prefix_reads_the_same_whatever_request_came_before():
    """Two example clusters share the system message. The serial engine
    reads the second cluster's instructions from position 0 even though its
    cache holds the shared system message from the first: llama.cpp rounds
    tokens read in a decode call that starts elsewhere differently, so
    reusing the part would make the prefix's KV snapshot, and so the texts,
    depend on the request before (docs/decisions/determinism.md)."""
    from inference.examples import cluster_messages, default_router

    router = default_router(24, 8)
    sentence = laymaker_sentences()[5]
    target = cluster_messages(sentence, router=router)
    # The smallest other cluster: its prompt shares the system message.
    other = min((c for c in range(24) if c != router.route(sentence)[0]), key=lambda c: router.sizes[c])

    async def run(engine, messages_list):
        starts = []
        real_eval = engine._eval

        def recording_eval(llm, tokens):
            starts.append((llm.n_tokens, len(tokens)))
            return real_eval(llm, tokens)

        engine._eval = recording_eval
        for i, messages in enumerate(messages_list):
            async for _ in engine.generate(f"r{i}", messages, GenerationParams(max_tokens=1)):
                pass
        return starts

    from inference.examples import cluster_prefix_messages

    alone = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", max_batch=1)
    after_other = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", max_batch=1)
    try:
        await alone.start()
        await after_other.start()
        await run(alone, [target])
        starts = await run(after_other, [cluster_prefix_messages(other, router=router), target])
        prefix = alone._prompt_tokens(SimpleNamespace(messages=target, params=GenerationParams()))[1]
        # The target's instructions were read from position 0 in both engines.
        assert (0, prefix) in starts[-2:], starts
        snapshot = {key: bytes(value) for key, value in alone.prefix_snapshots._store.items()}
        other_snapshot = {key: bytes(value) for key, value in after_other.prefix_snapshots._store.items()}
        key = next(k for k in snapshot if len(k) == prefix)
        assert other_snapshot[key] == snapshot[key]
    finally:
        await alone.shutdown()
        await after_other.shutdown()
