"""Shared test fixtures: no progress bars, fp32 training, paths to ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("DEPNMT_NO_PROGRESS", "1")
# the same numerics on every machine: `--precision auto` would pick bf16 only on CPUs with native
# bf16 (this one, not every CI runner); tests of bf16 and auto ask for them explicitly
os.environ.setdefault("DEPNMT_PRECISION", "fp32")
# the suite runs in parallel (pytest-xdist, `-n auto` in pyproject.toml): each worker, and the
# commands it starts, gets its share of the cores instead of every one of them
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(
        1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the repository (CI provides it); skip when absent."""
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data not present")
    return SHARED_DATA


@pytest.fixture
def fresh_dynamo(monkeypatch):
    """TorchDynamo's caches and counters fresh, and ``train --compile``'s backend ``eager``
    (traced as inductor traces, no code generated) unless a test sets another."""
    import torch
    monkeypatch.setenv("DEPNMT_COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
