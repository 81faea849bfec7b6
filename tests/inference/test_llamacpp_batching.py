"""Continuous batching in the llama.cpp engine, on the real SmolLM2 model
and admission under a burst."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import pytest_asyncio

from inference.base import EngineBusy, GenerationParams
from inference.llamacpp_engine import LlamaCppEngine
from inference.prompts import build_messages
from inference.weights import smollm2_gguf_path
from tests.data import laymaker_sentences

pytestmark = pytest.mark.slow  # loads SmolLM2 (two engines)

BATCH = 8  # explicit: the engine default may be serial


@contextlib.asynccontextmanager
async def started(**settings):
    """A started SmolLM2 engine (``LlamaCppEngine`` keyword arguments)."""
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", **settings)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.shutdown()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine():
    async with started(max_batch=BATCH) as engine:
        yield engine


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def serial():
    """The one-at-a-time engine, the reference for greedy outputs."""
    async with started(max_batch=1) as engine:
        yield engine


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


#: How far (nats) the batched engine's logprob of a token may be from the
#: serial engine's. llama.cpp's CPU arithmetic depends on how many rows a
#: step decodes (docs/decisions/batch-size.md: above 3 the greedy
#: texts differ on 7 of 50 sentences); these tests decode up to 8. On the
#: machines before 2026-11-26 their sentences came out bit for bit; on an
#: AMD EPYC without AVX-512, 7 of 8 were identical and the 8th differed by
#: up to 0.073 nats, then took the other of two tokens at -1.647 / -1.639
#: (a near-tie). A batching fault (a row reading another's cache, a wrong
#: position) moves logprobs by whole nats.
LOGPROB_TOLERANCE = 0.15


async def greedy_tokens(engine, request_id, messages, **params) -> list[tuple[str, tuple[float, ...]]]:
    """``[(text, token logprobs)]`` of each delta of a request."""
    return [(delta.text, tuple(delta.token_logprobs))
            async for delta in engine.generate(request_id, messages, GenerationParams(**params))]


def assert_same_greedy_text(reference: list, batched: list) -> None:
    """The batched engine's greedy output equals the serial one's: the same
    tokens with logprobs within :data:`LOGPROB_TOLERANCE`, or such tokens
    up to a near-tie, where the first differing token has, in each run, a
    logprob within the tolerance of the other's."""
    for serial_run, batched_run in zip(reference, batched, strict=True):
        if serial_run == batched_run:
            continue
        shared = 0
        while (shared < min(len(serial_run), len(batched_run))
               and serial_run[shared][0] == batched_run[shared][0]):
            pairs = zip(serial_run[shared][1], batched_run[shared][1], strict=True)
            assert all(abs(a - b) <= LOGPROB_TOLERANCE for a, b in pairs), (shared, serial_run, batched_run)
            shared += 1
        if shared == len(serial_run) == len(batched_run):  # the same text, logprobs within the tolerance
            continue
        assert shared < min(len(serial_run), len(batched_run)), (serial_run, batched_run)  # not a shorter copy
        a, b = serial_run[shared][1][0], batched_run[shared][1][0]
        assert abs(a - b) <= LOGPROB_TOLERANCE, ("not a near-tie", shared, serial_run, batched_run)


