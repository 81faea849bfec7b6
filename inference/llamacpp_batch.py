"""Continuous batching for the llama.cpp engine (llama.cpp's own batch API).

One llama.cpp context with ``n_seq_max = max_batch`` sequences serves every
running request. Each request gets a sequence id; one worker
thread runs decode steps, and each step is one ``llama_decode`` of one
``llama_batch`` holding

* one token for every sequence that is generating (the token it sampled at
  the previous step), and
* whole chunks of the prompt of sequences still being read, at most
  ``prefill_chunk`` tokens per step in all, oldest request first, so a long
  prompt delays the others' next token by one chunk, never by its whole
  length. A sequence's chunks always start at the same offsets (multiples
  of ``prefill_chunk`` after its instructions), so its text does not depend
  on when its neighbours arrived.

With ``prompts_alone`` (the engine's choice for ``max_batch`` up to
:data:`INVARIANT_MAX_BATCH`) a step is instead either one prompt's next
chunk of :data:`SERIAL_N_BATCH` tokens, read on its own exactly as the
serial engine reads it, or one token of every generating sequence, never
both; prompt steps and decode steps take turns while both are due. A
request's greedy text is then the serial engine's whatever runs beside it
(below).

Requests join and leave between steps (continuous batching). Each keeps its
own greedy (or temperature) sampling from its own row of logits, its
log-probabilities, end-of-sequence stop, token limit and cancellation.

Each sequence has its own KV stream (``kv_unified = False``, ``seq_tokens``
cells each): its cells are laid out exactly as when it runs alone, so the
attention sums run in the same order (with one unified cache, where
sequences' cells interleave, 9 of 16 SmolLM2 outputs differed from the
serial engine's within 40 tokens, and the step was slower). On SmolLM2
(Q4_1) a request's greedy output is then the one-at-a-time engine's,
whatever else is in the batch (tests/inference/test_llamacpp_batching.py);
on the default model (Q4_K_M) only on 84-86 % of laymaker-dev sentences
(docs/decisions/batch-size.md): llama.cpp's
CPU arithmetic for a row depends on how many rows the step has (from 4 rows
with its repacked Q4_K weights, from 8 without) and on whether a prompt is
read whole or in chunks (docs/decisions/batch-size.md), which flips near-tie tokens. Up to 3
rows, each row of a decode step is computed as if it were alone (the
repacked kernels take rows 4 at a time and a smaller step row by row), so
``prompts_alone`` with at most 3 sequences keeps the serial engine's
numbers bit for bit.

The shared instructions (every message but the clinical text: the system
message and, for the product's cluster prompt, one of 24 example clusters'
worked examples) are evaluated once, on their own (as the serial engine
reads them), into the sequence of the first request that needs them, and
kept as a KV snapshot of that sequence (``llama_state_seq_get_data``: the
K/V rows of those tokens only, about 28 KiB per token on Qwen2.5-1.5B) in
the engine's :class:`~inference.llamacpp_prefix.PrefixSnapshots`, the same
least-recently-used store the serial engine keeps
(``INFERENCE_PREFIX_SNAPSHOTS``, 32: the 24 clusters and the other
instruction sets). Each later request with the same instructions gets them
written into its own, empty sequence (``llama_state_seq_set_data``); a
finished request's sequence is emptied with ``llama_memory_seq_rm``.

Why snapshots and not holder sequences kept in the context: with one KV
stream per sequence, llama.cpp gives every stream the same size (``n_ctx /
n_seq_max`` cells; a per-sequence size does not exist in its API), so each
holder sequence would cost ``seq_tokens`` cells (4096 x 28 KiB = 112 MiB on
the default model) for a prefix of 300-700 tokens: 32 holders 3.5 GiB. A
unified cache is one flag for the whole context (``kv_unified``), not per
sequence, and changes the requests' outputs (above). And copying a holder
between streams (``llama_memory_seq_cp``) copies the whole source stream,
``seq_tokens`` cells, where a snapshot writes only the prefix's cells.

Background requests (``GenerationParams.background``: the model's own
check, the prefix warm-up)
keep the serial engine's contract: they join the batch only while no
interactive request is running or waiting, and an interactive arrival stops
every running background request at the next step (its stream raises
:class:`~inference.base.EnginePreempted`). On two cores every extra row in a
step costs the clinicians' time per token, so background work is kept out of
their batches rather than batched alongside at a lower priority.
"""

