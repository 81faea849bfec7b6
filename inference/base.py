"""The one engine interface every backend implements.

An engine turns a chat (a list of ``{"role", "content"}`` messages) into a
stream of :class:`Delta` objects: newly decoded text plus the log-probability
of each sampled token. Engines are created once per process and started
lazily inside the running event loop (``await engine.start()``).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """The engine failed to load or to generate (not a cancellation)."""


class EngineBusy(EngineError):
    """The engine's queue is full: retry after ``retry_after_s`` seconds."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"engine busy; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class EngineDead(EngineError):
    """The engine can serve no request until it is rebuilt: vLLM's
    engine-core process exited (CUDA error, OOM kill: vLLM's
    ``EngineDeadError``), llama.cpp's worker failed inside the library, or
    a rebuild is under way.

    Attributes:
        reason: what died, for logs and ``/readyz`` (never patient text).
        retry_after_s: seconds until the next rebuild attempt is due
            (``None`` when unknown).
    """

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"engine dead: {reason}")
        self.reason = reason
        self.retry_after_s = retry_after_s


class EnginePreempted(EngineError):
    """A background request (``GenerationParams.background``) was stopped
    so that an interactive request could run; nothing is retried.

    Raised from the background request's stream at its next token after an
    interactive request arrived. The deltas already yielded stay valid but
    are incomplete (no ``finish_reason``). Only engines that run one request
    at a time raise it (llama.cpp, and the fake engine when ``serial``);
    batching engines run background work alongside instead.
    """

    def __init__(self, request_id: str, tokens: int) -> None:
        super().__init__(f"background request {request_id} preempted after {tokens} tokens")
        self.request_id = request_id
        self.tokens = tokens


@dataclass(frozen=True, slots=True)
class GenerationParams:
    """Sampling settings for one request.

    Attributes:
        max_tokens: cap on generated tokens (tokens), >= 1.
        temperature: 0.0 means greedy decoding (the product default: the same
            diagnosis gives the same explanation).
        ignore_eos: keep generating until ``max_tokens`` (benchmarks use it
            for fixed output lengths).
        seed: seed of this request's own random generator when
            ``temperature > 0``: the same seed, messages and engine give the
            same sampled text whatever ran before (``None``: the engine's
            shared generator, so a sampled text depends on the order of
            requests). Ignored when greedy.
        background: best-effort work that yields to interactive requests
            (the model's own check of a finished text, the prefix warm-up).
            On an engine that runs
            one request at a time, queued interactive requests go before
            queued background ones, and an interactive request that arrives
            while a background one runs stops it at its next token: that
            stream raises :class:`EnginePreempted`. vLLM schedules it with a
            lower priority instead (see :class:`inference.vllm_engine.VllmEngine`).
            Default ``False``: an interactive request (a clinician waiting
            for the translation).
    """

    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = False
    background: bool = False
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of the streamed output.

    Attributes:
        text: newly decoded text (may be ``""`` when a token ends inside a
            multi-byte character).
        token_logprobs: natural-log probability of each token sampled since
            the previous delta, in order; one entry per token.
        prompt_tokens: prompt length in tokens; set on the first delta only.
        admitted_ns: ``time.monotonic_ns()`` at which the engine began work
            on the request (left its queue); set on the first delta only.
        finish_reason: ``None`` while streaming; ``"stop"`` (end of sequence)
            or ``"length"`` (hit ``max_tokens``) on the last delta.
    """

    text: str
    token_logprobs: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    admitted_ns: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What produced an output, as recorded on every translation.

    Attributes:
        engine: backend name, ``"llamacpp"`` or ``"vllm"`` (or ``"fake"``).
        model: model name or path as configured.
        precision: weights/compute precision, e.g. ``"q4_k_m"``, ``"fp8"``,
            ``"fp32"``.
        device: ``"cpu"`` or ``"cuda"``.
        settings: extra engine settings worth reporting (threads, context).
    """

    engine: str
    model: str
    precision: str
    device: str
    settings: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """An engine's answer to "can you serve?" (:meth:`Engine.health`).

    Attributes:
        state: ``"ready"`` (loaded and alive), ``"not_loaded"`` (never
            started, or shut down) or ``"dead"`` (must be rebuilt).
        reason: for ``"dead"``, what died (e.g. ``"EngineCore exited with
            code -9"``); PHI-free, shown on ``/readyz``.
    """

    state: str
    reason: str = ""

    @property
    def alive(self) -> bool:
        return self.state == "ready"


