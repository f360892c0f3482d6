"""Checkpoints: atomic writes, safe and verified loads.

* **Atomic and durable.** A checkpoint is serialised to memory, written to a temporary file in
  the same folder, fsynced, renamed over the old one and the folder fsynced
  (:func:`depnmt.core.textio.atomic_open`): a process killed at any moment (even SIGKILL during the
  write) leaves the previous good checkpoint in place, and a saved one survives a power cut. A
  failed write (disk full) removes its temporary file and is an error naming the file;
  the previous checkpoint stays. Temporary files a SIGKILL leaves behind are removed when the
  next training starts (:func:`depnmt.storage.modeldir.lock_for_writing`).
* **Nothing runs on load.** A checkpoint holds tensors and plain data only (dicts, lists,
  tuples, str, int, float, bool, None: model and optimizer state dicts, the schedule, progress,
  Python's ``random`` state as a tuple of ints, torch's RNG states as byte tensors) and is loaded
  with ``torch.load(weights_only=True)``, whose unpickler builds only those types: a file that
  names any other type (a pickle whose ``__reduce__`` calls ``os.system``) is refused with
  ``FILE: not a depnmt checkpoint (...)`` before anything in it is called. Checkpoints of this
  format written by earlier versions hold the same types, so they load unchanged.
* **Verified.** ``sha256`` in the checkpoint is the SHA-256 of everything else in it
  (:func:`content_digest`: every tensor's dtype, shape and bytes and every plain value, in
  order). It travels inside the file, so there is no second file whose write a kill could
  separate from the checkpoint's (a sidecar written after the checkpoint could be missing or
  stale when a kill falls between the two renames, and would then reject a good checkpoint):
  the rename that installs a checkpoint installs its hash. On load the digest is recomputed and
  compared; a file whose bytes were changed (e.g. 4 KiB zeroed) either no longer unpickles or
  gives other contents, both errors naming the file. Checkpoints without the field (written by
  earlier versions of depnmt) load with a warning.

``DEPNMT_CHECKPOINT_WRITE_DELAY`` (seconds) pauses half-way through writing the bytes; it exists
only so that the tests can kill a run *during* a checkpoint write deterministically.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.core.textio import atomic_open
from depnmt.version import __version__

FORMAT_VERSION = 1
DIGEST = "sha256"


def content_digest(state: Any) -> str:
    """SHA-256 (hex) of a checkpoint's contents: tensors (dtype, shape, bytes) and plain values,
    walked in order. Equal for a state before ``torch.save`` and after ``torch.load``."""
    h = hashlib.sha256()
    _feed(h, state)
    return h.hexdigest()


def _feed(h, x: Any) -> None:
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(x, dict):
        h.update(f"D{len(x)}:".encode())
        for key, value in x.items():
            _feed(h, key)
            _feed(h, value)
    elif isinstance(x, (list, tuple)):
        h.update(f"{'L' if isinstance(x, list) else 'U'}{len(x)}:".encode())
        for value in x:
            _feed(h, value)
    elif isinstance(x, float):
        h.update(f"F{x.hex()};".encode())
    elif x is None or isinstance(x, (bool, int, str)):
        h.update(f"{type(x).__name__}{x!r};".encode())
    else:
        raise TypeError(f"a checkpoint holds tensors and plain data only, not {type(x).__name__}")


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically write ``state`` (plus format/version stamps and its digest) to ``path``."""
    state = {"format_version": FORMAT_VERSION, "depnmt_version": __version__, **state}
    state[DIGEST] = content_digest(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    delay = float(os.environ.get("DEPNMT_CHECKPOINT_WRITE_DELAY", "0") or 0)
    # atomic_open: a failed write (disk full) is an error naming ``path``; the previous
    # checkpoint stays intact and the temporary file is removed
    with atomic_open(path, "wb") as fh:
        half = len(data) // 2
        fh.write(data[:half])
        if delay:
            fh.flush()
            time.sleep(delay)
        fh.write(data[half:])


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load ``path`` onto the CPU (tensors and plain data only), verify its digest and check it
    fits this depnmt (:func:`depnmt.storage.modeldir.load_model_checkpoint` also checks it holds a
    given
    model).

    Raises :class:`DepnmtError` naming the file when it is unreadable, holds anything but
    tensors and plain data, is corrupted or from another checkpoint format. The returned state
    has no digest.
    """
    if not path.exists():
        raise DepnmtError(f"{path}: no checkpoint here")
    try:
        with warnings.catch_warnings():     # e.g. "Detected pickle protocol 4" on foreign files
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise DepnmtError(f"{path}: not a depnmt checkpoint ({_refused(str(exc))}; nothing in it "
                          f"was run)") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise DepnmtError(f"{path}: not a readable depnmt checkpoint ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise DepnmtError(f"{path}: not a depnmt checkpoint")
    if state["format_version"] != FORMAT_VERSION:
        raise DepnmtError(f"{path}: checkpoint format {state['format_version']} (depnmt "
                          f"{state.get('depnmt_version')}) cannot be read by depnmt {__version__} "
                          f"(format {FORMAT_VERSION})")
    recorded = state.pop(DIGEST, None)
    if recorded is None:
        warn(f"{path}: no SHA-256 recorded (saved by depnmt {state.get('depnmt_version')}); "
             f"loaded without an integrity check")
    elif content_digest(state) != recorded:
        raise DepnmtError(f"{path}: corrupted checkpoint (its contents do not match the SHA-256 "
                          f"recorded when it was saved)")
    return state


def peek_checkpoint(path: Path) -> dict[str, Any] | None:
    """The state of checkpoint ``path`` as saved, memory-mapped (its tensors are not read) and
    not verified (tensors and plain data only, as :func:`load_checkpoint` reads); None when
    the file is unreadable or holds no mapping: a caller that needs it loads it and is told
    why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - any unreadable file
        return None
    return state if isinstance(state, dict) else None


def recorded_digest(path: Path) -> str | None:
    """The SHA-256 that checkpoint ``path`` records of its contents (not verified), read
    without reading its tensors (:func:`peek_checkpoint`); None when it records none or is
    unreadable."""
    return (peek_checkpoint(path) or {}).get(DIGEST)


def _refused(message: str) -> str:
    """What torch's weights-only unpickler refused, from its (long) message."""
    found = re.search(r"GLOBAL (\S+)", message)
    if found:
        return f"it holds {found.group(1)}, which a checkpoint never does"
    detail = re.search(r"WeightsUnpickler error: \s*(.+)", message)
    return f"not tensors and plain data: {detail.group(1) if detail else message.splitlines()[0]}"
