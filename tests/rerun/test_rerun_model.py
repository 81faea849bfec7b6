"""The re-run runs the replicas' model: empty RERUN_MODEL resolves to the
full-precision weights of INFERENCE_MODEL, a RERUN_MODEL of another
architecture is refused unless RERUN_MODEL_MISMATCH_OK. Real checkpoints:
SmolLM2 (GGUF and its converted folder) and the default Qwen2.5 GGUF."""

from __future__ import annotations

import json
import shutil

import pytest

from clinical.rerun.worker_engine import RerunModelRefused, rerun_engine_config, rerun_model, rerun_model_check
from inference import weights
from inference.weights import default_gguf_path, default_hf_path, smollm2_gguf_path, smollm2_hf_path


@pytest.fixture
def rerun_settings(settings):
    settings.RERUN_ENGINE = "vllm"
    settings.RERUN_MODEL = ""
    settings.RERUN_MODEL_MISMATCH_OK = False
    return settings


def test_empty_rerun_model_is_the_folder_converted_from_the_replicas_gguf(rerun_settings):
    rerun_settings.INFERENCE_MODEL = str(smollm2_gguf_path())
    assert rerun_model() == str(smollm2_hf_path())
    assert rerun_engine_config().model == str(smollm2_hf_path())
    assert rerun_engine_config().quantization == "none" and rerun_engine_config().dtype == "float32"


def test_empty_rerun_model_with_the_default_replica_model_is_the_default_converted_folder(rerun_settings):
    rerun_settings.INFERENCE_MODEL = ""
    assert rerun_model() == str(default_hf_path())


def test_an_unquantized_hf_replica_model_is_verified_with_its_own_weights(rerun_settings):
    rerun_settings.INFERENCE_MODEL = str(smollm2_hf_path())  # quantized to FP8 on the fly on a GPU
    assert rerun_model_check() == str(smollm2_hf_path())


def test_a_pre_quantized_replica_model_needs_rerun_model_named(rerun_settings, tmp_path):
    fp8 = tmp_path / "smollm2-fp8-dynamic"
    shutil.copytree(smollm2_hf_path(), fp8, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((fp8 / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors"}
    (fp8 / "config.json").write_text(json.dumps(config))
    rerun_settings.INFERENCE_MODEL = str(fp8)
    with pytest.raises(RerunModelRefused, match="pre-quantized .compressed-tensors.; set RERUN_MODEL"):
        rerun_model()
    rerun_settings.RERUN_MODEL = str(smollm2_hf_path())  # its full-precision source, named
    assert rerun_model_check() == str(smollm2_hf_path())


def test_a_gguf_with_no_converted_folder_is_refused_naming_rerun_model(rerun_settings, tmp_path):
    other = tmp_path / "other-model.Q4_1.gguf"
    other.write_bytes(b"GGUF")  # only its name and folder matter here
    rerun_settings.INFERENCE_MODEL = str(other)
    with pytest.raises(RerunModelRefused, match="no full-precision folder.*set RERUN_MODEL"):
        rerun_model()


@pytest.mark.skipif(not default_gguf_path().is_file(), reason="the default model is not assembled here")
@pytest.mark.slow  # reads the default 1.5B model
def test_a_rerun_model_of_another_architecture_is_refused_with_each_difference(rerun_settings):
    rerun_settings.INFERENCE_MODEL = ""  # the default Qwen2.5-1.5B
    rerun_settings.RERUN_MODEL = str(smollm2_hf_path())
    with pytest.raises(RerunModelRefused) as refused:
        rerun_model_check()
    message = str(refused.value)
    assert "RERUN_MODEL" in message and "RERUN_MODEL_MISMATCH_OK=1" in message
    assert "model_type: 'qwen2' != 'llama'" in message and "num_hidden_layers: 28 != 30" in message
    rerun_settings.RERUN_MODEL_MISMATCH_OK = True
    assert rerun_model_check() == str(smollm2_hf_path())


def test_the_same_model_in_gguf_and_full_precision_matches(rerun_settings):
    assert weights.architecture_mismatch(str(smollm2_gguf_path()), str(smollm2_hf_path())) == []
    rerun_settings.INFERENCE_MODEL = str(smollm2_gguf_path())
    rerun_settings.RERUN_MODEL = str(smollm2_hf_path())
    assert rerun_model_check() == str(smollm2_hf_path())


def test_a_model_that_cannot_be_read_here_is_not_refused(rerun_settings, tmp_path):
    rerun_settings.INFERENCE_MODEL = str(smollm2_gguf_path())
    rerun_settings.RERUN_MODEL = "Qwen/Qwen2.5-7B-Instruct"  # a hub name: nothing local to compare
    assert weights.architecture_mismatch(rerun_settings.INFERENCE_MODEL, rerun_settings.RERUN_MODEL) is None
    assert rerun_model_check() == "Qwen/Qwen2.5-7B-Instruct"
