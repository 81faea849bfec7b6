"""One process's engine, watched: a dead engine is noticed and rebuilt with
backoff.

Shared by the web replica (:mod:`clinical.translation.engine`) and the
Celery re-run worker (:mod:`clinical.rerun.worker_engine`). An engine dies when
vLLM's engine-core process exits (a CUDA error, the kernel's OOM killer)
or llama.cpp fails inside a decode (:meth:`inference.base.Engine.health`);
before this module the process kept handing out the dead engine and every
later request failed until a person restarted it.

States (:attr:`EngineSupervisor.state`):

* ``idle``: nothing built yet;
* ``loading``: the first load runs (callers of :meth:`EngineSupervisor.get`
  wait for it);
* ``ready``: the engine serves;
* ``dead``: the engine died (or a load failed); the next rebuild is due at
  :attr:`EngineSupervisor.next_attempt_at`;
* ``rebuilding``: a rebuild runs.

While ``dead`` or ``rebuilding``, :meth:`~EngineSupervisor.get` raises
:class:`~inference.base.EngineDead` at once (with the seconds until the next
attempt) unless asked to wait for the rebuild, so requests are refused
quickly instead of each starting its own load. Rebuilds are spaced by
exponential backoff: ``backoff_s``, doubled after each failed attempt up to
``backoff_max_s``, back to ``backoff_s`` after a success. A rebuild shuts
the dead engine down (``shutdown_timeout_s`` at most), builds a new one with
``factory`` and starts it, then runs ``warm`` (prefill of the shared prompt).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from inference.base import Engine, EngineDead, EngineError

logger = logging.getLogger(__name__)

IDLE, LOADING, READY, DEAD, REBUILDING = "idle", "loading", "ready", "dead", "rebuilding"


@dataclass(frozen=True)
class SupervisorStatus:
    """A snapshot for ``/readyz``, ``/metrics`` and the dashboard.

    Attributes:
        state: see the module docstring.
        reason: what died or failed (``""`` when ready); no patient text.
        deaths: engine deaths (and failed loads) seen by this process.
        rebuilds: successful rebuilds after a death.
        retry_in_s: seconds until the next rebuild attempt (0 when due or
            running; ``None`` when none is pending).
    """

    state: str
    reason: str
    deaths: int
    rebuilds: int
    retry_in_s: float | None

    @property
    def alive(self) -> bool:
        return self.state == READY

    def as_dict(self) -> dict:
        return {"state": self.state, "alive": self.alive, "reason": self.reason, "deaths": self.deaths,
                "rebuilds": self.rebuilds, "retry_in_s": self.retry_in_s}


class EngineSupervisor:
    """Builds, watches and rebuilds one engine.

    Args:
        factory: builds a new (unstarted) engine; may raise.
        warm: run on each newly started engine before it is handed out
            (e.g. prefill of the shared prompt); ``None`` = nothing.
        engine: an engine built already (tests install a fake one); the
            first :meth:`get` starts it.
        backoff_s: seconds from a death to the first rebuild attempt.
        backoff_max_s: cap of the doubling delay between failed attempts.
        shutdown_timeout_s: most seconds spent shutting a dead engine down.
        clock: monotonic clock in seconds (tests pass their own).

    Not thread safe: use it from one event loop. :meth:`status` may be read
    from any thread (it only reads attributes and the engine's health).
    """

    def __init__(self, factory: Callable[[], Engine], *,
                 warm: Callable[[Engine], Awaitable[None]] | None = None,
                 engine: Engine | None = None, backoff_s: float = 1.0, backoff_max_s: float = 60.0,
                 shutdown_timeout_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.factory, self.warm = factory, warm
        self.engine = engine
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.clock = clock
        self.state = IDLE
        self.reason = ""
        self.deaths = 0
        self.rebuilds = 0
        self.failures = 0  # consecutive failed loads or rebuilds
        self.loaded_once = False  # an engine has served: a refusal after it is a death, before it a load failure
        self.next_attempt_at: float | None = None
        self._load: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None

    # -- reading -----------------------------------------------------------
    def status(self) -> SupervisorStatus:
        """The current state, asking the engine whether it lives. Changes
        nothing (safe from another thread): a death it sees first is
        reported as ``dead`` and recorded by the next :meth:`get` or
        watchdog round."""
        if self.state == READY and self.engine is not None:
            health = self.engine.health()
            if health.state == "dead":
                return SupervisorStatus(DEAD, health.reason or "engine dead", self.deaths + 1,
                                        self.rebuilds, self.backoff_s)
        retry = None
        if self.state == DEAD and self.next_attempt_at is not None:
            retry = round(max(0.0, self.next_attempt_at - self.clock()), 1)
        elif self.state == REBUILDING:
            retry = 0.0
        return SupervisorStatus(self.state, self.reason, self.deaths, self.rebuilds, retry)

    def _notice_death(self) -> None:
        """``ready`` → ``dead`` when the engine reports itself dead."""
        if self.state != READY or self.engine is None:
            return
        health = self.engine.health()
        if health.state == "dead":
            self._mark_dead(health.reason or "engine dead", first=True)

    def _mark_dead(self, reason: str, *, first: bool) -> None:
        """Record a death (``first``) or a failed load/rebuild and schedule
        the next attempt."""
        self.state, self.reason = DEAD, reason
        self.deaths += 1
        delay = self.backoff_s if first else min(self.backoff_max_s, self.backoff_s * 2 ** self.failures)
        if not first:
            self.failures += 1
        self.next_attempt_at = self.clock() + delay
        logger.error("engine %s; next rebuild in %.1f s", reason, delay)

    # -- using -------------------------------------------------------------
    async def get(self, *, wait: bool = False) -> Engine:
        """The started, live engine.

        The first call loads it (concurrent callers wait for the same load).
        A dead engine is rebuilt once the backoff allows; until then, and
        while the rebuild runs, callers are refused at once, unless ``wait``
        (the re-run worker, which has nothing else to do): then the call
        sleeps until the attempt is due and waits for it.

        Raises:
            EngineDead: dead or rebuilding after having served
                (``retry_after_s`` set).
            inference.base.EngineError: no engine has loaded yet and the
                last load failed (the next attempt waits for the backoff
                too): a missing model or a bad setting, not a death.
        """
        self._notice_death()
        if self.state == READY:
            return self.engine
        if self.state == IDLE:
            self._begin(LOADING)
        elif self.state == DEAD:
            wait_s = max(0.0, (self.next_attempt_at or 0) - self.clock())
            if wait and wait_s > 0:
                await asyncio.sleep(wait_s)
                return await self.get(wait=wait)
            if wait_s <= 0:
                self._begin(REBUILDING)
        if self.state == LOADING or (self.state == REBUILDING and wait):
            await asyncio.shield(self._load)
            if self.state == READY:
                return self.engine
        self._notice_death()
        status = self.status()
        if not self.loaded_once:  # never loaded (a missing model, a bad setting): not a death to wait out
            raise EngineError(f"engine not loaded: {status.reason or 'unavailable'}")
        raise EngineDead(status.reason or "engine unavailable", retry_after_s=status.retry_in_s)

    def _begin(self, state: str) -> None:
        self.state = state
        self._load = asyncio.get_running_loop().create_task(self._build(rebuild=state == REBUILDING))
        # A first load that failed with nobody waiting must not log "never retrieved".
        self._load.add_done_callback(lambda task: task.cancelled() or task.exception())

    async def _build(self, *, rebuild: bool) -> None:
        """Load (or rebuild) the engine. A failure is recorded (``dead``,
        next attempt after the backoff) and raised to the callers waiting
        for this attempt."""
        started = self.clock()
        old, engine = self.engine, None
        try:
            if rebuild and old is not None:
                await self._shutdown_quietly(old)
                self.engine = None
            engine = self.engine if (self.engine is not None and not rebuild) else self.factory()
            self.engine = engine
            await engine.start()
            if self.warm is not None:
                await self.warm(engine)
            if not engine.health().alive:
                raise EngineDead(engine.health().reason or "died while starting")
        except asyncio.CancelledError:
            self.state = DEAD
            raise
        except Exception as exc:
            what = "rebuild" if rebuild else "load"
            self._mark_dead(f"{what} failed: {type(exc).__name__}", first=False)
            raise  # to callers waiting for this attempt; else retrieved by _begin's callback
        self.state, self.reason = READY, ""
        self.loaded_once = True
        self.failures, self.next_attempt_at = 0, None
        if rebuild:
            self.rebuilds += 1
        logger.info("engine %s in %.1f s (rebuilds so far: %d)", "rebuilt" if rebuild else "loaded",
                    self.clock() - started, self.rebuilds)

    async def _shutdown_quietly(self, engine: Engine) -> None:
        try:
            await asyncio.wait_for(engine.shutdown(), self.shutdown_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a dead engine may fail to shut down cleanly
            logger.warning("shutting down the dead engine failed: %s", type(exc).__name__)

    # -- watching ----------------------------------------------------------
    def watch(self, interval_s: float = 1.0) -> None:
        """Start (once per event loop) a task that checks the engine every
        ``interval_s`` seconds and starts a due rebuild, so a replica with
        no traffic heals too. Its loop must be running."""
        loop = asyncio.get_running_loop()
        if self._watchdog is not None and not self._watchdog.done() and self._watchdog.get_loop() is loop:
            return
        self._watchdog = loop.create_task(self._watch(interval_s), name="engine-watchdog")

    async def _watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self._notice_death()
                if self.state == DEAD and self.clock() >= (self.next_attempt_at or 0):
                    self._begin(REBUILDING)
            except Exception:  # noqa: BLE001 - the watchdog must outlive any one check
                logger.exception("engine watchdog check failed")

    async def shutdown(self) -> None:
        """Stop watching and shut the engine down (process exit)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._load is not None and not self._load.done():
            self._load.cancel()
            await asyncio.gather(self._load, return_exceptions=True)
        if self.engine is not None:
            await self.engine.shutdown()
        self.state = IDLE
