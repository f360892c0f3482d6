"""``train --max-tokens`` when not given: 4096 on the CPU, 25,000 on a GPU with the memory a
Transformer-base needs for it (measured on an H200), fewer on a smaller GPU; a value given is
kept, and ``--resume`` keeps the run's own."""

from __future__ import annotations

import pytest
import torch

from depnmt.core import device
from depnmt.training import config as trainconfig


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device of ``gib`` GiB (set the returned dict's ``gib``)."""
    memory = {"gib": 80.0}
    monkeypatch.setattr(device, "resolve_device",
                        lambda name: torch.device("cpu" if name == "cpu" else "cuda"))
    monkeypatch.setattr(device, "gpu_memory_gib", lambda dev: memory["gib"])
    return memory


def max_tokens(tmp_path, **values) -> int:
    config = trainconfig.load({"input": str(tmp_path / "bpe"), "output": str(tmp_path / "m"),
                             **values})
    return config.training.max_tokens


@pytest.mark.parametrize("gib,expected", [(141.0, 25_000), (80.0, 25_000), (40.0, 25_000),
                                          (24.0, 17_000), (16.0, 11_000), (4.0, 4096)])
def test_a_gpu_gets_what_its_memory_holds(gpu, gib, expected, tmp_path):
    gpu["gib"] = gib
    assert max_tokens(tmp_path, device="cuda") == expected


def test_the_cpu_keeps_4096_and_a_given_value_is_kept(gpu, tmp_path):
    assert max_tokens(tmp_path, device="cpu") == 4096
    assert max_tokens(tmp_path, device="cuda", **{"max-tokens": 3000}) == 3000


def test_the_default_is_recorded_for_resume(gpu, tmp_path):
    config = trainconfig.load({"input": str(tmp_path / "bpe"), "output": str(tmp_path / "m"),
                             "device": "cuda"})
    assert config.settings["max-tokens"] == 25_000
