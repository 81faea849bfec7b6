"""``python -m bench latency --model``: every driver loads the model the run names."""

from __future__ import annotations

import pytest

from bench import latency
from bench.latency_drivers import MODEL_ENV, model_paths
from inference import models


def test_the_drivers_load_the_default_model_when_the_run_names_it(monkeypatch):
    monkeypatch.setenv(MODEL_ENV, "default")
    assert model_paths() == {"gguf": str(models.default_gguf_path()), "hf": str(models.default_hf_path())}
    monkeypatch.delenv(MODEL_ENV)
    assert model_paths() == {"gguf": str(models.smollm2_gguf_path()), "hf": str(models.smollm2_hf_path())}


def test_an_unknown_model_is_refused(monkeypatch, capsys):
    monkeypatch.setenv(MODEL_ENV, "llama-70b")
    with pytest.raises(ValueError, match="BENCH_LATENCY_MODEL"):
        model_paths()
    with pytest.raises(SystemExit):
        latency.parse_args(["--model", "llama-70b"])
    assert "invalid choice" in capsys.readouterr().err
