"""Snapshots of llama.cpp's KV cache for the shared instruction prefixes.

The llama.cpp engine keeps one KV cache. A translation reuses the cached
instructions (system prompt and worked example, every message but the
clinical text) of the request before it, but a glossary job in between
evaluates other instructions and overwrites them, so the next translation
would read its ~190 instruction tokens again: seconds of TTFT on a 1.5B
model on two cores. This store keeps a copy of the cache right after an
instruction prefix was evaluated (llama.cpp's per-sequence state,
``llama_state_seq_get_data``: the K and V rows of those tokens only, about
28 KiB per token for Qwen2.5-1.5B in f16) and writes it back
(``llama_state_seq_set_data``) when a request's prefix is not in the cache.

Restoring a snapshot gives the same cache as evaluating the prefix: the
engine always evaluates a prefix on its own (then the rest), whether or not
a snapshot exists, so cold, warm and restored requests see the same numbers
(llama.cpp is not batch-invariant; see ``LlamaCppEngine._decode``).
"""

from __future__ import annotations

import collections
import ctypes
import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)

#: Snapshots the llama.cpp engine keeps by default (``INFERENCE_PREFIX_SNAPSHOTS``,
#: :class:`inference.factory.EngineConfig`): the default 24 example clusters
#: (clinical ``PROMPT_CLUSTERS``) plus the other instruction sets (the
#: one-example prompt per grade and language, the glossary). About 28 KiB
#: per prefix token for Qwen2.5-1.5B in f16: a cluster prefix of 300-700
#: tokens takes 8-19 MiB, so 32 snapshots take at most about 0.6 GiB.
DEFAULT_PREFIX_SNAPSHOTS = 32


class PrefixSnapshots:
    """Most recently used KV-cache snapshots, keyed by their token ids.

    Args:
        capacity: snapshots kept (0 disables the store), least recently
            used dropped first; each holds one instruction set (reading
            level x language x task, or one example cluster's prefix):
            about 28 KiB per prefix token for Qwen2.5-1.5B in f16, so 5 MiB
            for the 190-token one-example prompt and 8-19 MiB for a cluster
            prefix of 300-700 tokens. The engine's default is
            ``INFERENCE_PREFIX_SNAPSHOTS`` (:data:`DEFAULT_PREFIX_SNAPSHOTS`).

    Used only from the engine's worker thread.
    """

    def __init__(self, capacity: int = DEFAULT_PREFIX_SNAPSHOTS) -> None:
        self.capacity = capacity
        self._store: collections.OrderedDict[tuple[int, ...], ctypes.Array] = collections.OrderedDict()
        self.restored = 0  #: prefixes written back instead of evaluated

    def __len__(self) -> int:
        return len(self._store)

    @property
    def nbytes(self) -> int:
        """Bytes held by the snapshots (host memory)."""
        return sum(len(buffer) for buffer in self._store.values())

    def __contains__(self, prefix: Sequence[int]) -> bool:
        return tuple(prefix) in self._store

    def save(self, llm, prefix: Sequence[int]) -> None:
        """Copy sequence 0 of ``llm``'s cache, which must hold exactly
        ``prefix`` (call right after evaluating it)."""
        if llm.n_tokens != len(prefix):
            return
        self.save_seq(llm.ctx, 0, prefix)

    def save_seq(self, ctx, seq_id: int, prefix: Sequence[int]) -> None:
        """Copy sequence ``seq_id`` of the llama.cpp context ``ctx`` (a
        ``llama_context_p``), which must hold exactly ``prefix`` (call right
        after evaluating it): ``llama_state_seq_get_data``, the K and V rows
        of that sequence's cells only, in whichever KV stream holds it."""
        if not self.capacity:
            return
        import llama_cpp

        size = llama_cpp.llama_state_seq_get_size(ctx, seq_id)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, seq_id)
        if not written:
            logger.warning("llama.cpp prefix snapshot failed (%d tokens)", len(prefix))
            return
        key = tuple(prefix)
        self._store[key] = buffer
        self._store.move_to_end(key)
        while len(self._store) > self.capacity:
            self._store.popitem(last=False)

    def restore(self, llm, prefix: Sequence[int]) -> bool:
        """Replace ``llm``'s cache by the snapshot of ``prefix``.

        Returns:
            ``True`` when the cache now holds ``prefix`` (``llm.n_tokens ==
            len(prefix)``); ``False`` when there is no snapshot or llama.cpp
            refused it (the cache is then empty, ``n_tokens`` 0).
        """
        if tuple(prefix) not in self._store:
            return False
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        llm.n_tokens = 0
        if not self.restore_seq(llm.ctx, 0, prefix):
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return False
        llm.input_ids[: len(prefix)] = prefix
        llm.n_tokens = len(prefix)
        return True

    def restore_seq(self, ctx, seq_id: int, prefix: Sequence[int]) -> bool:
        """Write the snapshot of ``prefix`` into sequence ``seq_id`` of
        ``ctx``, which must be empty (``llama_state_seq_set_data``: the
        cells land at positions ``0..len(prefix)-1`` of that sequence's
        stream, exactly as evaluated).

        Returns:
            ``True`` when the sequence now holds ``prefix``; ``False`` when
            there is no snapshot or llama.cpp refused it (the caller empties
            the sequence).
        """
        buffer = self._store.get(tuple(prefix))
        if buffer is None:
            return False
        import llama_cpp

        if not llama_cpp.llama_state_seq_set_data(ctx, buffer, len(buffer), seq_id):
            logger.warning("llama.cpp refused a prefix snapshot (%d tokens)", len(prefix))
            return False
        self._store.move_to_end(tuple(prefix))
        self.restored += 1
        return True
