"""Snapshots of llama.cpp's KV cache for the shared instruction prefixes.

The llama.cpp engine keeps one KV cache. A translation reuses the cached
instructions (system prompt and worked example, every message but the
clinical text) of the request before it, but a self-check in between
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

With a state folder (:meth:`PrefixSnapshots.attach_folder`), each snapshot
is also written to disk, and a prefix missing from memory is read back from
there, so a restarted server restores its instruction prefixes in
milliseconds instead of reading them again (seconds each on two cores). A
file holds the prefix's token ids and llama.cpp's sequence state; the folder
is named by a digest of what makes a state valid (the model file, the
llama-cpp-python version, the context layout), and the token ids are the
prompt version: a changed prompt has other tokens, so other files. Reading
a file back gives the same bytes, so the same cache, as the snapshot it
was written from.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: Snapshots the llama.cpp engine keeps by default (``INFERENCE_PREFIX_SNAPSHOTS``,
#: :class:`inference.factory.EngineConfig`): the default 24 example clusters
#: (clinical ``PROMPT_CLUSTERS``) plus the other instruction sets (the
#: one-example prompt per grade and language, the self-check). About 28 KiB
#: per prefix token for Qwen2.5-1.5B in f16: a cluster prefix of 300-700
#: tokens takes 8-19 MiB, so 32 snapshots take at most about 0.6 GiB.
DEFAULT_PREFIX_SNAPSHOTS = 32
#: A state file starts with this, then the token count (uint32), the token
#: ids (int32 each), then llama.cpp's sequence state bytes.
STATE_FILE_MAGIC = b"CLINPFX1"
#: State files kept on disk per folder, as a multiple of the snapshots kept
#: in memory: the least recently used beyond it are deleted.
STATE_FILES_PER_SNAPSHOT = 2


def state_identity(model_path: str, layout: str) -> str:
    """What a saved prefix state depends on besides its tokens: the model
    file (path, size, modification time), llama-cpp-python's version and the
    context's ``layout`` (sizes and batching: llama.cpp's numbers depend on
    how a prompt is batched).

    Raises:
        OSError: the model file cannot be read.
    """
    import llama_cpp

    stat = os.stat(model_path)
    return (f"model={os.path.realpath(model_path)} size={stat.st_size} mtime_ns={stat.st_mtime_ns} "
            f"llama_cpp={llama_cpp.__version__} {layout}")


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
        self.read_from_disk = 0  #: snapshots read from the state folder
        self.folder: Path | None = None

    def attach_folder(self, root: Path, identity: str) -> Path:
        """Keep the snapshots on disk too, in ``root``/<digest of
        ``identity``>/ (created), and read missing ones back from there.

        Args:
            root: the state folder (``INFERENCE_PREFIX_STATE_DIR``).
            identity: everything a saved state depends on besides its
                tokens (model file, llama-cpp-python version, context
                layout); states written under another identity are never read.

        Returns:
            The folder of this identity.

        Raises:
            OSError: the folder cannot be created.
        """
        folder = Path(root) / hashlib.sha256(identity.encode()).hexdigest()[:16]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "identity.txt").write_text(identity + "\n")
        self.folder = folder
        return folder

    def on_disk(self) -> int:
        """State files in the attached folder (0 without one)."""
        return len(list(self.folder.glob("*.state"))) if self.folder else 0

    def _path(self, key: tuple[int, ...]) -> Path:
        digest = hashlib.sha256(struct.pack(f"<{len(key)}i", *key)).hexdigest()[:32]
        return self.folder / f"{digest}.state"

    def _write(self, key: tuple[int, ...], buffer: ctypes.Array) -> None:
        """Write one state file (atomically: a reader never sees half of
        one), then drop the least recently used beyond the folder's cap. A
        failed write is logged and the snapshot stays in memory only."""
        path = self._path(key)
        if path.exists():
            return
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            with open(partial, "wb") as file:
                file.write(STATE_FILE_MAGIC + struct.pack("<I", len(key)) + struct.pack(f"<{len(key)}i", *key))
                file.write(memoryview(buffer))
            os.replace(partial, path)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            logger.warning("prefix state not written to disk: %s", type(exc).__name__)
            return
        files = sorted(self.folder.glob("*.state"), key=lambda f: f.stat().st_mtime_ns)
        for stale in files[:max(0, len(files) - STATE_FILES_PER_SNAPSHOT * max(1, self.capacity))]:
            stale.unlink(missing_ok=True)

    def _read(self, key: tuple[int, ...]) -> ctypes.Array | None:
        """The state of ``key`` from its file, or ``None`` (no file, or one
        that does not hold exactly these tokens: then it is deleted)."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        header = len(STATE_FILE_MAGIC) + 4 + 4 * len(key)
        valid = (data.startswith(STATE_FILE_MAGIC) and len(data) > header
                 and struct.unpack_from("<I", data, len(STATE_FILE_MAGIC))[0] == len(key)
                 and struct.unpack_from(f"<{len(key)}i", data, len(STATE_FILE_MAGIC) + 4) == key)
        if not valid:
            logger.warning("prefix state file %s does not match its prefix: deleted", path.name)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recently used: pruned last
        self.read_from_disk += 1
        return (ctypes.c_uint8 * (len(data) - header)).from_buffer_copy(data, header)

    def _buffer(self, prefix: Sequence[int]) -> ctypes.Array | None:
        """The snapshot of ``prefix``: from memory, else from the state
        folder (then kept in memory too), else ``None``."""
        key = tuple(prefix)
        buffer = self._store.get(key)
        if buffer is None and self.folder is not None and self.capacity:
            buffer = self._read(key)
            if buffer is not None:
                self._keep(key, buffer)
        return buffer

    def _keep(self, key: tuple[int, ...], buffer: ctypes.Array) -> None:
        self._store[key] = buffer
        self._store.move_to_end(key)
        while len(self._store) > self.capacity:
            self._store.popitem(last=False)

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
        self._keep(key, buffer)
        if self.folder is not None:
            self._write(key, buffer)

    def restore(self, llm, prefix: Sequence[int]) -> bool:
        """Replace ``llm``'s cache by the snapshot of ``prefix``.

        Returns:
            ``True`` when the cache now holds ``prefix`` (``llm.n_tokens ==
            len(prefix)``); ``False`` when there is no snapshot or llama.cpp
            refused it (the cache is then empty, ``n_tokens`` 0).
        """
        if self._buffer(prefix) is None:
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
        buffer = self._buffer(prefix)
        if buffer is None:
            return False
        import llama_cpp

        if not llama_cpp.llama_state_seq_set_data(ctx, buffer, len(buffer), seq_id):
            logger.warning("llama.cpp refused a prefix snapshot (%d tokens): dropped", len(prefix))
            self._store.pop(tuple(prefix), None)
            if self.folder is not None:
                self._path(tuple(prefix)).unlink(missing_ok=True)
            return False
        self._store.move_to_end(tuple(prefix))
        self.restored += 1
        return True