def firsts_before_any_end(events) -> bool:
    kinds = [kind for _, _, kind in sorted(events)]
    return "end" not in kinds[: kinds.count("first")]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_seeded_sampled_request_gets_the_same_text_whatever_ran_before(engine, serial):
    text, other = laymaker_sentences()[5], laymaker_sentences()[6]
    sampled = {"max_tokens": 24, "temperature": 1.0}
    for eng in (serial, engine):
        first = await alone(eng, text, "seeded-1", seed=1234, **sampled)
        await alone(eng, other, "unseeded", **sampled)  # draws from the engine's own generator
        assert await alone(eng, text, "seeded-2", seed=1234, **sampled) == first
        assert len({await alone(eng, text, f"seed-{seed}", seed=seed, **sampled) for seed in (1, 2, 3)}) > 1


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
    reference = [await greedy_tokens(serial, f"serial-{i}", build_messages(text), max_tokens=40)
                 for i, text in enumerate(sentences)]
    batched = await asyncio.gather(*(greedy_tokens(engine, f"eq-{i}", build_messages(text), max_tokens=40)
                                     for i, text in enumerate(sentences)))
    assert_same_greedy_text(reference, batched)


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
    """Background requests (the model's own check) never share a batch with a
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


# -- the product's cluster prompt (inference.examples.cluster_messages) --------

def cluster_requests(per_cluster: tuple[int, ...]) -> list[list[dict[str, str]]]:
    """The product's messages (24 clusters x 8 examples, as
    ``clinical.models.translation_parts`` renders them) for laymaker
    sentences: ``per_cluster[i]`` sentences of the i-th most populated
    cluster (among sentences that are not one of their cluster's fixed
    examples, which would change its prefix), so the requests share some
    instruction prefixes and differ in others."""
    from inference.examples import cluster_messages, default_router

    router = default_router(24, 8)
    groups: dict[int, list[str]] = {}
    for text in laymaker_sentences():
        cluster, fixed = router.route(text)
        if len(fixed) == len(router.fixed[cluster]):  # not one of its cluster's examples: the shared prefix
            groups.setdefault(cluster, []).append(text)
    ranked = sorted(groups.values(), key=len, reverse=True)
    return [cluster_messages(text, router=router) for n, group in zip(per_cluster, ranked) for text in group[:n]]


def prompt_split(engine, messages) -> tuple[tuple[int, ...], int]:
    """``(instruction prefix tokens, prompt length)`` as the engine splits them."""
    tokens = engine._llm.tokenize(engine._formatter(messages=messages).prompt.encode(), add_bos=True, special=True)
    shared = engine._instructions_length(messages, tokens)
    return tuple(tokens[:shared]), len(tokens)


async def run_messages(engine, request_id, messages, **params) -> str:
    return "".join(text for text, _ in await greedy_tokens(engine, request_id, messages, **params))


@pytest.mark.asyncio(loop_scope="module")
async def test_cluster_prompts_in_one_batch_equal_the_serial_engine_and_read_each_prefix_once(engine, serial):
    """8 requests routed to 4 cluster prefixes (3 + 3 + 1 + 1) at once: the
    same greedy text as the serial engine one at a time (up to a near-tie,
    :func:`assert_same_greedy_text`), each prefix read
    once (then written into the other requests' sequences from its
    snapshot), and besides those only the 8 sentences' tails are read."""
    requests = cluster_requests((3, 3, 1, 1))
    splits = [prompt_split(engine, m) for m in requests]
    prefixes = {prefix for prefix, _ in splits}
    assert len(requests) == 8 and len(prefixes) == 4
    assert not any(prefix in engine.prefix_snapshots for prefix in prefixes)
    reference = [await greedy_tokens(serial, f"cl-serial-{i}", m, max_tokens=40) for i, m in enumerate(requests)]
    evaluations, evaluated = engine.prefix_evaluations, engine.prompt_tokens_evaluated
    restored = engine.prefix_snapshots.restored
    batched = await asyncio.gather(*(greedy_tokens(engine, f"cl-{i}", m, max_tokens=40)
                                     for i, m in enumerate(requests)))
    assert_same_greedy_text(reference, batched)
    assert engine.prefix_evaluations - evaluations == len(prefixes)
    assert engine.prefix_snapshots.restored - restored == len(requests) - len(prefixes)
    assert engine.prompt_tokens_evaluated - evaluated == (
        sum(len(p) for p in prefixes) + sum(length - len(prefix) for prefix, length in splits))
    assert engine._batcher.max_rows >= 2 and engine.queue_depth() == 0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def small_store():
    """A batched engine keeping only 2 prefix snapshots."""
    async with started(max_batch=4, prefix_snapshots=2) as engine:
        yield engine


