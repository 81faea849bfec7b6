"""``python -m bench latency``: every driver loads the model the run names;
with ``--native SLOTS`` llama.cpp's own server, built from the engine's
llama.cpp for this CPU, is the peer of the full stack, with its throughput
target in the report."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bench import drivers, latency
from bench.corpora import Workload
from bench.drivers import MODEL_ENV, N_CTX, NativeServerDriver, model_paths
from inference import weights

ROOT = Path(__file__).resolve().parents[2]
#: A real report of the default model.
REPORT = ROOT / "docs" / "benchmarks" / "latency-default" / "latency.json"


def _without_native() -> dict:
    """The real report as a run without ``--native`` would have written it."""
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    report["runs"] = [run for run in report["runs"] if run["driver"] != "native"]
    report["engine_settings"]["llamacpp"].pop("native", None)
    return report


def test_native_server_gets_the_slots_the_default_model_and_a_context_per_slot(monkeypatch, tmp_path):
    monkeypatch.setenv(MODEL_ENV, "default")
    driver = NativeServerDriver(slots=3, log_dir=tmp_path, threads=2)
    driver.binary = "/cache/llama-server"  # what start() sets from the build
    command, env = driver.command()
    assert command[0] == "/cache/llama-server" and env == {}
    flags = dict(zip(command[1::2], command[2::2]))
    assert flags["-m"] == str(weights.default_gguf_path())
    assert flags["--parallel"] == "3" and flags["-c"] == str(3 * N_CTX)
    assert flags["-t"] == flags["-tb"] == "2"
    with pytest.raises(ValueError, match="slot"):
        NativeServerDriver(slots=0, log_dir=tmp_path)


def test_native_server_fixes_the_output_length_with_its_own_ignore_eos(tmp_path):
    driver = NativeServerDriver(slots=3, log_dir=tmp_path)
    driver._fixed_length = driver.fixed_length_fields()  # as start() reads it
    body = driver.body("Left knee effusion.", Workload("short", ("x",), 32))
    assert body["ignore_eos"] is True and "logit_bias" not in body
    assert body["max_tokens"] == 32 and body["temperature"] == 0.0 and body["stream"] is True
    assert body["messages"][-1]["content"].endswith("Left knee effusion.")


def test_native_flag_needs_slots_and_the_llamacpp_engine(capsys):
    assert latency.parse_args(["--native", "3", "--engines", "llamacpp"]).native == 3
    assert latency.parse_args([]).native == 0
    for argv in (["--native", "3", "--engines", "vllm"], ["--native", "-1"]):
        with pytest.raises(SystemExit):
            latency.parse_args(argv)
    assert "needs --engines with llamacpp" in capsys.readouterr().err


def _with_native(report: dict, tokens_per_s: float) -> dict:
    report = copy.deepcopy(report)
    stack8 = latency.find(report["runs"], "stack", "llamacpp", "short", concurrency=8)
    report["runs"].append(stack8 | {"driver": "native", "output_tokens_per_s": tokens_per_s})
    report["engine_settings"]["llamacpp"]["native"] = {"slots": 3}
    return report


def test_stack_throughput_against_the_native_server_is_a_target_only_where_it_ran():
    report = _without_native()
    assert "stack_vs_native_tokens_per_s_8" not in latency.ratios(report)["llamacpp"]
    stack8 = latency.find(report["runs"], "stack", "llamacpp", "short", concurrency=8)["output_tokens_per_s"]

    slower = latency.ratios(_with_native(report, stack8 / 2))["llamacpp"]["stack_vs_native_tokens_per_s_8"]
    assert slower["met"] and slower["value"] == pytest.approx(2.0, abs=0.01) and slower["slots"] == 3
    faster = latency.ratios(_with_native(report, stack8 * 2))["llamacpp"]["stack_vs_native_tokens_per_s_8"]
    assert not faster["met"] and faster["value"] == pytest.approx(0.5, abs=0.01)


def test_report_shows_the_native_server_row_and_says_the_engine_batches():
    report = _without_native()
    plain = copy.deepcopy(report)
    plain["ratios"] = latency.ratios(plain)
    text = latency.markdown(plain)
    assert "native server" not in text.split("## Where the time goes")[0]
    assert "decodes up to 3 requests together" in text and "cannot batch" not in text

    native = _with_native(report, 8.0)
    native["ratios"] = latency.ratios(native)
    text = latency.markdown(native)
    assert "| output tokens/s at 8 clients, full stack / llama.cpp's native server (short) | ≥ 0.9× |" in text
    assert "| llama.cpp's native server (llama-server) | 8 |" in text


def test_the_drivers_load_the_default_model_when_the_run_names_it(monkeypatch):
    monkeypatch.setenv(MODEL_ENV, "default")
    assert model_paths() == {"gguf": str(weights.default_gguf_path()), "hf": str(weights.default_hf_path())}
    monkeypatch.delenv(MODEL_ENV)
    assert model_paths() == {"gguf": str(weights.smollm2_gguf_path()), "hf": str(weights.smollm2_hf_path())}


def test_an_unknown_model_is_refused(monkeypatch, capsys):
    monkeypatch.setenv(MODEL_ENV, "llama-70b")
    with pytest.raises(ValueError, match="BENCH_LATENCY_MODEL"):
        model_paths()
    with pytest.raises(SystemExit):
        latency.parse_args(["--model", "llama-70b"])
    assert "invalid choice" in capsys.readouterr().err


AVX2_ONLY = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c bmi2\n"
AVX512 = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c bmi2 avx512f avx512_vnni avx512_bf16\n"


def test_simd_switches_follow_the_cpu_flags_and_amx_stays_off():
    options = drivers.cmake_options(AVX2_ONLY)
    assert "-DGGML_AVX2=ON" in options and "-DGGML_AVX512=OFF" in options
    assert "-DGGML_AVX512=ON" in drivers.cmake_options(AVX512)
    assert "-DGGML_AMX_INT8=OFF" in options and "-DGGML_NATIVE=OFF" in options
    assert "-DLLAMA_BUILD_SERVER=ON" in options and "-DLLAMA_USE_PREBUILT_UI=OFF" in options


def test_the_build_is_of_the_engines_llama_cpp_python_version():
    version = drivers.llama_cpp_python_version()
    assert version.count(".") == 2
    assert drivers.binary_path().name == "llama-server"
