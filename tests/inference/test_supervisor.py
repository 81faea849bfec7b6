"""The engine supervisor shared by the web replica and the re-run worker:
a dead engine is noticed, refused quickly, and rebuilt with backoff.

The engine is the fake one told to die (:meth:`FakeEngine.kill`, which
reports ``dead`` the way vLLM's ``AsyncLLM.errored`` does); the real
deaths are in tests/live/test_engine_death.py (vLLM's engine-core process
killed) and tests/inference/test_llamacpp_health.py (llama.cpp)."""

from __future__ import annotations

import asyncio

import pytest

from inference.base import EngineDead, EngineError, GenerationParams, generate_text
from inference.fake_engine import FakeEngine
from inference.supervisor import EngineSupervisor


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def builder():
    built: list[FakeEngine] = []

    def factory() -> FakeEngine:
        built.append(FakeEngine())
        return built[-1]

    return factory, built


async def test_a_dead_engine_is_refused_until_its_backoff_then_rebuilt_and_serves():
    factory, built = builder()
    clock = Clock()
    supervisor = EngineSupervisor(factory, backoff_s=5, clock=clock)
    first = await supervisor.get()
    assert supervisor.status().state == "ready" and supervisor.status().alive

    first.kill("EngineCore exited with code -9")
    status = supervisor.status()
    assert (status.state, status.reason, status.alive) == ("dead", "EngineCore exited with code -9", False)
    with pytest.raises(EngineDead) as refused:
        await supervisor.get()
    assert refused.value.reason == "EngineCore exited with code -9"
    assert refused.value.retry_after_s == 5
    clock.now += 4.9
    with pytest.raises(EngineDead):  # still inside the backoff: no rebuild started
        await supervisor.get()
    assert len(built) == 1

    clock.now += 0.2
    with pytest.raises(EngineDead):  # due: the rebuild starts; this caller is not held for it
        await supervisor.get()
    assert supervisor.state == "rebuilding"
    await supervisor._load
    engine = await supervisor.get()
    assert engine is built[1] and engine is not first
    text, _ = await generate_text(engine, "after", [{"role": "user", "content": "ok"}], GenerationParams())
    assert text == "Plain words: ok"
    status = supervisor.status()
    assert (status.state, status.deaths, status.rebuilds, status.reason) == ("ready", 1, 1, "")


async def test_failed_rebuilds_back_off_doubling_up_to_the_cap():
    clock = Clock()
    attempts = []

    def failing() -> FakeEngine:
        attempts.append(clock.now)
        raise EngineError("no weights")

    supervisor = EngineSupervisor(failing, engine=FakeEngine(), backoff_s=1, backoff_max_s=4, clock=clock)
    (await supervisor.get()).kill()
    delays = []
    for _ in range(5):
        with pytest.raises(EngineDead):
            await supervisor.get()
        delays.append(supervisor.next_attempt_at - clock.now)
        clock.now = supervisor.next_attempt_at
        supervisor._begin("rebuilding")
        with pytest.raises(EngineError, match="no weights"):
            await supervisor._load
    assert delays == [1, 1, 2, 4, 4]
    assert supervisor.status().reason == "rebuild failed: EngineError"
    assert len(attempts) == 5


async def test_a_waiting_caller_gets_the_rebuilt_engine():
    """The re-run worker waits (it has nothing else to do)."""
    factory, built = builder()
    supervisor = EngineSupervisor(factory, backoff_s=0.05)
    (await supervisor.get()).kill()
    engine = await supervisor.get(wait=True)
    assert engine is built[1] and engine.health().alive and supervisor.rebuilds == 1


async def test_a_stream_running_when_the_engine_dies_ends_with_engine_dead():
    engine = FakeEngine(token_delay_s=0.02)
    supervisor = EngineSupervisor(builder()[0], engine=engine)
    await supervisor.get()
    pieces = []

    async def consume():
        async for delta in engine.generate("r1", [{"role": "user", "content": "a b c d e f g h"}],
                                           GenerationParams()):
            pieces.append(delta.text)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.07)
    engine.kill("EngineCore exited with code -9")
    with pytest.raises(EngineDead, match="code -9"):
        await task
    assert 0 < len(pieces) < 10


async def test_the_watchdog_rebuilds_a_dead_engine_with_no_traffic():
    factory, built = builder()
    supervisor = EngineSupervisor(factory, backoff_s=0.05)
    (await supervisor.get()).kill()
    supervisor.watch(interval_s=0.02)
    try:
        async with asyncio.timeout(5):
            while supervisor.rebuilds == 0:
                await asyncio.sleep(0.02)
    finally:
        await supervisor.shutdown()
    assert len(built) == 2 and supervisor.deaths == 1


async def test_a_failed_first_load_raises_its_error_and_the_next_waits_for_the_backoff():
    clock = Clock()
    calls = []

    def factory() -> FakeEngine:
        calls.append(clock.now)
        if len(calls) == 1:
            raise EngineError("model file not found")
        return FakeEngine()

    supervisor = EngineSupervisor(factory, backoff_s=3, clock=clock)
    with pytest.raises(EngineError, match="model file not found"):
        await supervisor.get()
    # Not a new load per request, and not called a death: no engine ever served.
    with pytest.raises(EngineError, match="engine not loaded") as refused:
        await supervisor.get()
    assert not isinstance(refused.value, EngineDead)
    assert len(calls) == 1
    clock.now += 3
    with pytest.raises(EngineError, match="engine not loaded"):
        await supervisor.get()
    await supervisor._load
    assert (await supervisor.get()).health().alive and len(calls) == 2
