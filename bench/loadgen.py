"""Load generators: a closed loop of N clients and Poisson arrivals, the
two modes of ``vllm bench serve`` (``--max-concurrency`` and
``--request-rate``)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from bench.stats import RequestResult
from bench.workloads import Workload


async def closed_loop(driver, workload: Workload, concurrency: int, n: int,
                      offset: int = 0) -> tuple[list[RequestResult], float]:
    """``concurrency`` clients, each sending its next request when the
    previous one ends, ``n`` requests in all, on texts ``offset``,
    ``offset + 1``, ... of the workload. Returns (results, wall s)."""
    await driver.prepare(workload)  # a Daphne restart is not part of the wall time
    texts = workload.texts
    counter = iter(range(n))
    results: list[RequestResult] = []

    async def client() -> None:
        for i in counter:
            results.append(await driver.request(texts[(offset + i) % len(texts)], workload))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return results, time.perf_counter() - started


async def poisson(driver, workload: Workload, rate: float, n: int, seed: int = 8,
                  offset: int = 0) -> tuple[list[RequestResult], float]:
    """``n`` requests arriving as a Poisson process of ``rate`` requests/s
    (exponential gaps, fixed seed), each sent at its arrival time whatever
    is still running. Returns (results, wall s)."""
    await driver.prepare(workload)
    gaps = np.random.default_rng(seed).exponential(1 / rate, n)
    arrivals = np.cumsum(gaps) - gaps[0]
    started = time.perf_counter()

    async def one(i: int) -> RequestResult:
        await asyncio.sleep(max(0.0, started + arrivals[i] - time.perf_counter()))
        return await driver.request(workload.texts[(offset + i) % len(workload.texts)], workload)

    results = await asyncio.gather(*(one(i) for i in range(n)))
    return list(results), time.perf_counter() - started