from __future__ import annotations

import codecs
import collections
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from inference.base import Delta, EngineDead, EngineError, EnginePreempted

logger = logging.getLogger(__name__)

#: Most sequences whose decode steps llama.cpp computes row by row on the
#: CPU with its repacked Q4_K weights (the default model's), so that each
#: row's logits equal those of the same request decoded alone, bit for bit
#: (docs/decisions/batch-size.md:
#: exact at 1-3 rows, not from 4; without repacking up to 7).
INVARIANT_MAX_BATCH = 3
#: Tokens per ``llama_decode`` when the serial engine reads a prompt
#: (llama-cpp-python's ``Llama.eval`` splits at its ``n_batch``, default 512);
#: ``prompts_alone`` reads a prompt's tail at the same offsets.
SERIAL_N_BATCH = 512


def log_softmax_at(logits: np.ndarray, index: int) -> float:
    """``log(softmax(logits)[index])`` computed stably (float64)."""
    peak = float(logits.max())
    log_norm = peak + float(np.log(np.exp(logits.astype(np.float64) - peak).sum()))
    return float(logits[index]) - log_norm


@dataclass
class _Seq:
    """A request in the running batch."""

    job: object  # inference.llamacpp_engine._Job
    seq_id: int
    tokens: list[int]
    pos: int  # tokens of the prompt (then of the output) in the KV cache
    admitted_ns: int
    started: float
    produced: int = 0
    pending: int | None = None  # sampled token to feed at the next step
    first: bool = True
    decoder: object = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))


