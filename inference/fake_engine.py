"""A deterministic engine for fast unit tests of the web protocol.

It streams a fixed answer word by word with fixed logprobs and an optional
delay per token, can be told to fail after N tokens, to die (:meth:`FakeEngine.kill`)
or to hang on a given input, and honours abort. It is
never used outside tests and benchmarks of the web stack.

By default it runs every request at once (like a batching engine). With
``serial=True`` it schedules like the llama.cpp engine: one request at a
time, interactive requests first in arrival order, and a running background
request (``GenerationParams.background``) stopped at its next token, with
:class:`~inference.base.EnginePreempted`, when an interactive one arrives.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import AsyncIterator, Sequence

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
from inference.prompts import hints_strip
from inference.self_check import SELF_CHECK_SYSTEM


class FakeEngine(Engine):
    """Echo-style engine: answers ``"Plain words: <input>"`` token by token
    (the input: the last message, less the vocabulary's plain words that a
    :data:`inference.prompts.HINTS_PROMPT_VERSION` prompt lists after it).

    Args:
        token_delay_s: sleep between tokens (seconds).
        logprob: logprob reported for every token (confidence = exp(logprob)).
        fail_after: raise :class:`EngineError` after this many tokens.
        answer: a fixed answer instead of the echo (tests of the safety
            check use one that drops a fact).
        serial: one request at a time with llama.cpp's priorities (see the
            module docstring) instead of all at once.
        hang_on: a request whose last message contains this text hangs: it
            yields nothing until it is aborted or cancelled, as an engine
            stuck in a kernel would (tests of the re-run's time limit;
            ``FAKE_ENGINE_HANG_ON`` in :func:`inference.factory.create_engine`).
        checks: answers to the self-check question (:mod:`inference.self_check`):
            ``{rewrite: P(yes)}``; a self-check prompt whose rewrite is a
            key is answered "Yes" with logprob ``log(P)`` (``P >= 0.5``) or
            "No" with ``log(1 - P)``, so :func:`inference.self_check.self_check_run`
            reads ``P`` back. Other self-check prompts get the usual answer.
        check_all: P(yes) answered to every self-check prompt whose rewrite
            is not in ``checks`` (``FAKE_ENGINE_SELF_CHECK``, for a whole
            server in tests of the page); ``None``: the usual answer.

    Attributes:
        aborted: request ids passed to :meth:`abort`.
        active: request ids queued or streaming.
        admitted: request ids in the order they began streaming.
        preempted: background request ids stopped for an interactive one
            (``serial`` only).
    """

    def __init__(self, *, token_delay_s: float = 0.0, logprob: float = -0.05,
                 fail_after: int | None = None, answer: str | None = None,
                 serial: bool = False, hang_on: str | None = None,
                 checks: dict[str, float] | None = None, check_all: float | None = None) -> None:
        self.answer = answer
        self.checks = dict(checks or {})
        self.check_all = check_all
        self.hang_on = hang_on
        self.token_delay_s = token_delay_s
        self.logprob = logprob
        self.fail_after = fail_after
        self.serial = serial
        self.info = EngineInfo(engine="fake", model="fake-echo", precision="none", device="cpu")
        self.aborted: set[str] = set()
        self.active: set[str] = set()
        self.admitted: list[str] = []
        self.preempted: set[str] = set()
        # serial mode: waiters by priority (key: background) and the runner.
        self._waiting: dict[bool, collections.deque[tuple[str, asyncio.Future]]] = {
            False: collections.deque(), True: collections.deque()}
        self._running: tuple[str, bool] | None = None
        self._dead: str | None = None

    def kill(self, reason: str = "fake engine killed") -> None:
        """Die as vLLM does when its engine-core process exits: from now on
        :meth:`health` says ``dead`` and every stream, running or new,
        raises :class:`~inference.base.EngineDead` at its next token."""
        self._dead = reason

    def health(self) -> EngineHealth:
        return EngineHealth("dead", self._dead) if self._dead else super().health()

    def queue_depth(self) -> int:
        return len(self.active)

    async def _load(self) -> None:
        """Nothing to load."""

    async def generate(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        params: GenerationParams,
    ) -> AsyncIterator[Delta]:
        """See :meth:`Engine.generate`.

        Raises:
            EnginePreempted: ``serial``, ``params.background`` and an
                interactive request arrived before this one finished.
            EngineError: ``fail_after`` tokens were streamed.
            EngineDead: :meth:`kill` was called.
        """
        await self.start()
        words = (self.answer or "Plain words: " + hints_strip(messages[-1]["content"])).split(" ")
        logprob = self.logprob
        check = self._check_answer(messages)
        if check is not None:
            words, logprob = [check[0]], check[1]
        words = words[: params.max_tokens]
        self._admission_claim(params.background)
        self.active.add(request_id)
        try:
            if self.serial:
                await self._acquire(request_id, params.background)
            try:
                admitted_ns = time.monotonic_ns()
                self.admitted.append(request_id)
                async for delta in self._stream(request_id, words, messages, params, admitted_ns, logprob):
                    yield delta
            finally:
                if self.serial:
                    self._release()
        finally:
            self.active.discard(request_id)

    async def _acquire(self, request_id: str, background: bool) -> None:
        """serial: wait for the engine (interactive first, FIFO within a
        priority); an interactive arrival preempts a running background job."""
        if self._running is None and not self._waiting[False] and not (background and self._waiting[True]):
            self._running = (request_id, background)
            return
        if not background and self._running is not None and self._running[1]:
            self.preempted.add(self._running[0])
        turn = asyncio.get_running_loop().create_future()
        self._waiting[background].append((request_id, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed the engine as we left: pass it on
            else:
                self._waiting[background].remove((request_id, turn))
            raise

    def _release(self) -> None:
        self._running = None
        waiting = self._waiting[False] or self._waiting[True]
        while waiting:
            request_id, turn = waiting.popleft()
            if not turn.done():
                self._running = (request_id, waiting is self._waiting[True])
                turn.set_result(None)
                return
            waiting = self._waiting[False] or self._waiting[True]

    def _check_answer(self, messages: Sequence[dict[str, str]]) -> tuple[str, float] | None:
        """``(answer token, logprob)`` for a self-check prompt whose rewrite
        is in :attr:`checks` (or any, with :attr:`check_all`), else ``None``."""
        if not (self.checks or self.check_all is not None) or messages[0]["content"] != SELF_CHECK_SYSTEM:
            return None
        rewrite = messages[-1]["content"].rsplit("\nRewrite: ", 1)[-1]
        p_yes = self.checks.get(rewrite, self.check_all)
        if p_yes is None:
            return None
        return ("Yes", math.log(p_yes)) if p_yes >= 0.5 else ("No", math.log(1 - p_yes))

    async def _stream(self, request_id, words, messages, params, admitted_ns, logprob):
        if self.hang_on and self.hang_on in messages[-1]["content"]:
            while request_id not in self.aborted:  # hung: nothing until aborted or cancelled
                await asyncio.sleep(0.05)
            return
        for index, word in enumerate(words):
            if request_id in self.aborted:
                return
            if self._dead:
                raise EngineDead(self._dead)
            if request_id in self.preempted:
                raise EnginePreempted(request_id, index)
            if self.fail_after is not None and index >= self.fail_after:
                raise EngineError("fake engine failure")
            await asyncio.sleep(self.token_delay_s)
            if request_id in self.preempted:  # flagged while this token was computed (llama.cpp: during prefill)
                raise EnginePreempted(request_id, index)
            last = index == len(words) - 1
            yield Delta(
                text=word if index == 0 else " " + word,
                token_logprobs=(logprob,),
                prompt_tokens=len(messages[-1]["content"].split()) if index == 0 else None,
                admitted_ns=admitted_ns if index == 0 else None,
                finish_reason=("length" if len(words) == params.max_tokens else "stop") if last else None,
            )

    async def abort(self, request_id: str) -> None:
        self.aborted.add(request_id)
