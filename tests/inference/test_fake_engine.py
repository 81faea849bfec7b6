"""The fake engine the tests run on schedules like the llama.cpp engine
when asked to (``serial=True``), so the background work that yields to
clinicians (the model's own check, the prefix warm-up) is tested as it runs."""

from __future__ import annotations

import asyncio

from inference.base import EnginePreempted, GenerationParams, generate_text
from inference.fake_engine import FakeEngine


async def admitted(engine: FakeEngine, request_id: str) -> None:
    """Wait until ``request_id`` has begun streaming on ``engine``."""
    async with asyncio.timeout(10):
        while request_id not in engine.admitted:
            await asyncio.sleep(0.005)


async def test_the_serial_fake_engine_schedules_like_llamacpp():
    """serial=True: interactive requests first in arrival order, background
    ones after them, and a running background one preempted by an
    interactive arrival (what the llama.cpp engine does)."""
    engine = FakeEngine(serial=True, token_delay_s=0.005)
    outcomes: dict[str, str] = {}

    async def run(request_id: str, *, background: bool = False, words: int = 10) -> None:
        messages = [{"role": "user", "content": " ".join(["word"] * words)}]
        try:
            await generate_text(engine, request_id, messages, GenerationParams(background=background))
            outcomes[request_id] = "end"
        except EnginePreempted:
            outcomes[request_id] = "preempted"

    first = asyncio.create_task(run("fg-1"))
    await admitted(engine, "fg-1")
    queued = [asyncio.create_task(run("bg-1", background=True)), asyncio.create_task(run("fg-2")),
              asyncio.create_task(run("fg-3"))]
    await asyncio.gather(first, *queued)
    assert engine.admitted == ["fg-1", "fg-2", "fg-3", "bg-1"]
    assert set(outcomes.values()) == {"end"}

    background = asyncio.create_task(run("bg-2", background=True, words=400))
    await admitted(engine, "bg-2")
    await run("fg-4")
    await background
    assert engine.admitted[-2:] == ["bg-2", "fg-4"]
    assert outcomes["bg-2"] == "preempted" and outcomes["fg-4"] == "end"
    assert engine.preempted == {"bg-2"} and engine.queue_depth() == 0
