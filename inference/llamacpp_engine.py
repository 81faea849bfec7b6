"""llama.cpp engine: the embedded CPU default (llama-cpp-python, GGUF).

With ``max_batch > 1`` (``ENGINE_MAX_BATCH``) requests are decoded together
by continuous batching through llama.cpp's batch API: see
:mod:`inference.llamacpp_batch`, which keeps the priorities and preemption
described below. What follows describes the serial engine
(``max_batch == 1``).

A ``llama_cpp.Llama`` object is not thread safe and decodes one sequence at a
time, so this engine serialises every request through a single worker
thread: requests run one after another and the time a request waits for that
thread is its queue wait. Requests are never batched; concurrent callers are
queued, not run in parallel.

Two priorities (``GenerationParams.background``):

* interactive requests (the default) run in arrival order (FIFO), before
  every queued background request;
* a background request (the model's own check, the prefix warm-up) runs only when no interactive
  request is queued, and one that is running when an interactive request
  arrives is stopped at its next token, exactly like an abort: its stream
  raises :class:`~inference.base.EnginePreempted`. It is not requeued: its
  partial output is of no use, a restart would evaluate its prompt again
  and could be stopped again by the next clinician, and its caller has a
  fallback (a check that did not run leaves the gate to the confidence). So an
  interactive request waits at most for the running background request's
  current step (one token, or its prompt evaluation if it is still in it),
  never for the rest of its generation.

Log-probabilities come from our own greedy decode loop over ``Llama.eval``
and the last row of logits (log-softmax of the sampled token). The library's
built-in logprobs need ``logits_all=True``, which keeps every row of logits
and cuts decode speed by about a third on this machine.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from inference.base import (
    Delta,
    Engine,
    EngineDead,
    EngineError,
    EngineHealth,
    EngineInfo,
    EnginePreempted,
    GenerationParams,
)
from inference.llamacpp_batch import INVARIANT_MAX_BATCH, BatchScheduler, log_softmax_at
from inference.llamacpp_prefix import DEFAULT_PREFIX_SNAPSHOTS, PrefixSnapshots, state_identity

logger = logging.getLogger(__name__)

_DONE = object()

#: Requests decoded together by default (``ENGINE_MAX_BATCH``, read by
#: :class:`inference.factory.EngineConfig`; 1 = the serial engine). 3 is
#: :data:`inference.llamacpp_batch.INVARIANT_MAX_BATCH`: prompts are read in
#: steps of their own and a decode step has at most 3 rows, which llama.cpp
#: computes row by row, so every text and logprob is the serial engine's,
#: bit for bit, whatever runs beside it. On the default model
#: (docs/decisions/batch-size.md):
#: 50 of 50 laymaker-dev texts equal, mean logprob difference 0.0; TTFT P95
#: at 8 clients 8.0 s against 12.4 s for the serial engine, output tokens/s
#: 1.22x; one client within 8 %; RSS +243 MiB. ``max_batch`` 8 waits less
#: under load (2.9 s) but its texts differ on 7 of 50 sentences.
DEFAULT_MAX_BATCH = 3
#: Prompt tokens read per decode step while others generate: 64 holds every
#: laymaker-dev sentence's tail (longest 49 tokens after the instructions)
#: in one chunk, read whole as the serial engine reads it (alone, 32 and 64
#: both gave the serial engine's text on 50 of 50 sentences,
#: docs/decisions/determinism.md).
DEFAULT_PREFILL_CHUNK = 64


@dataclass
class _Job:
    request_id: str
    messages: Sequence[dict[str, str]]
    params: GenerationParams
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Set (under the engine's lock) on a running background job when an
    #: interactive job arrives; the worker stops it at its next token.
    preempted: threading.Event = field(default_factory=threading.Event)
    #: The request's own generator (``params.seed``), else ``None``: the engine's.
    rng: np.random.Generator | None = None

    def emit(self, item: object) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the caller's event loop is closed: nobody listens
            pass

    def emit_done(self) -> None:
        self.emit(_DONE)


_log_softmax_at = log_softmax_at


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for old, new in zip(a, b):
        if old != new:
            break
        n += 1
    return n


class LlamaCppEngine(Engine):
    """Streams from a GGUF model with llama-cpp-python, one request at a time.

    Args:
        model_path: path to a ``.gguf`` file.
        n_ctx: context window (tokens) for prompt plus output.
        n_threads: CPU threads for decoding; default all cores.
        precision: label recorded on outputs (the GGUF quantization, e.g.
            ``"q4_k_m"``).
        seed: RNG seed used when ``temperature > 0``.
        max_queue: most requests queued or running (see
            :meth:`Engine.admit`); ``None`` = unbounded.
        prefix_snapshots: KV-cache snapshots of instruction prefixes kept
            (:mod:`inference.llamacpp_prefix`), so a translation after a
            self-check, or after a sentence of another example cluster,
            does not read its instructions again; the batched engine writes
            them into each new request's sequence the same way. 0 = none.
            Default :data:`inference.llamacpp_prefix.DEFAULT_PREFIX_SNAPSHOTS`
            (memory: see there).
        prefix_state_dir: folder where the snapshots are also written, and
            read back from after a restart (:meth:`PrefixSnapshots.attach_folder`);
            ``None`` = memory only.
        max_batch: requests decoded together (continuous batching,
            :mod:`inference.llamacpp_batch`); 1 = one at a time (the serial
            engine below); default :data:`DEFAULT_MAX_BATCH`.
        prefill_chunk: batched above :data:`~inference.llamacpp_batch.INVARIANT_MAX_BATCH`:
            most prompt tokens read per decode step. Up to that batch size
            prompts are read in steps of their own and the texts are the
            serial engine's (:mod:`inference.llamacpp_batch`).
            The batched KV cache holds ``n_ctx`` cells for each of
            ``max_batch`` sequences (Qwen2.5-1.5B: 28 KiB per cell, so
            0.9 GiB for 8 x 4096), besides the prefix snapshots.

    Not thread safe by itself: all model access happens on the engine's one
    worker thread. Abort, and preemption of a background request by an
    interactive one (see the module docstring), take effect at the next
    token; a prompt already being evaluated finishes its evaluation first.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        precision: str = "gguf",
        seed: int = 0,
        max_queue: int | None = None,
        prefix_snapshots: int = DEFAULT_PREFIX_SNAPSHOTS,
        max_batch: int | None = None,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        prefix_state_dir: str | os.PathLike | None = None,
    ) -> None:
        self.max_queue = max_queue
        self.prefix_state_dir = prefix_state_dir
        self.max_batch = max(1, max_batch or DEFAULT_MAX_BATCH)
        self.parallelism = self.max_batch
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.info = EngineInfo(
            engine="llamacpp",
            model=os.path.basename(model_path),
            precision=precision,
            device="cpu",
            settings={"n_ctx": n_ctx, "n_threads": self.n_threads, "batching": self.max_batch > 1,
                      "max_batch": self.max_batch, "prefix_snapshots": prefix_snapshots},
        )
        self.prefix_snapshots = PrefixSnapshots(prefix_snapshots)
        self._batcher: BatchScheduler | None = None
        if self.max_batch > 1:
            prompts_alone = self.max_batch <= INVARIANT_MAX_BATCH
            self._batcher = BatchScheduler(self, max_batch=self.max_batch, seq_tokens=n_ctx,
                                           prefill_chunk=prefill_chunk, prompts_alone=prompts_alone)
            self.info.settings.update(prefill_chunk=prefill_chunk, prompts_alone=prompts_alone)
        #: Instruction prefixes read (serial: evaluated, not restored).
        self._prefix_evaluations = 0
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="llamacpp"
        )
        self._rng = np.random.default_rng(seed)
        self._llm = None
        self._formatter = None
        self._jobs: dict[str, _Job] = {}
        # Jobs waiting for the worker thread, by priority (key: background),
        # and the job it runs; guarded by _lock (event loop and worker).
        self._lock = threading.Lock()
        self._waiting: dict[bool, collections.deque[_Job]] = {
            False: collections.deque(), True: collections.deque()}
        self._running: _Job | None = None
        self._instruction_tokens: dict[str, list[int]] = {}
        #: Set when llama.cpp failed inside a decode (serial engine); the
        #: engine then reports itself dead (:meth:`health`).
        self._dead_reason: str | None = None

    # -- lifecycle ---------------------------------------------------------
    async def _load(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load_blocking)

    def _load_blocking(self) -> None:
        if not os.path.isfile(self.model_path):
            raise EngineError(f"model file not found: {self.model_path}")
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llm = Llama(
            model_path=self.model_path,
            # Batched: this context only tokenizes; the batch has its own.
            n_ctx=self.n_ctx if self._batcher is None else 256,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            logits_all=False,
            verbose=False,
        )
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise EngineError("the GGUF file carries no chat template")
        eos_id, bos_id = llm.token_eos(), llm.token_bos()
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llm._model.token_get_text(eos_id) if eos_id != -1 else "",
            bos_token=llm._model.token_get_text(bos_id) if bos_id != -1 else "",
        )
        self._llm = llm
        if self._batcher is not None:
            self._batcher.load()
        if self.prefix_state_dir and self.prefix_snapshots.capacity:
            try:
                folder = self.prefix_snapshots.attach_folder(self.prefix_state_dir, self._state_identity(llm))
            except OSError as exc:
                logger.warning("prefix states kept in memory only: %s", exc)
            else:
                logger.info("prefix states on disk: %d in %s", self.prefix_snapshots.on_disk(), folder)

    def _state_identity(self, llm) -> str:
        layout = (f"n_ctx={self.n_ctx} n_batch={llm.n_batch} n_threads={self.n_threads} "
                  f"max_batch={self.max_batch}")
        if self._batcher is not None:
            layout += f" batch_n_batch={self._batcher.n_batch}"
        return state_identity(self.model_path, layout)

    async def shutdown(self) -> None:
        await super().shutdown()
        for job in self._jobs.values():
            job.cancelled.set()
        loop = asyncio.get_running_loop()
        if getattr(self._executor, "_shutdown", False):  # a dead worker: free the model here
            await asyncio.to_thread(self._close)
            return
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()
        if self._llm is not None:
            self._llm.close()
            self._llm = None

    def health(self) -> EngineHealth:
        """``dead`` when the engine can no longer decode: llama.cpp returned
        an error inside a decode (``llama_decode`` failed, so the context's
        KV cache is in an unknown state), or the thread that decodes takes
        no more work (the serial engine's executor was shut down, or the
        batched engine's step thread ended). Not seen here: a native crash
        inside llama.cpp, which ends the whole process (its supervisor
        restarts it)."""
        if self._dead_reason is not None:
            return EngineHealth("dead", self._dead_reason)
        if self._loaded and getattr(self._executor, "_shutdown", False):
            return EngineHealth("dead", "llama.cpp worker thread stopped")
        if self._loaded and self._batcher is not None and not self._batcher.running:
            return EngineHealth("dead", "llama.cpp batch thread stopped")
        return super().health()

    def mark_dead(self, reason: str) -> EngineDead:
        """Record that llama.cpp failed inside a decode: :meth:`health`
        answers ``dead`` from now on and every later request is refused.

        Returns:
            the :class:`EngineDead` to raise to the request that saw it.
        """
        self._dead_reason = reason
        logger.error("llama.cpp engine is dead: %s", reason)
        return EngineDead(reason)

    def _eval(self, llm, tokens: Sequence[int]) -> None:
        """``llm.eval(tokens)`` on the worker thread; a failure inside
        llama.cpp marks the engine dead.

        Raises:
            EngineDead: ``llama_decode`` (or the library around it) failed.
        """
        try:
            llm.eval(tokens)
        except Exception as exc:  # noqa: BLE001 - any library failure leaves the context suspect
            raise self.mark_dead(f"{type(exc).__name__} inside llama.cpp decode") from exc

    # -- generation --------------------------------------------------------
    async def generate(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        params: GenerationParams,
    ) -> AsyncIterator[Delta]:
        """See :meth:`Engine.generate`.

        Raises:
            EnginePreempted: ``params.background`` and an interactive request
                arrived before this one finished (deltas already yielded
                stay, without a ``finish_reason``).
            EngineError: duplicate ``request_id``, prompt plus
                ``max_tokens`` longer than ``n_ctx``, or a llama.cpp failure.
        """
        await self.start()
        if not (health := self.health()).alive:
            raise EngineDead(health.reason)
        if request_id in self._jobs:
            raise EngineError(f"duplicate request id {request_id}")
        job = _Job(request_id, messages, params, asyncio.get_running_loop(), asyncio.Queue(),
                   rng=None if params.seed is None else np.random.default_rng(params.seed))
        self._admission_claim(params.background)
        self._jobs[request_id] = job
        if self._batcher is not None:
            async for delta in self._stream_batched(job):
                yield delta
            return
        self._enqueue(job)
        try:
            # One worker call per queued job; each takes the most urgent job.
            future = job.loop.run_in_executor(self._executor, self._run_next)
        except BaseException:
            self._dequeue(job)
            self._jobs.pop(request_id, None)
            raise
        try:
            while True:
                item = await job.queue.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancelled.set()
            self._jobs.pop(request_id, None)
            # Retrieve the worker's result so no exception goes unobserved.
            future.add_done_callback(lambda f: f.exception())

    async def _stream_batched(self, job: _Job) -> AsyncIterator[Delta]:
        """The deltas of ``job`` from the batch scheduler; an abort ends the
        stream at once (deltas already decoded are dropped)."""
        try:
            self._batcher.submit(job)
            while not job.cancelled.is_set():
                item = await job.queue.get()
                if item is _DONE or job.cancelled.is_set():
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancelled.set()
            self._jobs.pop(job.request_id, None)
            self._batcher.wake()

    async def abort(self, request_id: str) -> None:
        job = self._jobs.get(request_id)
        if job is not None:
            job.cancelled.set()
            job.queue.put_nowait(_DONE)  # the stream ends now, not at the next step
            if self._batcher is not None:
                self._batcher.wake()

    @property
    def prefix_evaluations(self) -> int:
        """Instruction prefixes read so far (not copied, not restored)."""
        if self._batcher is not None:
            return self._batcher.prefix_evaluations
        return self._prefix_evaluations

    @property
    def prompt_tokens_evaluated(self) -> int | None:
        """Prompt tokens run through the model (batched engine only)."""
        return self._batcher.prompt_tokens_evaluated if self._batcher is not None else None

    def _prompt_tokens(self, job: _Job) -> tuple[list[int], int]:
        """``(tokens, instructions)``: the prompt of ``job`` and the length of
        its reusable instruction prefix (at most all tokens but the last).

        Raises:
            EngineError: prompt plus ``max_tokens`` longer than ``n_ctx``.
        """
        prompt = self._formatter(messages=list(job.messages)).prompt
        tokens = self._llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        if len(tokens) + job.params.max_tokens > self.n_ctx:
            raise EngineError(
                f"prompt of {len(tokens)} tokens plus {job.params.max_tokens} output "
                f"tokens exceeds the context window of {self.n_ctx}"
            )
        return tokens, min(self._instructions_length(job.messages, tokens), len(tokens) - 1)

    def queue_depth(self) -> int:
        """Requests waiting for the worker thread plus the one it runs
        (background ones included)."""
        return len(self._jobs)

    def interactive_queue_depth(self) -> int:
        """Interactive requests waiting or running: the only ones a new
        translation waits for (background ones go after it, and a running
        one stops at its next token)."""
        return sum(not job.params.background for job in list(self._jobs.values()))

    def _enqueue(self, job: _Job) -> None:
        """Queue ``job`` by priority; an interactive job stops a running
        background one (at its next token)."""
        with self._lock:
            self._waiting[job.params.background].append(job)
            running = self._running
            if not job.params.background and running is not None and running.params.background:
                running.preempted.set()

    def _dequeue(self, job: _Job) -> None:
        with self._lock:
            try:
                self._waiting[job.params.background].remove(job)
            except ValueError:
                pass

    def _run_next(self) -> None:
        """Runs on the worker thread: take the oldest interactive job, else
        the oldest background one, and run it."""
        with self._lock:
            waiting = self._waiting[False] or self._waiting[True]
            if not waiting:  # cannot happen: one call per queued job
                return
            job = waiting.popleft()
            self._running = job
        try:
            self._run(job)
        finally:
            with self._lock:
                self._running = None

    def _run(self, job: _Job) -> None:
        """Runs on the worker thread: decode ``job`` and emit its deltas."""
        started = time.perf_counter()
        try:
            if not job.cancelled.is_set():
                self._decode(job)
                self.record_request_seconds(time.perf_counter() - started)
        except EnginePreempted as exc:
            logger.debug("background request preempted request_id=%s tokens=%d", job.request_id, exc.tokens)
            job.emit(exc)
        except EngineError as exc:
            job.emit(exc)
        except Exception as exc:  # noqa: BLE001 - surfaced to the caller
            logger.exception("llama.cpp generation failed request_id=%s", job.request_id)
            job.emit(EngineError(f"{type(exc).__name__} in llama.cpp generation"))
        finally:
            job.emit(_DONE)

    def _decode(self, job: _Job) -> None:
        import llama_cpp

        admitted_ns = time.monotonic_ns()
        llm = self._llm
        if llm is None:
            raise EngineError("engine is not started")
        tokens, instructions = self._prompt_tokens(job)
        if job.preempted.is_set():  # before evaluating a prompt in vain
            raise EnginePreempted(job.request_id, 0)
        # Reuse the KV cache of the shared instructions (every message but the
        # last), never more: llama.cpp is not batch-invariant, so a prompt
        # tail evaluated token by token can flip a near-tie greedy choice
        # that the cold, batched evaluation made (seen on 2 of 4
        # laymaker-dev sentences when all but the last token were reused).
        # The prefix is always evaluated on its own, then the rest, so a
        # cold cache, a warm one and a restored snapshot give the same
        # numbers; a prefix that is not cached comes back from a snapshot
        # when one exists (a self-check in between evicted it). A prefix
        # cached only in part (another cluster's instructions share the
        # system message) is read again from position 0: llama.cpp rounds
        # the same tokens differently in decode calls that start elsewhere,
        # so reusing the part would make a prefix's numbers, and the texts,
        # depend on which request came before (7 of 50 laymaker-dev texts,
        # docs/decisions/determinism.md), and differ from the batched
        # engine's, which reads every prefix from position 0.
        cached = llm.input_ids[: llm.n_tokens]
        shared = min(_common_prefix(cached, tokens), instructions)
        if shared < instructions:
            shared = instructions if self.prefix_snapshots.restore(llm, tokens[:instructions]) else 0
        llm.n_tokens = shared
        if shared < instructions:
            self._prefix_evaluations += 1
            self._eval(llm, tokens[shared:instructions])
            self.prefix_snapshots.save(llm, tokens[:instructions])
        self._eval(llm, tokens[llm.n_tokens :])

        vocab = llm._model.vocab
        n_vocab = llm.n_vocab()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        first = True
        params = job.params
        for produced in range(params.max_tokens):
            if job.cancelled.is_set():
                return
            if job.preempted.is_set():
                raise EnginePreempted(job.request_id, produced)
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)
            )
            token = self._sample(logits, params.temperature, job.rng)
            if params.ignore_eos:
                while llama_cpp.llama_vocab_is_eog(vocab, token):
                    logits = logits.copy()
                    logits[token] = -np.inf
                    token = self._sample(logits, params.temperature, job.rng)
            logprob = _log_softmax_at(logits, token)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                tail = decoder.decode(b"", final=True)
                job.emit(Delta(text=tail, finish_reason="stop",
                               prompt_tokens=len(tokens) if first else None,
                               admitted_ns=admitted_ns if first else None))
                return
            text = decoder.decode(llm.detokenize([token]))
            last = produced == params.max_tokens - 1
            if last:
                text += decoder.decode(b"", final=True)
            job.emit(Delta(
                text=text,
                token_logprobs=(logprob,),
                prompt_tokens=len(tokens) if first else None,
                admitted_ns=admitted_ns if first else None,
                finish_reason="length" if last else None,
            ))
            first = False
            if not last:
                self._eval(llm, [token])

    def _instructions_length(self, messages: Sequence[dict[str, str]], tokens: list[int]) -> int:
        """Tokens of ``tokens`` shared with the prompt rendered without its
        last message (the clinical text): the reusable prefix. Memoised per
        instruction set, since every request repeats the same ones."""
        key = repr(list(messages[:-1]))
        if key not in self._instruction_tokens:
            prompt = self._formatter(messages=list(messages[:-1])).prompt
            self._instruction_tokens[key] = self._llm.tokenize(
                prompt.encode("utf-8"), add_bos=True, special=True
            )
            if len(self._instruction_tokens) > 64:  # bounded: drop the oldest
                self._instruction_tokens.pop(next(iter(self._instruction_tokens)))
        return _common_prefix(self._instruction_tokens[key], tokens)

    def _sample(self, logits: np.ndarray, temperature: float, rng: np.random.Generator | None = None) -> int:
        """The next token: greedy at temperature 0, else drawn from the
        tempered softmax with ``rng`` (a request's own, ``params.seed``) or
        the engine's shared generator."""
        if temperature <= 0:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / temperature
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        return int((rng or self._rng).choice(len(probs), p=probs))
