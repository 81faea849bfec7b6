"""Engine admission reserves its place atomically:
a burst of simultaneous admissions gets at most ``max_queue`` places, even
though none of them has started its request when the next one is admitted."""

from __future__ import annotations

import asyncio

import pytest

from inference.base import EngineBusy, GenerationParams
from inference.fake_engine import FakeEngine


async def burst(engine, n: int, *, background: bool = False) -> tuple[int, int, int]:
    """``n`` requests admit at once, wait for their database write, then
    stream; returns ``(admitted, refused, peak queue depth)``."""
    admitted = refused = peak = 0

    async def one(i):
        nonlocal admitted, refused, peak
        try:
            engine.admit(background=background)
        except EngineBusy:
            refused += 1
            return
        admitted += 1
        await asyncio.sleep(0.01)  # the translation row's INSERT
        async for _ in engine.generate(f"r{i}", [{"role": "user", "content": "a b c d"}],
                                       GenerationParams(max_tokens=4, background=background)):
            peak = max(peak, engine.queue_depth())

    await asyncio.gather(*(one(i) for i in range(n)))
    return admitted, refused, peak


@pytest.mark.asyncio
async def test_a_burst_of_14_with_a_queue_of_8_admits_exactly_8():
    engine = FakeEngine(token_delay_s=0.01)
    engine.max_queue = 8
    admitted, refused, peak = await burst(engine, 14)
    assert (admitted, refused) == (8, 6)
    assert peak <= 8
    assert engine.admissions_reserved() == 0  # every place was taken over
    assert engine.queue_depth() == 0
    assert (await burst(engine, 14))[:2] == (8, 6)  # and the places are free again


@pytest.mark.asyncio
async def test_reserved_places_count_against_later_admissions_until_started():
    engine = FakeEngine()
    engine.max_queue = 2
    first, second = engine.admit(), engine.admit()
    with pytest.raises(EngineBusy):
        engine.admit()
    first.release()
    engine.admit()  # the released place is free again
    with pytest.raises(EngineBusy):
        engine.admit()
    second.release()
    assert engine.admissions_reserved() == 1


@pytest.mark.asyncio
async def test_a_reservation_nobody_uses_lapses():
    engine = FakeEngine()
    engine.max_queue = 1
    engine.admission_ttl_s = 0.05
    engine.admit()
    with pytest.raises(EngineBusy):
        engine.admit()
    await asyncio.sleep(0.1)
    engine.admit()


@pytest.mark.asyncio
async def test_background_reservations_never_turn_a_translation_away():
    engine = FakeEngine()
    engine.max_queue = 1
    engine.admit(background=True)
    with pytest.raises(EngineBusy):
        engine.admit(background=True)
    engine.admit()  # interactive: background places do not count for it
    with pytest.raises(EngineBusy):
        engine.admit()