@pytest.mark.asyncio(loop_scope="module")
async def test_a_prefix_evicted_beyond_the_bound_is_read_again_correctly(small_store, serial):
    """Three cluster prefixes through a store of 2: the least recently used
    one is dropped, and a request that needs it again reads it again and
    gets the serial engine's text."""
    engine = small_store
    first, second, third = cluster_requests((1, 1, 1))
    reference = await run_messages(serial, "ev-serial", first, max_tokens=40)
    evaluations = engine.prefix_evaluations
    texts = [await run_messages(engine, f"ev-{i}", m, max_tokens=40) for i, m in enumerate((first, second, third))]
    assert engine.prefix_evaluations == evaluations + 3
    assert len(engine.prefix_snapshots) == 2 and prompt_split(engine, first)[0] not in engine.prefix_snapshots
    again = await run_messages(engine, "ev-again", first, max_tokens=40)
    assert engine.prefix_evaluations == evaluations + 4
    assert again == texts[0] == reference
    # The third is still kept: written back, not read.
    restored = engine.prefix_snapshots.restored
    assert await run_messages(engine, "ev-third", third, max_tokens=40) == texts[2]
    assert engine.prefix_evaluations == evaluations + 4 and engine.prefix_snapshots.restored == restored + 1


# -- batch-invariant scheduling (max_batch <= INVARIANT_MAX_BATCH) ------------

@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def invariant():
    """Batched at INVARIANT_MAX_BATCH: prompts read in steps of their own."""
    from inference.llamacpp_batch import INVARIANT_MAX_BATCH

    async with started(max_batch=INVARIANT_MAX_BATCH) as engine:
        yield engine


async def streamed(engine, request_id, messages, **params) -> tuple[str, list[float]]:
    """``(text, every token's logprob)`` of one request."""
    pieces, logprobs = [], []
    async for delta in engine.generate(request_id, messages, GenerationParams(**params)):
        pieces.append(delta.text)
        logprobs.extend(delta.token_logprobs)
    return "".join(pieces), logprobs


@pytest.mark.asyncio(loop_scope="module")
async def test_up_to_three_requests_get_the_serial_engines_text_and_logprobs_bit_for_bit(invariant, serial):
    """Seven cluster-prompt requests at once through 3 sequences: they queue,
    join as others finish and decode together (never more than 3 rows), and
    each gets the serial engine's greedy text with every token's logprob
    equal to the last bit; no step reads a prompt beside decoding rows."""
    assert invariant._batcher.prompts_alone and invariant.info.settings["prompts_alone"]
    requests = cluster_requests((3, 2, 1, 1))
    reference = [await streamed(serial, f"inv-serial-{i}", m, max_tokens=40) for i, m in enumerate(requests)]
    steps = invariant._batcher.steps
    got = await asyncio.gather(*(streamed(invariant, f"inv-{i}", m, max_tokens=40)
                                 for i, m in enumerate(requests)))
    assert got == reference
    assert invariant._batcher.max_rows == 3
    # Batched: fewer steps than one per token and one per prompt chunk.
    assert invariant._batcher.steps - steps < sum(len(lp) for _, lp in got) + len(requests)
    assert invariant.queue_depth() == 0


def test_the_engine_reads_prompts_alone_only_up_to_the_invariant_batch():
    from inference.llamacpp_batch import INVARIANT_MAX_BATCH

    small = LlamaCppEngine(str(smollm2_gguf_path()), max_batch=INVARIANT_MAX_BATCH)
    large = LlamaCppEngine(str(smollm2_gguf_path()), max_batch=INVARIANT_MAX_BATCH + 1)
    assert small._batcher.prompts_alone and not large._batcher.prompts_alone
    assert small.info.settings["prompts_alone"] is True and large.info.settings["prompts_alone"] is False
