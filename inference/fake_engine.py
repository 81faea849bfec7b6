"""A deterministic engine for fast unit tests of the web protocol.

It streams a fixed answer word by word with fixed logprobs and an optional
delay per token, can be told to fail after N tokens, and honours abort. It is
never used outside tests and benchmarks of the web stack.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

from inference.base import Delta, Engine, EngineError, EngineInfo, GenerationParams


class FakeEngine(Engine):
    """Echo-style engine: answers ``"Plain words: <input>"`` token by token.

    Args:
        token_delay_s: sleep between tokens (seconds).
        logprob: logprob reported for every token (confidence = exp(logprob)).
        fail_after: raise :class:`EngineError` after this many tokens.
        answer: a fixed answer instead of the echo (tests of the safety
            check use one that drops a fact).
    """

    def __init__(self, *, token_delay_s: float = 0.0, logprob: float = -0.05,
                 fail_after: int | None = None, answer: str | None = None) -> None:
        self.answer = answer
        self.token_delay_s = token_delay_s
        self.logprob = logprob
        self.fail_after = fail_after
        self.info = EngineInfo(engine="fake", model="fake-echo", precision="none", device="cpu")
        self.aborted: set[str] = set()
        self.active: set[str] = set()

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
        await self.start()
        words = (self.answer or "Plain words: " + messages[-1]["content"]).split(" ")
        words = words[: params.max_tokens]
        admitted_ns = time.monotonic_ns()
        self.active.add(request_id)
        try:
            async for delta in self._stream(request_id, words, messages, params, admitted_ns):
                yield delta
        finally:
            self.active.discard(request_id)

    async def _stream(self, request_id, words, messages, params, admitted_ns):
        for index, word in enumerate(words):
            if request_id in self.aborted:
                return
            if self.fail_after is not None and index >= self.fail_after:
                raise EngineError("fake engine failure")
            await asyncio.sleep(self.token_delay_s)
            last = index == len(words) - 1
            yield Delta(
                text=word if index == 0 else " " + word,
                token_logprobs=(self.logprob,),
                prompt_tokens=len(messages[-1]["content"].split()) if index == 0 else None,
                admitted_ns=admitted_ns if index == 0 else None,
                finish_reason=("length" if len(words) == params.max_tokens else "stop") if last else None,
            )

    async def abort(self, request_id: str) -> None:
        self.aborted.add(request_id)
