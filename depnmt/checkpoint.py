"""Checkpoints: atomic writes and checked loads.

A checkpoint is serialised to memory, written to a temporary file in the same folder, fsynced
and renamed over the old one (:func:`depnmt.textio.atomic_open`): a process killed at any moment
(even SIGKILL during the write) leaves the previous good checkpoint in place.

``DEPNMT_CHECKPOINT_WRITE_DELAY`` (seconds) pauses half-way through writing the bytes; it exists
only so that the tests can kill a run *during* a checkpoint write deterministically.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import torch

from . import __version__
from .errors import DepnmtError
from .textio import atomic_open

FORMAT_VERSION = 1


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically write ``state`` (plus format/version stamps) to ``path``."""
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, "depnmt_version": __version__, **state}, buffer)
    data = buffer.getvalue()
    delay = float(os.environ.get("DEPNMT_CHECKPOINT_WRITE_DELAY", "0") or 0)
    with atomic_open(path, "wb") as fh:
        half = len(data) // 2
        fh.write(data[:half])
        if delay:
            fh.flush()
            time.sleep(delay)
        fh.write(data[half:])


def load_checkpoint(path: Path, expected_model: dict | None = None) -> dict[str, Any]:
    """Load ``path`` onto the CPU and check it fits this depnmt and (optionally) this model.

    Raises :class:`DepnmtError` naming the file when it is unreadable, from another checkpoint
    format, or was trained with another architecture or positional scheme than ``expected_model``
    (a :class:`~depnmt.model.transformer.ModelConfig` dict).
    """
    if not path.exists():
        raise DepnmtError(f"{path}: no checkpoint here")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise DepnmtError(f"{path}: not a readable depnmt checkpoint ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise DepnmtError(f"{path}: not a depnmt checkpoint")
    if state["format_version"] != FORMAT_VERSION:
        raise DepnmtError(f"{path}: checkpoint format {state['format_version']} (depnmt "
                          f"{state.get('depnmt_version')}) cannot be read by depnmt {__version__} "
                          f"(format {FORMAT_VERSION})")
    if expected_model is not None:
        check_same_model(path, state.get("model_config", {}), expected_model)
    return state


def check_same_model(path: Path, found: dict, expected: dict) -> None:
    """Error naming the first differing setting (scheme first: the most common mistake)."""
    keys = ["scheme"] + sorted(k for k in expected if k != "scheme")
    for key in keys:
        if found.get(key) != expected.get(key):
            raise DepnmtError(f"{path}: checkpoint was trained with {key}={found.get(key)!r} but "
                              f"this model is configured with {key}={expected.get(key)!r}")