READY = EngineHealth("ready")
NOT_LOADED = EngineHealth("not_loaded")


_ADMISSION_LOCK = threading.Lock()


@dataclass(eq=False)
class Admission:
    """A place in an engine's queue reserved by :meth:`Engine.admit`.

    The next :meth:`Engine.generate` of the same priority takes it over; a
    caller that will not start its request after all can :meth:`release`
    it at once (else it lapses after ``Engine.admission_ttl_s``).
    """

    engine: "Engine"
    background: bool
    at: float
    counted: bool = True

    def release(self) -> None:
        """Give the place back (idempotent; no-op once taken over)."""
        with _ADMISSION_LOCK:
            if not self.counted:
                return
            self.counted = False
            reserved = self.engine.__dict__.get("_admissions", [])
            if self in reserved:
                reserved.remove(self)


class Engine(abc.ABC):
    """A text-generation backend that streams deltas with logprobs.

    Implementations must be safe to call from many coroutines on one event
    loop at once: backends that can batch run requests concurrently, the
    others queue them (and say so in their docstring).
    """

    info: EngineInfo
    #: Most requests queued or running at once; ``None`` = unbounded.
    max_queue: int | None = None
    #: Requests the backend runs at the same time (1 = strictly one by one).
    parallelism: int = 1
    _loaded: bool = False
    _start_lock: asyncio.Lock | None = None
    _request_s_ewma: float = 2.0
    #: Seconds a place reserved by :meth:`admit` is held for a request that
    #: has not started yet.
    admission_ttl_s: float = 15.0

    def queue_depth(self) -> int:
        """Requests queued or running now (the default engine keeps none)."""
        return 0

    def interactive_queue_depth(self) -> int:
        """Requests queued or running now that a new interactive request
        waits for. Engines that run interactive requests before background
        ones (and stop a running background one for them) count only the
        interactive ones; by default, every request counts."""
        return self.queue_depth()

    def record_request_seconds(self, seconds: float) -> None:
        """Feed one request's duration (s) into the wait estimate
        (exponentially weighted moving average, weight 0.2)."""
        self._request_s_ewma = 0.8 * self._request_s_ewma + 0.2 * seconds

    def _depth_for(self, background: bool) -> int:
        return self.queue_depth() if background else self.interactive_queue_depth()

    def retry_after_s(self, *, background: bool = False) -> int:
        """Estimated seconds until a slot frees up:
        ``ceil(ewma_request_s * depth / parallelism)``, at least 1, where
        depth is :meth:`queue_depth` for background requests and
        :meth:`interactive_queue_depth` for interactive ones."""
        depth = self._depth_for(background)
        return max(1, math.ceil(self._request_s_ewma * depth / max(1, self.parallelism)))

    def admit(self, *, background: bool = False) -> "Admission":
        """Reserve a place in the queue for a request about to start, or
        refuse it when the queue is full, instead of letting it grow without
        bound. Background requests count every request queued or running;
        interactive ones only those they would wait for
        (:meth:`interactive_queue_depth`), so queued background work never
        turns a clinician's translation away.

        The check and the reservation are one step (no ``await``, under a
        lock): a burst of simultaneous admissions gets at most
        ``max_queue`` places even though none of them has called
        :meth:`generate` yet (callers write the translation row between the
        two). The place is held until the next :meth:`generate` of the same
        priority takes it over, :meth:`Admission.release` gives it back, or
        ``admission_ttl_s`` passes (a caller that gave up without saying so
        cannot hold it for ever).

        Returns:
            The reservation (callers may ignore it).

        Raises:
            EngineBusy: that depth, plus the places already reserved,
                ``>= max_queue``.
        """
        if self.max_queue is None:
            return Admission(self, background, 0.0, counted=False)
        with _ADMISSION_LOCK:
            now = time.monotonic()
            reserved = self._admissions_live(now)
            held = sum(1 for a in reserved if background or not a.background)
            depth = self._depth_for(background) + held
            if depth >= self.max_queue:
                raise EngineBusy(self.retry_after_s(background=background))
            admission = Admission(self, background, now)
            reserved.append(admission)
            return admission

    def _admissions_live(self, now: float) -> list["Admission"]:
        """The unexpired reservations (expired ones dropped); call under
        ``_ADMISSION_LOCK``."""
        reserved = self.__dict__.setdefault("_admissions", [])
        if reserved and now - reserved[0].at > self.admission_ttl_s:
            reserved[:] = [a for a in reserved if now - a.at <= self.admission_ttl_s]
        return reserved

    def _admission_claim(self, background: bool) -> None:
        """A request of this priority starts: it takes over the oldest place
        reserved by :meth:`admit` for its priority, if any. Engines call it
        in :meth:`generate` in the same step as they count the request in
        :meth:`queue_depth`, so the place is never counted twice nor
        dropped."""
        with _ADMISSION_LOCK:
            reserved = self._admissions_live(time.monotonic())
            for index, admission in enumerate(reserved):
                if admission.background == background:
                    del reserved[index]
                    admission.counted = False
                    return

    def admissions_reserved(self) -> int:
        """Places reserved by :meth:`admit` and not yet taken over."""
        with _ADMISSION_LOCK:
            return len(self._admissions_live(time.monotonic()))

    def health(self) -> EngineHealth:
        """Whether the engine can serve now. Cheap and non-blocking (reads
        state, starts no request), so ``/readyz``, the metrics scrape and a
        watchdog may call it often, from any thread. Backends whose work
        runs outside the event loop (vLLM's engine-core process, llama.cpp's
        worker thread) override it to report their death.

        Returns:
            :data:`READY` once started, :data:`NOT_LOADED` before.
        """
        return READY if self._loaded else NOT_LOADED

    async def start(self) -> None:
        """Load the model once. Idempotent and safe for concurrent callers;
        call inside the running event loop.

        Raises:
            EngineError: the model could not be loaded (a later call tries
                again).
        """
        if self._loaded:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._loaded:
                return
            started = time.perf_counter()
            await self._load()
            self._loaded = True
            logger.info(
                "%s engine loaded model=%s device=%s precision=%s in %.0f ms",
                self.info.engine, self.info.model, self.info.device, self.info.precision,
                (time.perf_counter() - started) * 1000,
            )

    @abc.abstractmethod
    async def _load(self) -> None:
        """Load the model (called once by :meth:`start`).

        Raises:
            EngineError: the model could not be loaded.
        """

    @abc.abstractmethod
    def generate(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        params: GenerationParams,
    ) -> AsyncIterator[Delta]:
        """Stream the answer to ``messages`` as deltas.

        Args:
            request_id: unique id, used by :meth:`abort` and in logs.
            messages: chat messages, ``[{"role": ..., "content": ...}]``.
            params: sampling settings.

        Yields:
            :class:`Delta` objects; the last has ``finish_reason`` set.

        Raises:
            EnginePreempted: ``params.background`` and an interactive
                request took the engine (serial engines only).
            EngineError: generation failed.

        Cancelling the consuming task (or closing the iterator) aborts the
        engine request.
        """

    @abc.abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stop a running or queued request; unknown ids are ignored."""

    async def shutdown(self) -> None:
        """Release the model's resources; :meth:`start` loads it again.
        Subclasses that hold resources extend this."""
        self._loaded = False


@dataclass(frozen=True, slots=True)
class Generated:
    """One request run to the end (:func:`generate_full`).

    Attributes:
        text: the whole output.
        token_logprobs: one natural-log probability per generated token.
        finish_reason: the last delta's (:attr:`Delta.finish_reason`):
            ``"stop"``, ``"length"`` (cut at ``max_tokens``) or ``None`` when
            the engine ended without one.
    """

    text: str
    token_logprobs: list[float]
    finish_reason: str | None


async def generate_full(
    engine: Engine,
    request_id: str,
    messages: Sequence[dict[str, str]],
    params: GenerationParams,
) -> Generated:
    """Run one request to the end without streaming.

    Raises:
        EnginePreempted: a background request gave way to an interactive one.
        EngineError: generation failed.
    """
    pieces: list[str] = []
    logprobs: list[float] = []
    finish_reason = None
    async for delta in engine.generate(request_id, messages, params):
        pieces.append(delta.text)
        logprobs.extend(delta.token_logprobs)
        finish_reason = delta.finish_reason or finish_reason
    return Generated("".join(pieces), logprobs, finish_reason)


async def generate_text(
    engine: Engine,
    request_id: str,
    messages: Sequence[dict[str, str]],
    params: GenerationParams,
) -> tuple[str, list[float]]:
    """Run one request to the end without streaming (:func:`generate_full`
    without the finish reason).

    Returns:
        ``(text, token_logprobs)``: the whole output and one natural-log
        probability per generated token.

    Raises:
        EnginePreempted: a background request gave way to an interactive one.
        EngineError: generation failed.
    """
    generated = await generate_full(engine, request_id, messages, params)
    return generated.text, generated.token_logprobs
