"""llama.cpp's own HTTP server (``llama-server``), built from the llama.cpp
that the product's engine runs, as the peer a hospital would otherwise run
on a CPU (issue 17).

    .venv/bin/python -m bench.llama_server build    # once per CPU type, ~10 min on 2 cores

The binary is built from the ``llama-cpp-python`` source distribution of the
version in requirements.txt (its ``vendor/llama.cpp``: the same kernels as
the engine), with the SIMD flags ``scripts/setup.sh`` gives the engine's own
build (AMX off, no ``-march=native``), two compile jobs at most (memory: a
parallel C++ build beside a model run is what the kernel killed before),
without the web UI, and kept in ``$CLINICAL_CACHE/llama-server/<cpu key>/``
beside the engine's wheel cache. Nothing in the product or the tests needs
it: only ``python -m bench batching --native N`` starts it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.processes import ROOT, ServerProcess

#: SIMD switches of scripts/setup.sh: (cmake option, /proc/cpuinfo flag).
SIMD = (("GGML_AVX", "avx"), ("GGML_AVX2", "avx2"), ("GGML_FMA", "fma"), ("GGML_F16C", "f16c"),
        ("GGML_BMI2", "bmi2"), ("GGML_AVX512", "avx512f"), ("GGML_AVX512_VNNI", "avx512_vnni"),
        ("GGML_AVX512_BF16", "avx512_bf16"))
#: A static binary with the server alone: no tests, examples, web UI, curl or TLS.
SERVER_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAVA_BUILD=OFF",
                  "-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
                  "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_CURL=OFF",
                  "-DLLAMA_OPENSSL=OFF")


def llama_cpp_python_version() -> str:
    """The engine's ``llama-cpp-python`` version (requirements.txt)."""
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("llama-cpp-python=="):
            return line.split("==", 1)[1].strip()
    raise RuntimeError("requirements.txt pins no llama-cpp-python")


def cmake_options(cpuinfo: str | None = None) -> list[str]:
    """The cmake options of the build: :data:`SERVER_OPTIONS` and each SIMD
    switch ON where this CPU has the flag (as scripts/setup.sh decides)."""
    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return list(SERVER_OPTIONS) + [f"-D{option}={'ON' if flag in flags else 'OFF'}" for option, flag in SIMD]


def binary_path() -> Path:
    """Where the built ``llama-server`` lives: keyed by the llama-cpp-python
    version and the cmake options (so by this CPU's SIMD flags)."""
    cache = Path(os.environ.get("CLINICAL_CACHE") or Path.home() / ".cache" / "clinical")
    key = hashlib.sha256(" ".join([llama_cpp_python_version(), *cmake_options()]).encode()).hexdigest()[:12]
    return cache / "llama-server" / key / "llama-server"


def build(jobs: int = 2) -> Path:
    """Build ``llama-server`` unless the cache has it.

    Returns:
        the binary's path.

    Raises:
        subprocess.CalledProcessError: pip could not fetch the source, or
            cmake failed (its output is on stderr).
    """
    target = binary_path()
    if target.is_file():
        return target
    version = llama_cpp_python_version()
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", str(work)], check=True)
        (sdist,) = work.glob("llama_cpp_python-*.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        source = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
        build_dir = work / "build"
        subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *cmake_options()], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)],
                       check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "bin" / "llama-server", target)
    return target


class NativeEngine:
    """``llama-server --parallel slots`` with the model, behind the part of
    the engine interface that ``bench batching`` drives (``start``,
    ``generate``, ``shutdown``).

    Each request is the product's prompt rendered with the GGUF file's own
    chat template (as :class:`inference.llamacpp_engine.LlamaCppEngine`
    renders it) and sent to ``/completion`` as text, greedy (``top_k`` 1,
    ``temperature`` 0), streamed, ``cache_prompt`` on (the server's slots
    and host-memory prompt cache keep the instruction prefixes). The
    server's own settings are its defaults (continuous batching, flash
    attention ``auto``) except the slots, their context (``n_ctx`` cells
    each) and the threads.

    Args:
        model: GGUF path. slots: ``--parallel``. n_ctx: cells per slot.
        threads: ``-t``/``-tb``. log_path: the server's output.
    """

    def __init__(self, model: str, *, slots: int, n_ctx: int, threads: int, log_path: Path) -> None:
        self.model, self.slots, self.n_ctx, self.threads, self.log_path = model, slots, n_ctx, threads, log_path
        self.server: ServerProcess | None = None
        self._client = None
        self._formatter = None
        #: Prompt tokens sent (``tokens_evaluated``) and those the server
        #: read (``timings.prompt_n``; the rest came from its prompt cache),
        #: over all requests.
        self.prompt_tokens_sent = 0
        self.prompt_tokens_evaluated = 0

    async def start(self) -> None:
        import httpx
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        vocab = Llama(model_path=self.model, vocab_only=True, verbose=False)
        eos = vocab.token_eos()
        self._formatter = Jinja2ChatFormatter(
            template=vocab.metadata["tokenizer.chat_template"],
            eos_token=vocab._model.token_get_text(eos) if eos != -1 else "",
            bos_token="")
        vocab.close()
        self.server = ServerProcess(
            [str(build()), "-m", self.model, "--host", "127.0.0.1", "--port", "{port}",
             "--parallel", str(self.slots), "-c", str(self.n_ctx * self.slots),
             "-t", str(self.threads), "-tb", str(self.threads), "--no-webui"],
            env={**os.environ}, log_path=self.log_path, ready_path="/health")
        self.server.wait_ready(timeout_s=180)
        self._client = httpx.AsyncClient(base_url=self.server.base_url, timeout=600)

    async def generate(self, request_id, messages, params):
        """Stream one completion as :class:`inference.base.Delta` objects
        (one per token; ``token_logprobs`` the sampled token's logprob)."""
        from inference.base import Delta

        body = {"prompt": self._formatter(messages=list(messages)).prompt, "n_predict": params.max_tokens,
                "temperature": 0, "top_k": 1, "ignore_eos": params.ignore_eos, "stream": True,
                "cache_prompt": True, "n_probs": 1}
        async with self._client.stream("POST", "/completion", json=body) as response:
            response.raise_for_status()
            first = True
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("stop"):
                    timings = chunk.get("timings") or {}
                    self.prompt_tokens_evaluated += int(timings.get("prompt_n", 0))
                    self.prompt_tokens_sent += int(chunk.get("tokens_evaluated", 0) or 0)
                    if chunk.get("content"):
                        yield Delta(text=chunk["content"])
                    return
                probs = chunk.get("completion_probabilities") or [{}]
                yield Delta(text=chunk.get("content", ""), token_logprobs=(float(probs[0].get("logprob", 0.0)),),
                            prompt_tokens=None if not first else chunk.get("tokens_evaluated"))
                first = False

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self.server is not None:
            self.server.stop()


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"]:
        print(__doc__)
        return 2
    print(build())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
