"""Fused attention kernels for relative terms whose label depends on the pair (Shaw et al.
2018's clipped ``j − i``; tree relations read from a label tensor), in Triton.

Importable without Triton: :func:`runs_on` says whether the kernels run on a device, and
:func:`label_bin_attention` imports :mod:`.label_bins` (which needs Triton) on first use. The
kernels run on CUDA GPUs of compute capability 8.0 or newer (bf16 tensor cores), and on the CPU
under Triton's interpreter (``TRITON_INTERPRET=1`` set before the first use: tests).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re

import torch
from torch import Tensor

from depnmt.core import log

MIN_CAPABILITY = (8, 0)            # bf16 dot products (Ampere and newer)
MIN_TRITON = (3, 5)                # the oldest Triton for the kernels on a GPU
MIN_INTERPRETER = (3, 9)           # the oldest whose interpreter runs them (3.5's cannot loop
                                   # to a length given at run time)


def triton_version() -> tuple[int, ...] | None:
    """The installed Triton's version ``(major, minor)`` (None: not installed), read from its
    package metadata without importing it."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        release = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in re.findall(r"\d+", release)[:2])


def triton_installed(least: tuple[int, int] = MIN_TRITON) -> bool:
    """Whether a Triton of version ``least`` or newer is installed (a CUDA build of torch
    brings one; CPU builds do not)."""
    version = triton_version()
    return version is not None and version >= least


def interpreted() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``): on the CPU, in
    numpy, for tests only."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def runs_on(device: torch.device) -> bool:
    """Whether the kernels run on ``device``: a CUDA GPU of :data:`MIN_CAPABILITY` with a
    Triton of :data:`MIN_TRITON` on which a tiny attention ran (:func:`probe`), or the CPU
    under the interpreter of :data:`MIN_INTERPRETER`."""
    if interpreted():
        return device.type == "cpu" and triton_installed(MIN_INTERPRETER)
    return (device.type == "cuda" and triton_installed()
            and torch.cuda.get_device_capability(device) >= MIN_CAPABILITY
            and probe(device) is None)


_probed: dict[str, str | None] = {}


def probe(device: torch.device) -> str | None:
    """None once a tiny attention has run on ``device`` (its first use compiles a kernel: a
    machine without a C compiler or Python's headers, which Triton needs, fails there), else
    why not, warned once; the answer is kept per device."""
    key = str(device)
    if key not in _probed:
        try:
            with torch.no_grad(), torch.autocast(device.type, enabled=False):
                q = torch.ones(1, 1, 16, 16, device=device)
                pos = torch.arange(16, device=device)
                label_bin_attention(q, q, q, q[..., :4], 4, True, positions=(pos, pos, 1))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            _probed[key] = None
        except Exception as exc:  # noqa: BLE001 - any failure means: not here
            lines = str(exc).strip().splitlines()
            _probed[key] = f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:200]
            log.warn(f"the label-bins attention kernel does not run on {key} "
                     f"({_probed[key]}): relative terms take the explicit path")
    return _probed[key]


def label_bin_attention(q: Tensor, k: Tensor, v: Tensor, key_scores: Tensor | None, rows: int,
                        values: bool, *, positions: tuple[Tensor, Tensor, int] | None = None,
                        labels: Tensor | None = None, key_mask: Tensor | None = None,
                        causal: bool = False, blocks: tuple[int, int] | None = None
                        ) -> tuple[Tensor, Tensor | None]:
    """Attention with one relative term of ``rows`` labels in one fused kernel, differentiable
    (:func:`depnmt.model.kernels.label_bins.attention`, which documents the arguments)."""
    from depnmt.model.kernels import label_bins
    return label_bins.attention(q, k, v, key_scores, rows, values, positions=positions,
                                labels=labels, key_mask=key_mask, causal=causal, blocks=blocks)
