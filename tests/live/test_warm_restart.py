"""A server started as ``make run`` starts it says ``warming`` on /readyz
while it reads the example clusters' instruction prefixes, then ready; a
restart reads those prefixes back from disk and translates as the first
server did (real Daphne, SmolLM2 on llama.cpp)."""

from __future__ import annotations

import pytest

from bench.processes import readyz_wait
from inference.weights import smollm2_gguf_path
from tests.data import laymaker_sentences
from tests.frames import translate_over_socket

pytestmark = pytest.mark.slow  # loads SmolLM2

CLUSTERS = 4


def readyz_until_ready(base_url: str, timeout_s: float = 240) -> list[dict]:
    """Every /readyz answer (status code and body) until a 200."""
    seen: list[dict] = []
    readyz_wait(base_url, 200, timeout_s, interval_s=0.1, answers=seen)
    return seen


def streamed_text(frames: list[dict]) -> str:
    assert frames[-1]["type"] == "done", frames[-1]
    return "".join(frame["text"] for frame in frames if frame["type"] == "token")


async def test_readyz_says_warming_until_the_prefixes_are_read_and_a_restart_reads_them_from_disk(
        daphne_server, clinician, tmp_path):
    env = {"INFERENCE_ENGINE": "llamacpp", "INFERENCE_MODEL": str(smollm2_gguf_path()),
           "PROMPT_CLUSTER_WARMUP": "1", "PROMPT_CLUSTERS": str(CLUSTERS),
           "INFERENCE_PREFIX_STATE_DIR": str(tmp_path / "prefix-states")}
    sentence = laymaker_sentences()[5]

    first = daphne_server(**env)
    seen = readyz_until_ready(first.base_url)
    warming = [answer for answer in seen if answer["status"] == "warming"]
    assert warming, f"never said warming: {seen}"
    assert all(answer["code"] == 503 for answer in warming)
    done = [answer["warming"]["prefixes_done"] for answer in warming]
    assert done == sorted(done) and max(done) < CLUSTERS
    assert {answer["warming"]["prefixes"] for answer in warming} <= {None, CLUSTERS}
    assert seen[-1]["status"] == "ready"
    assert f"clusters={CLUSTERS} of={CLUSTERS} from_disk=0" in first.logs()
    cold = streamed_text(await translate_over_socket(first, first.login(clinician.username), sentence))
    first.stop()
    assert len(list((tmp_path / "prefix-states").glob("*/*.state"))) >= CLUSTERS

    restarted = daphne_server(**env)
    readyz_until_ready(restarted.base_url)
    assert f"clusters={CLUSTERS} of={CLUSTERS} from_disk={CLUSTERS}" in restarted.logs()
    warm = streamed_text(await translate_over_socket(restarted, restarted.login(clinician.username), sentence))
    assert warm == cold
