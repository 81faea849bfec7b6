"""GPU settings: from the environment, through Django settings and the
engine factory, to the keyword arguments vLLM's engine receives. Runs
without a GPU: the engine is built, never started."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys

import pytest

from inference import factory
from inference.factory import EngineConfig, create_engine
from inference.vllm_engine import VllmEngine
from tests.conftest import ROOT


@pytest.fixture
def pretend_cuda(monkeypatch):
    """torch sees a CUDA device (only the device check is replaced; nothing
    is loaded)."""
    monkeypatch.setattr(factory, "cuda_available", lambda: True)
    monkeypatch.setattr("inference.vllm_engine.cuda_available", lambda: True)


def test_gpu_defaults_are_fp8_cuda_graphs_and_prefix_caching(pretend_cuda):
    engine = create_engine(EngineConfig(engine="auto", model="/models/qwen-7b", n_ctx=4096))
    assert isinstance(engine, VllmEngine) and engine.device == "cuda"
    assert engine.engine_kwargs == {
        "model": "/models/qwen-7b", "dtype": "auto", "quantization": "fp8", "max_model_len": 4096,
        "enable_prefix_caching": True, "enforce_eager": False, "tensor_parallel_size": 1,
        "disable_log_stats": True, "scheduling_policy": "priority", "gpu_memory_utilization": 0.9,
    }
    assert engine.info.precision == "fp8" and engine.info.device == "cuda"


def test_every_gpu_setting_reaches_the_engine_arguments(pretend_cuda):
    engine = create_engine(EngineConfig(
        engine="vllm", model="/models/qwen-7b", device="cuda", quantization="none", dtype="bfloat16",
        tensor_parallel_size=2, gpu_memory_utilization=0.6, max_model_len=8192, n_ctx=4096,
        prefix_caching=False, enforce_eager=True, speculative_model="/models/qwen-0.5b",
        num_speculative_tokens=4))
    kwargs = engine.engine_kwargs
    assert (kwargs["quantization"], kwargs["dtype"], kwargs["tensor_parallel_size"]) == (None, "bfloat16", 2)
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"]) == (0.6, 8192)
    assert (kwargs["enable_prefix_caching"], kwargs["enforce_eager"]) == (False, True)
    assert kwargs["speculative_config"] == {"model": "/models/qwen-0.5b", "num_speculative_tokens": 4}
    assert engine.info.precision == "bfloat16"


def test_ngram_speculation_needs_no_draft_model(pretend_cuda):
    engine = create_engine(EngineConfig(engine="vllm", model="m", speculative_model="ngram",
                                        num_speculative_tokens=3))
    assert engine.engine_kwargs["speculative_config"]["method"] == "ngram"
    assert engine.engine_kwargs["speculative_config"]["num_speculative_tokens"] == 3


def test_cpu_defaults_are_fp32_eager_without_quantization(monkeypatch):
    monkeypatch.setattr(factory, "cuda_available", lambda: False)
    engine = create_engine(EngineConfig(engine="vllm", model="/models/smollm2", device="auto"))
    kwargs = engine.engine_kwargs
    assert engine.device == "cpu"
    assert (kwargs["quantization"], kwargs["dtype"], kwargs["enforce_eager"]) == (None, "float32", True)
    assert "gpu_memory_utilization" not in kwargs and "speculative_config" not in kwargs


@pytest.mark.slow  # imports vLLM
def test_the_engine_args_are_real_vllm_engine_arguments(pretend_cuda):
    from vllm.engine.arg_utils import AsyncEngineArgs

    engine = create_engine(EngineConfig(engine="vllm", model="m", speculative_model="draft"))
    known = {field.name for field in dataclasses.fields(AsyncEngineArgs)}
    assert set(engine.engine_kwargs) <= known


def test_auto_picks_llamacpp_on_a_cpu_and_logs_the_choice(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(factory, "cuda_available", lambda: False)
    model = tmp_path / "model-Q4_K_M.gguf"
    with caplog.at_level(logging.INFO, logger="inference.factory"):
        engine = create_engine(EngineConfig(engine="auto", model=str(model)))
    assert engine.info.engine == "llamacpp" and engine.info.device == "cpu"
    assert "inference engine selected: llamacpp on cpu" in caplog.text


def test_auto_picks_vllm_on_a_gpu_and_logs_the_device(pretend_cuda, caplog):
    with caplog.at_level(logging.INFO):
        create_engine(EngineConfig(engine="auto", model="m"))
    assert "inference engine selected: vllm on cuda" in caplog.text
    assert "quantization=fp8" in caplog.text


def test_asking_for_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(factory, "cuda_available", lambda: False)
    with pytest.raises(ValueError, match="INFERENCE_DEVICE=cuda, but torch sees no CUDA device"):
        create_engine(EngineConfig(engine="vllm", model="m", device="cuda"))
    with pytest.raises(ValueError, match="INFERENCE_DEVICE must be one of"):
        create_engine(EngineConfig(engine="vllm", model="m", device="tpu"))


def config_in_fresh_process(**environ: str) -> dict:
    """``engine_config_from_settings()`` of a new process whose environment
    has no INFERENCE_* variable except ``environ``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERENCE_")}
    env |= environ | {"DJANGO_SETTINGS_MODULE": "clinical.settings"}
    code = ("import django, dataclasses, json; django.setup(); "
            "from clinical.translation.engine import engine_config_from_settings; "
            "print(json.dumps(dataclasses.asdict(engine_config_from_settings())))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


GPU_FIELDS = ("device", "quantization", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
              "prefix_caching", "enforce_eager", "speculative_model", "num_speculative_tokens")


def test_environment_variables_reach_the_engine_config():
    """The real path: environment → clinical.settings → EngineConfig."""
    config = config_in_fresh_process(
        INFERENCE_DEVICE="cuda", INFERENCE_QUANTIZATION="fp8", INFERENCE_TENSOR_PARALLEL_SIZE="4",
        INFERENCE_GPU_MEMORY_UTILIZATION="0.55", INFERENCE_MAX_MODEL_LEN="16384",
        INFERENCE_PREFIX_CACHING="false", INFERENCE_ENFORCE_EAGER="true",
        INFERENCE_SPECULATIVE_MODEL="/models/draft", INFERENCE_NUM_SPECULATIVE_TOKENS="7")
    assert {k: config[k] for k in GPU_FIELDS} == {
        "device": "cuda", "quantization": "fp8", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.55,
        "max_model_len": 16384, "prefix_caching": False, "enforce_eager": True,
        "speculative_model": "/models/draft", "num_speculative_tokens": 7}


def test_unset_environment_gives_the_defaults():
    config = config_in_fresh_process(INFERENCE_N_CTX="2048")
    assert {k: config[k] for k in GPU_FIELDS} == {
        "device": "auto", "quantization": "default", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.9,
        "max_model_len": 2048, "prefix_caching": True, "enforce_eager": None, "speculative_model": "",
        "num_speculative_tokens": 5}


def test_engine_max_batch_comes_from_the_environment(monkeypatch):
    """ENGINE_MAX_BATCH reaches the llama.cpp engine through EngineConfig
    (clinical.engine builds the config without naming it)."""
    from inference.factory import EngineConfig, create_engine
    from inference.weights import smollm2_gguf_path

    monkeypatch.setenv("ENGINE_MAX_BATCH", "4")
    engine = create_engine(EngineConfig(engine="llamacpp", model=str(smollm2_gguf_path())))
    assert engine.max_batch == 4 and engine.parallelism == 4 and engine.info.settings["batching"]
    monkeypatch.setenv("ENGINE_MAX_BATCH", "1")
    engine = create_engine(EngineConfig(engine="llamacpp", model=str(smollm2_gguf_path())))
    assert engine.max_batch == 1 and not engine.info.settings["batching"]
    monkeypatch.setenv("ENGINE_MAX_BATCH", "-2")
    with pytest.raises(ValueError):
        EngineConfig()


def test_the_prefix_snapshot_capacity_comes_from_the_environment(monkeypatch):
    """INFERENCE_PREFIX_SNAPSHOTS reaches the llama.cpp engine's snapshot
    store through EngineConfig; unset, it holds the default example
    clusters plus the other instruction sets."""
    from inference.factory import EngineConfig, create_engine
    from inference.llamacpp_prefix import DEFAULT_PREFIX_SNAPSHOTS
    from inference.weights import smollm2_gguf_path

    monkeypatch.delenv("INFERENCE_PREFIX_SNAPSHOTS", raising=False)
    engine = create_engine(EngineConfig(engine="llamacpp", model=str(smollm2_gguf_path())))
    assert engine.prefix_snapshots.capacity == DEFAULT_PREFIX_SNAPSHOTS >= 24 + 4
    monkeypatch.setenv("INFERENCE_PREFIX_SNAPSHOTS", "48")
    engine = create_engine(EngineConfig(engine="llamacpp", model=str(smollm2_gguf_path())))
    assert engine.prefix_snapshots.capacity == 48 and engine.info.settings["prefix_snapshots"] == 48
    monkeypatch.setenv("INFERENCE_PREFIX_SNAPSHOTS", "-1")
    with pytest.raises(ValueError):
        EngineConfig()
