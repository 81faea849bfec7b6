"""The llama-server peer of ``bench batching``: its build options follow the
CPU as the engine's own build does, and its throughput is a target."""

from __future__ import annotations

from bench import batching, llama_server

AVX2_ONLY = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c bmi2\n"
AVX512 = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c bmi2 avx512f avx512_vnni avx512_bf16\n"


def test_simd_switches_follow_the_cpu_flags_and_amx_stays_off():
    options = llama_server.cmake_options(AVX2_ONLY)
    assert "-DGGML_AVX2=ON" in options and "-DGGML_AVX512=OFF" in options
    assert "-DGGML_AVX512=ON" in llama_server.cmake_options(AVX512)
    assert "-DGGML_AMX_INT8=OFF" in options and "-DGGML_NATIVE=OFF" in options
    assert "-DLLAMA_BUILD_SERVER=ON" in options and "-DLLAMA_USE_PREBUILT_UI=OFF" in options


def test_the_build_is_of_the_engines_llama_cpp_python_version():
    version = llama_server.llama_cpp_python_version()
    assert version.count(".") == 2
    assert llama_server.binary_path().name == "llama-server"


def _run(engine, clients, tps):
    return {"engine": engine, "clients": clients, "output_tokens_per_s": tps,
            "ttft_ms": {"p50": 300, "p95": 500}, "tpot_ms": {"p50": 80}}


def test_throughput_against_llama_server_with_the_same_slots_is_a_target():
    report = {"batch": [8], "runs": [_run("serial", 1, 11.0), _run("batched-8", 1, 11.0),
                                      _run("batched-8", 8, 22.0), _run("llama-server-8", 8, 24.0)]}
    rows = {name: (figure, met) for name, figure, met in batching.targets(report)["batched-8"]}
    figure, met = rows["output tokens/s at 8 clients >= 0.9x llama-server with the same slots"]
    assert met and figure.startswith("0.92x")
    report["runs"][-1] = _run("llama-server-8", 8, 30.0)
    rows = {name: (figure, met) for name, figure, met in batching.targets(report)["batched-8"]}
    figure, met = rows["output tokens/s at 8 clients >= 0.9x llama-server with the same slots"]
    assert not met and figure.startswith("0.73x")
