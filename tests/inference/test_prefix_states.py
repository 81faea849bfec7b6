"""Prefix states on disk: a restarted llama.cpp engine reads its instruction
prefixes back instead of evaluating them, and decodes exactly as a cold one."""

from __future__ import annotations

import ctypes
import os

import pytest

from inference.base import GenerationParams
from inference.llamacpp_engine import LlamaCppEngine
from inference.llamacpp_prefix import STATE_FILES_PER_SNAPSHOT, PrefixSnapshots
from inference.prompts import build_messages
from inference.weights import smollm2_gguf_path
from tests.data import laymaker_sentences


def state(data: bytes) -> ctypes.Array:
    return (ctypes.c_uint8 * len(data)).from_buffer_copy(data)


def test_a_state_written_by_one_store_is_read_back_byte_for_byte_by_the_next(tmp_path):
    first = PrefixSnapshots(4)
    first.attach_folder(tmp_path, "model=a")
    first._keep((1, 2, 3), state(b"kv rows"))
    first._write((1, 2, 3), state(b"kv rows"))

    second = PrefixSnapshots(4)
    second.attach_folder(tmp_path, "model=a")
    assert bytes(second._buffer([1, 2, 3])) == b"kv rows"
    assert second.read_from_disk == 1 and len(second) == 1
    assert second._buffer([1, 2]) is None  # another prefix: no state


def test_states_of_another_model_or_layout_are_never_read(tmp_path):
    first = PrefixSnapshots(4)
    first.attach_folder(tmp_path, "model=a n_batch=512")
    first._write((1, 2, 3), state(b"kv rows"))

    other = PrefixSnapshots(4)
    other.attach_folder(tmp_path, "model=a n_batch=64")
    assert other._buffer([1, 2, 3]) is None
    assert other.on_disk() == 0 and first.on_disk() == 1


def test_a_state_file_holding_other_tokens_or_cut_short_is_deleted_not_restored(tmp_path):
    store = PrefixSnapshots(4)
    folder = store.attach_folder(tmp_path, "model=a")
    store._write((1, 2, 3), state(b"kv rows"))
    path = store._path((1, 2, 3))
    os.replace(path, store._path((7, 8, 9)))  # a file under another prefix's name
    assert store._buffer([7, 8, 9]) is None
    assert not list(folder.glob("*.state"))

    store._write((1, 2, 3), state(b"kv rows"))
    path.write_bytes(path.read_bytes()[:10])  # cut short
    assert store._buffer([1, 2, 3]) is None and not path.exists()


def test_the_folder_keeps_the_most_recently_used_states(tmp_path):
    store = PrefixSnapshots(2)
    store.attach_folder(tmp_path, "model=a")
    cap = STATE_FILES_PER_SNAPSHOT * 2
    for i in range(cap + 3):
        store._write((i,), state(bytes([i]) * 8))
        os.utime(store._path((i,)), ns=(i * 10**9, i * 10**9))  # written one second apart
    assert store.on_disk() == cap
    assert not store._path((0,)).exists() and store._path((cap + 2,)).exists()


async def _generate(engine: LlamaCppEngine, request_id: str, text: str) -> tuple[str, list[float]]:
    pieces, logprobs = [], []
    async for delta in engine.generate(request_id, build_messages(text), GenerationParams(max_tokens=24)):
        pieces.append(delta.text)
        logprobs.extend(delta.token_logprobs or ())
    return "".join(pieces), logprobs


@pytest.mark.slow  # loads SmolLM2
@pytest.mark.parametrize("max_batch", [1, 3], ids=["serial", "batched"])
async def test_a_restarted_engine_reads_its_prefix_from_disk_and_decodes_as_a_cold_one(tmp_path, max_batch):
    sentence = laymaker_sentences()[3]
    model = str(smollm2_gguf_path())

    cold = LlamaCppEngine(model, n_ctx=2048, precision="q4_1", max_batch=max_batch, prefix_state_dir=tmp_path)
    await cold.start()
    try:
        cold_text, cold_logprobs = await _generate(cold, "cold", sentence)
        assert cold.prefix_evaluations == 1 and cold.prefix_snapshots.on_disk() == 1
    finally:
        await cold.shutdown()

    restarted = LlamaCppEngine(model, n_ctx=2048, precision="q4_1", max_batch=max_batch, prefix_state_dir=tmp_path)
    await restarted.start()
    try:
        text, logprobs = await _generate(restarted, "restarted", sentence)
        assert restarted.prefix_evaluations == 0, "the prefix was evaluated again"
        assert restarted.prefix_snapshots.read_from_disk == 1
    finally:
        await restarted.shutdown()
    assert text == cold_text and cold_text
    assert logprobs == cold_logprobs  # the same cache, so the same numbers