class BatchScheduler:
    """Owns the batched llama.cpp context and its worker thread.

    Args:
        engine: the :class:`~inference.llamacpp_engine.LlamaCppEngine`
            (its ``_llm`` gives the model, tokenizer and chat template; its
            ``prefix_snapshots`` store keeps the instruction prefixes:
            capacity 0 = each request reads its own instructions).
        max_batch: most requests decoded together (``n_seq_max`` of the
            context).
        seq_tokens: KV-cache cells of each sequence (its own stream): the
            longest prompt plus output. The context's KV cache holds
            ``max_batch x seq_tokens`` cells (Qwen2.5-1.5B: 28 KiB each).
        prefill_chunk: most prompt tokens read per decode step (mixed
            steps only).
        prompts_alone: read each prompt in steps of its own, in chunks of
            :data:`SERIAL_N_BATCH` from the end of its instructions, and
            decode the generating sequences in the other steps (no step
            mixes the two). With ``max_batch`` at most
            :data:`INVARIANT_MAX_BATCH` the texts are the serial engine's.
    """

    def __init__(self, engine, *, max_batch: int, seq_tokens: int, prefill_chunk: int,
                 prompts_alone: bool = False) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.seq_tokens = seq_tokens
        self.prefill_chunk = max(1, prefill_chunk)
        self.prompts_alone = prompts_alone
        self._prompt_turn = True  # prompts_alone: a prompt step may go next
        self.snapshots = engine.prefix_snapshots
        self.n_batch = max(SERIAL_N_BATCH, max_batch + self.prefill_chunk)
        self._cond = threading.Condition()
        self._waiting: dict[bool, collections.deque] = {False: collections.deque(), True: collections.deque()}
        self._active: list[_Seq] = []
        self._free_seqs = list(range(max_batch))
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._ctx = None
        self._mem = None
        self._batch = None
        #: Prompt tokens evaluated (instructions and tails), for tests and
        #: benchmarks; ``prefix_evaluations`` counts instruction prefixes read.
        self.prompt_tokens_evaluated = 0
        self.prefix_evaluations = 0
        self.steps = 0
        self.max_rows = 0  #: most sequences ever decoded in one step

    # -- lifecycle (engine's executor thread) ---------------------------------
    def load(self) -> None:
        import llama_cpp

        llm = self.engine._llm
        # The library's defaults, as the serial engine uses (a copy).
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        # One KV stream per sequence (not unified), each of seq_tokens cells.
        params.n_ctx = self.seq_tokens * self.max_batch
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        params.n_seq_max = self.max_batch
        params.kv_unified = False
        params.n_threads = self.engine.n_threads
        params.n_threads_batch = self.engine.n_threads
        ctx = llama_cpp.llama_init_from_model(llm.model, params)
        if not ctx:
            raise EngineError("llama.cpp could not create the batched context")
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._thread = threading.Thread(target=self._loop, name="llamacpp-batch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        import llama_cpp

        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    @property
    def running(self) -> bool:
        """Whether the step thread runs (False once it ended: closed, or the
        engine died inside a decode)."""
        return self._thread is not None and self._thread.is_alive()

    # -- queue (event loop thread) ------------------------------------------
    def submit(self, job) -> None:
        """Queue ``job``; a job submitted after the step thread ended gets
        :class:`EngineDead` at once."""
        with self._cond:
            if not self._stopping and self.running:
                self._waiting[job.params.background].append(job)
                self._cond.notify_all()
                return
        job.emit(EngineDead(self.engine.health().reason or "llama.cpp batch thread stopped"))
        job.emit_done()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- worker thread ----------------------------------------------------------
    def _loop(self) -> None:
        dead: EngineDead | None = None
        while dead is None:
            with self._cond:
                while not self._stopping and not self._active and not self._waiting[False] \
                        and not self._waiting[True]:
                    self._cond.wait()
                if self._stopping:
                    break
            try:
                self._step()
            except EngineDead as exc:
                # The context's KV cache is in an unknown state: every request,
                # running or waiting, gets the error, and the thread ends (the
                # supervisor builds a fresh engine).
                dead = exc
            except Exception:  # noqa: BLE001 - every running request gets the error
                logger.exception("llama.cpp batched step failed")
                for seq in list(self._active):
                    self._finish(seq, EngineError("llama.cpp batched decoding failed"))
        with self._cond:
            self._stopping = True  # submit() refuses from now on
            waiting = [job for queue in self._waiting.values() for job in queue]
            for queue in self._waiting.values():
                queue.clear()
        for seq in list(self._active):
            self._finish(seq, EngineDead(str(dead)) if dead else None)
        for job in waiting:
            if dead:
                job.emit(EngineDead(str(dead)))
            job.emit_done()

    def _admit(self) -> None:
        """Move waiting jobs into the batch: interactive first (FIFO); a
        background job only when no interactive one runs or waits; an
        interactive one waiting or running stops running background ones."""
        with self._cond:
            interactive = bool(self._waiting[False]) or any(not s.job.params.background for s in self._active)
        if interactive:
            for seq in [s for s in self._active if s.job.params.background]:
                self._finish(seq, EnginePreempted(seq.job.request_id, seq.produced))
        while self._free_seqs:
            with self._cond:
                queue = self._waiting[False] or (None if interactive else self._waiting[True])
                if not queue:
                    return
                job = queue[0]
            if job.cancelled.is_set():
                with self._cond:
                    queue.popleft()
                job.emit_done()
                continue
            try:
                placed = self._place(job)
            except EngineDead:
                raise
            except EngineError as exc:
                with self._cond:
                    queue.popleft()
                job.emit(exc)
                job.emit_done()
                continue
            if not placed:
                return
            with self._cond:
                queue.popleft()

    def _place(self, job) -> bool:
        """Start ``job`` on a free sequence (its prompt fits its stream: the
        engine checked it against ``n_ctx``): its instructions come from
        their snapshot, or are read on their own and kept as one."""
        import llama_cpp

        tokens, instructions = self.engine._prompt_tokens(job)
        seq_id = self._free_seqs.pop(0)
        seq = _Seq(job=job, seq_id=seq_id, tokens=tokens, pos=0,
                   admitted_ns=time.monotonic_ns(), started=time.perf_counter())
        if instructions:
            prefix = tokens[:instructions]
            if not self.snapshots.restore_seq(self._ctx, seq_id, prefix):
                llama_cpp.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
                # Read on their own first (as the serial engine does), then
                # the tail in chunks with the others.
                try:
                    self._decode_alone(seq_id, prefix, 0)
                except BaseException:
                    llama_cpp.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
                    self._free_seqs.append(seq_id)
                    self._free_seqs.sort()
                    raise
                self.snapshots.save_seq(self._ctx, seq_id, prefix)
            seq.pos = instructions
        self._active.append(seq)
        return True

    def _decode_alone(self, seq_id: int, tokens: list[int], start: int) -> None:
        """Evaluate ``tokens`` of one sequence in batches of their own (an
        instruction prefix: read once, like the serial engine reads it)."""
        self.prefix_evaluations += 1
        for at in range(0, len(tokens), self.n_batch):
            chunk = tokens[at:at + self.n_batch]
            rows = [(seq_id, token, start + at + i, False) for i, token in enumerate(chunk)]
            self._decode(rows)

    def _decode(self, rows: list[tuple[int, int, int, bool]], prompt: int | None = None) -> None:
        import llama_cpp

        batch = self._batch
        for i, (seq_id, token, pos, logits) in enumerate(rows):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = logits
        batch.n_tokens = len(rows)
        self.prompt_tokens_evaluated += len(rows) if prompt is None else prompt
        code = llama_cpp.llama_decode(self._ctx, batch)
        if code != 0:
            # As the serial engine (llama-cpp-python's eval raises on any
            # non-zero return): the KV cache may hold part of the batch.
            raise self.engine.mark_dead(f"llama_decode returned {code}")

    def _step(self) -> None:

        for seq in [s for s in self._active if s.job.cancelled.is_set()]:
            self._finish(seq, None)
        self._admit()
        if not self._active:
            return
        if self.prompts_alone and self._prompt_step():
            return
        rows: list[tuple[int, int, int, bool]] = []
        owners: list[_Seq] = []  # the sequence of each row whose logits are read
        decoding = [s for s in self._active if s.pending is not None]
        for seq in decoding:
            rows.append((seq.seq_id, seq.pending, seq.pos, True))
            owners.append(seq)
        # Prompt tails are read in whole chunks of ``prefill_chunk`` tokens
        # counted from the end of the instructions, whatever else runs: a
        # tail split at other boundaries (a budget shared with another
        # arrival) is evaluated in another order, which flips near-tie
        # greedy choices (llama.cpp is not batch-invariant), so a request's
        # text would depend on its neighbours' timing. A chunk that does not
        # fit this step's remaining budget waits for the next step.
        budget = 0 if self.prompts_alone else self.prefill_chunk
        prompt_rows = 0
        for seq in self._active:
            if seq.pending is not None or seq.pos >= len(seq.tokens):
                continue
            take = min(self.prefill_chunk, len(seq.tokens) - seq.pos)
            if take > budget:
                continue
            for i in range(take):
                last = seq.pos + i == len(seq.tokens) - 1
                rows.append((seq.seq_id, seq.tokens[seq.pos + i], seq.pos + i, last))
                if last:
                    owners.append(seq)
            seq.pos += take
            budget -= take
            prompt_rows += take
        self._decode(rows, prompt_rows)
        self.steps += 1
        self.max_rows = max(self.max_rows, len({r[0] for r in rows}))
        for seq in decoding:
            seq.pos += 1
        index = 0
        for i, row in enumerate(rows):
            if not row[3]:
                continue
            seq = owners[index]
            index += 1
            self._advance(seq, self._logits(i))

    def _prompt_step(self) -> bool:
        """``prompts_alone``: read the next chunk of the oldest prompt still
        being read, alone in its step, unless generating sequences are due
        a decode step (prompt and decode steps take turns). Returns whether
        it decoded."""

        reading = [s for s in self._active if s.pending is None and s.pos < len(s.tokens)]
        generating = any(s.pending is not None for s in self._active)
        if not reading or (generating and not self._prompt_turn):
            self._prompt_turn = True
            return False
        self._prompt_turn = False
        seq = reading[0]
        # The serial engine's chunk boundaries: SERIAL_N_BATCH tokens from
        # where its read starts (the end of the instructions, or 0).
        start = seq.pos
        end = min(len(seq.tokens), start + SERIAL_N_BATCH)
        rows = [(seq.seq_id, seq.tokens[p], p, p == len(seq.tokens) - 1) for p in range(start, end)]
        self._decode(rows)
        self.steps += 1
        self.max_rows = max(self.max_rows, 1)
        seq.pos = end
        if end == len(seq.tokens):
            self._advance(seq, self._logits(len(rows) - 1))
        return True

    def _logits(self, row: int) -> np.ndarray:
        """The last step's logits of batch row ``row`` (shape ``(n_vocab,)``,
        a view into llama.cpp's buffer, valid until the next decode)."""
        import llama_cpp

        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, row),
                                     shape=(self.engine._llm.n_vocab(),))

    def _advance(self, seq: _Seq, logits: np.ndarray) -> None:
        """Sample ``seq``'s next token from its row of logits and emit it."""
        import llama_cpp

        engine = self.engine
        job, params = seq.job, seq.job.params
        if job.cancelled.is_set():
            self._finish(seq, None)
            return
        vocab = engine._llm._model.vocab
        token = engine._sample(logits, params.temperature, job.rng)
        if params.ignore_eos:
            while llama_cpp.llama_vocab_is_eog(vocab, token):
                logits = logits.copy()
                logits[token] = -np.inf
                token = engine._sample(logits, params.temperature, job.rng)
        logprob = log_softmax_at(logits, token)
        first = seq.first
        seq.first = False
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            job.emit(Delta(text=seq.decoder.decode(b"", final=True), finish_reason="stop",
                           prompt_tokens=len(seq.tokens) if first else None,
                           admitted_ns=seq.admitted_ns if first else None))
            self._finish(seq, None, completed=True)
            return
        text = seq.decoder.decode(engine._llm.detokenize([token]))
        seq.produced += 1
        last = seq.produced >= params.max_tokens
        if last:
            text += seq.decoder.decode(b"", final=True)
        job.emit(Delta(text=text, token_logprobs=(logprob,),
                       prompt_tokens=len(seq.tokens) if first else None,
                       admitted_ns=seq.admitted_ns if first else None,
                       finish_reason="length" if last else None))
        if last:
            self._finish(seq, None, completed=True)
        else:
            seq.pending = token

    def _finish(self, seq: _Seq, error: BaseException | None, completed: bool = False) -> None:
        import llama_cpp

        if seq not in self._active:
            return
        self._active.remove(seq)
        llama_cpp.llama_memory_seq_rm(self._mem, seq.seq_id, -1, -1)
        self._free_seqs.append(seq.seq_id)
        self._free_seqs.sort()
        if completed:
            self.engine.record_request_seconds(time.perf_counter() - seq.started)
        if isinstance(error, EnginePreempted):
            logger.debug("background request preempted request_id=%s tokens=%d",
                         seq.job.request_id, error.tokens)
        if error is not None:
            seq.job.emit(error)
        seq.job.emit_done()
