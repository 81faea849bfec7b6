"""The re-run engine runs where the replicas' ``INFERENCE_DEVICE`` says:
a host that keeps the service off its GPU (``cpu``) keeps the FP32 re-run off
it too, and ``cuda`` on a host without one is refused, not run on the CPU.
A GPU host is simulated by torch's answer (``cuda_available``)."""

from __future__ import annotations

import pytest

from clinical.rerun.cpu_priority import cpu_priority_resolve
from clinical.rerun.worker_engine import rerun_engine_config, rerun_engine_device
from inference import factory
from inference.weights import smollm2_gguf_path


@pytest.fixture
def vllm_rerun(settings):
    settings.RERUN_ENGINE, settings.RERUN_MODEL = "vllm", ""
    settings.INFERENCE_MODEL = str(smollm2_gguf_path())
    return settings


def test_inference_device_cpu_keeps_the_rerun_off_the_hosts_gpu(vllm_rerun, monkeypatch):
    monkeypatch.setattr(factory, "cuda_available", lambda: True)
    vllm_rerun.INFERENCE_DEVICE = "cpu"
    assert rerun_engine_config().device == "cpu"
    assert rerun_engine_device() == "cpu"
    assert cpu_priority_resolve("auto") == "idle"  # it shares the CPU with the replicas

    vllm_rerun.INFERENCE_DEVICE = "auto"
    assert rerun_engine_device() == "cuda" and cpu_priority_resolve("auto") == "normal"


def test_inference_device_cuda_without_a_gpu_is_refused_for_the_rerun_too(vllm_rerun, monkeypatch):
    monkeypatch.setattr(factory, "cuda_available", lambda: False)
    vllm_rerun.INFERENCE_DEVICE = "cuda"
    assert rerun_engine_config().device == "cuda"
    with pytest.raises(ValueError, match="INFERENCE_DEVICE=cuda, but torch sees no CUDA device"):
        rerun_engine_device()


def test_a_llamacpp_rerun_engine_writes_no_prefix_state_to_disk(settings, monkeypatch, tmp_path):
    """The re-run's prompts may hold the fast text before their last
    message: their KV states stay in memory, whatever the folder setting."""
    monkeypatch.setenv("INFERENCE_PREFIX_STATE_DIR", str(tmp_path))
    settings.RERUN_ENGINE, settings.RERUN_MODEL = "llamacpp", str(smollm2_gguf_path())
    assert factory.EngineConfig().prefix_state_dir == str(tmp_path)  # the web engine's
    assert rerun_engine_config().prefix_state_dir == ""
    engine = factory.create_engine(rerun_engine_config())
    assert engine.prefix_state_dir is None
