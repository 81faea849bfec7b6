"""Continuous batching in the llama.cpp engine, on the real SmolLM2 model
and admission under a burst."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio

from inference.base import EngineBusy, GenerationParams
from inference.llamacpp_engine import LlamaCppEngine
from inference.models import smollm2_gguf_path
from inference.prompts import build_messages
from tests.data import laymaker_sentences

BATCH = 8  # explicit: the engine default may be serial


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine():
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", max_batch=BATCH)
    await engine.start()
    yield engine
    await engine.shutdown()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def serial():
    """The one-at-a-time engine, the reference for greedy outputs."""
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", max_batch=1)
    await engine.start()
    yield engine
    await engine.shutdown()


async def timed(engine, request_id, text, events=None, **params):
    """Stream ``request_id``; append ``(time, request_id, kind)`` to
    ``events`` for its first token (``"first"``) and its end (``"end"``)."""
    pieces = []
    async for delta in engine.generate(request_id, build_messages(text), GenerationParams(**params)):
        if not pieces and events is not None:
            events.append((time.monotonic(), request_id, "first"))
        pieces.append(delta.text)
    if events is not None:
        events.append((time.monotonic(), request_id, "end"))
    return "".join(pieces)


async def alone(engine, text, request_id="alone", **params):
    return await timed(engine, request_id, text, **params)


def firsts_before_any_end(events) -> bool:
    kinds = [kind for _, _, kind in sorted(events)]
    return "end" not in kinds[: kinds.count("first")]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("clients", [2, BATCH])
async def test_concurrent_requests_interleave(engine, clients):
    """Every request's first token arrives before any request finishes: they
    decode together, not one after another."""
    sentences = laymaker_sentences()[100:100 + clients]
    events: list = []
    steps = engine._batcher.steps
    outputs = await asyncio.gather(*(
        timed(engine, f"inter-{clients}-{i}", text, events, max_tokens=32, ignore_eos=True)
        for i, text in enumerate(sentences)))
    assert all(outputs)
    assert firsts_before_any_end(events), sorted(events)
    assert engine._batcher.max_rows >= clients
    # Batched: far fewer decode steps than the requests' tokens one by one.
    assert engine._batcher.steps - steps < clients * 32
    assert engine.queue_depth() == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_batched_greedy_output_equals_the_one_at_a_time_engine(engine, serial):
    sentences = laymaker_sentences()[110:110 + BATCH]
    reference = [await alone(serial, text, f"serial-{i}", max_tokens=40) for i, text in enumerate(sentences)]
    batched = await asyncio.gather(*(timed(engine, f"eq-{i}", text, max_tokens=40)
                                     for i, text in enumerate(sentences)))
    assert batched == reference


@pytest.mark.asyncio(loop_scope="module")
async def test_cancelling_one_request_leaves_the_others_unchanged(engine):
    sentences = laymaker_sentences()[120:124]
    reference = [await alone(engine, text, f"ref-{i}", max_tokens=30, ignore_eos=True)
                 for i, text in enumerate(sentences)]
    cancelled_tokens = 0

    async def cancelled():
        nonlocal cancelled_tokens
        async for _ in engine.generate("cancel-me", build_messages(sentences[0]),
                                       GenerationParams(max_tokens=30, ignore_eos=True)):
            cancelled_tokens += 1
            if cancelled_tokens == 5:
                await engine.abort("cancel-me")
        return cancelled_tokens

    results = await asyncio.gather(cancelled(), *(
        timed(engine, f"keep-{i}", text, max_tokens=30, ignore_eos=True)
        for i, text in enumerate(sentences[1:], start=1)))
    assert results[0] == 5
    assert list(results[1:]) == reference[1:]
    assert engine.queue_depth() == 0 and not engine._batcher._active


@pytest.mark.asyncio(loop_scope="module")
async def test_a_request_joining_mid_batch_gets_the_same_text_as_alone(engine):
    long_text, late_text = laymaker_sentences()[130], laymaker_sentences()[131]
    reference = await alone(engine, late_text, "late-alone", max_tokens=32)
    events: list = []
    running = asyncio.create_task(timed(engine, "early", long_text, events, max_tokens=64, ignore_eos=True))
    while not events:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)  # a few of its tokens decoded
    late = await timed(engine, "late", late_text, events, max_tokens=32)
    await running
    assert late == reference
    # The late request started while the early one was still decoding.
    order = [(rid, kind) for _, rid, kind in sorted(events)]
    assert order.index(("late", "first")) < order.index(("early", "end"))


@pytest.mark.asyncio(loop_scope="module")
async def test_the_shared_instructions_are_evaluated_once_for_n_requests(engine):
    """N requests with instructions the engine has not seen (a new reading
    level, 4): the instructions are read once, into a holder sequence, and
    copied to the N sequences; only the N clinical texts are read besides."""
    n = 6
    texts = laymaker_sentences()[140:140 + n]
    messages = [build_messages(text, reading_level=4) for text in texts]
    prompts = [engine._llm.tokenize(engine._formatter(messages=m).prompt.encode(), add_bos=True, special=True)
               for m in messages]
    shared = engine._instructions_length(messages[0], prompts[0])
    prefixes, evaluated = engine.prefix_evaluations, engine.prompt_tokens_evaluated

    async def run(i):
        async for _ in engine.generate(f"prefix-{i}", messages[i], GenerationParams(max_tokens=4)):
            pass

    await asyncio.gather(*(run(i) for i in range(n)))
    assert engine.prefix_evaluations == prefixes + 1
    assert engine.prompt_tokens_evaluated - evaluated == shared + sum(len(p) - shared for p in prompts)
    # Again: the instructions stay in their holder and are not read at all.
    await asyncio.gather(*(run(i) for i in range(n)))
    assert engine.prefix_evaluations == prefixes + 1


@pytest.mark.asyncio(loop_scope="module")
async def test_a_burst_of_admissions_reserves_at_most_max_queue_places(engine):
    """14 translations arrive at once with a queue of 8: each admits, then
    (like clinical.services) awaits its database write before it starts.
    Exactly 8 are admitted, 6 are refused as busy, and never more than 8
    are in the engine."""
    engine.max_queue = 8
    admitted, refused, peak = [], [], 0
    texts = laymaker_sentences()[150:164]

    async def frame(i):
        nonlocal peak
        try:
            engine.admit()
        except EngineBusy as busy:
            refused.append(busy.retry_after_s)
            return
        await asyncio.sleep(0.02)  # the translation row's INSERT
        admitted.append(i)
        async for _ in engine.generate(f"burst-{i}", build_messages(texts[i]),
                                       GenerationParams(max_tokens=4, ignore_eos=True)):
            peak = max(peak, engine.queue_depth())

    try:
        await asyncio.gather(*(frame(i) for i in range(14)))
    finally:
        engine.max_queue = None
    assert len(admitted) == 8 and len(refused) == 6
    assert all(seconds >= 1 for seconds in refused)
    assert peak <= 8
    assert engine.admissions_reserved() == 0 and engine.queue_depth() == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_a_background_request_gives_way_to_a_translation(engine):
    """Background (glossary) requests never share a batch with a
    translation: one that runs when a translation arrives is preempted."""
    from inference.base import EnginePreempted

    sentences = laymaker_sentences()
    got = []

    async def background():
        try:
            async for delta in engine.generate("bg", build_messages(sentences[170]),
                                               GenerationParams(max_tokens=200, ignore_eos=True, background=True)):
                got.append(delta)
        except EnginePreempted:
            return "preempted"
        return "finished"

    task = asyncio.create_task(background())
    while not got:
        await asyncio.sleep(0.005)
    text = await alone(engine, sentences[171], "fg", max_tokens=8, ignore_eos=True)
    assert await task == "preempted" and text
    assert len(got) < 200
