"""The GPU memory plan's arithmetic (deploy/README.md, "GPU memory plan")
and the start-up refusal of a share that does not fit, with given numbers
(no GPU here: on CUDA, VllmEngine._load feeds it torch.cuda.mem_get_info())."""

from __future__ import annotations

import pytest

from clinical.rerun.worker_engine import rerun_engine_config
from inference.vllm_engine import GIB, GpuMemoryRefused, VllmEngine, gpu_share_check
from inference.weights import smollm2_hf_path

CARD = int(79.2 * GIB)  # an 80 GB A100/H100 as torch.cuda.mem_get_info() reports it

#: Qwen2.5-7B-Instruct, config.json: 28 layers, 4 KV heads, head dim 128.
LAYERS, KV_HEADS, HEAD_DIM = 28, 4, 128


def kv_bytes_per_token(bytes_per_value: int) -> int:
    return LAYERS * KV_HEADS * HEAD_DIM * 2 * bytes_per_value


def test_the_readme_kv_figures_per_token():
    assert kv_bytes_per_token(2) == 56 * 1024  # BF16 KV cache of the FP8 replica
    assert kv_bytes_per_token(4) == 112 * 1024  # FP32 worker


def test_layout_one_fits_the_replica_then_the_worker_on_one_card():
    web = gpu_share_check(0.25, CARD, CARD, setting="INFERENCE_GPU_MEMORY_UTILIZATION")
    free_after_web = CARD - web - int(0.5 * GIB)  # its CUDA context too
    worker = gpu_share_check(0.60, free_after_web, CARD, setting="RERUN_GPU_MEMORY_UTILIZATION")
    assert (web + worker) / CARD == pytest.approx(0.85)
    # Each share holds weights + the activation budget + the KV cache its settings need.
    assert web / GIB >= 8.1 + 3 + 8 * 4096 * kv_bytes_per_token(2) / GIB
    assert worker / GIB >= 28.4 + 5 + 4096 * kv_bytes_per_token(4) / GIB


def test_a_second_engine_at_the_default_share_is_refused_naming_its_setting_and_what_fits():
    first = gpu_share_check(0.9, CARD, CARD)
    free = CARD - int(first) - int(0.5 * GIB)  # and the first engine's CUDA context
    with pytest.raises(GpuMemoryRefused) as refused:
        gpu_share_check(0.9, free, CARD, setting="RERUN_GPU_MEMORY_UTILIZATION")
    message = str(refused.value)
    assert message.startswith("RERUN_GPU_MEMORY_UTILIZATION=0.9 asks for 71.3 GiB of cuda:0's 79.2 GiB")
    assert "only 7.4 GiB are free" in message
    assert "Set RERUN_GPU_MEMORY_UTILIZATION to at most 0.09" in message
    assert "CUDA_VISIBLE_DEVICES" in message


@pytest.mark.parametrize("share", [0, -0.1, 1.2])
def test_a_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(GpuMemoryRefused, match="must be a fraction"):
        gpu_share_check(share, CARD, CARD)


def test_exactly_the_free_memory_is_accepted():
    assert gpu_share_check(0.5, CARD // 2, CARD) == CARD * 0.5


def test_the_worker_engine_carries_its_own_share_and_setting(settings):
    settings.RERUN_ENGINE, settings.RERUN_MODEL = "vllm", str(smollm2_hf_path())
    settings.INFERENCE_MODEL = ""
    settings.RERUN_GPU_MEMORY_UTILIZATION = 0.6
    config = rerun_engine_config()
    assert (config.gpu_memory_utilization, config.gpu_memory_setting) == (0.6, "RERUN_GPU_MEMORY_UTILIZATION")
    engine = VllmEngine(config.model, device="cuda", quantization=None, dtype="float32",
                        gpu_memory_utilization=config.gpu_memory_utilization,
                        gpu_memory_setting=config.gpu_memory_setting)
    assert engine.engine_kwargs["gpu_memory_utilization"] == 0.6
    assert engine.gpu_memory_setting == "RERUN_GPU_MEMORY_UTILIZATION"
