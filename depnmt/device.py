"""Device selection and mixed precision (AMP) settings."""

from __future__ import annotations

import contextlib

import torch

from .errors import DepnmtError


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda[:N]`` must exist or it is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DepnmtError(f"unknown device '{name}' (use auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DepnmtError(f"--device {name} was asked for but CUDA is not available here "
                              f"(torch {torch.__version__}, cuda={torch.version.cuda}); use "
                              f"--device cpu or --device auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DepnmtError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise DepnmtError(f"unsupported device '{name}' (use auto, cpu, cuda or cuda:N)")
    return device


def amp_dtype(device: torch.device, enabled: bool) -> torch.dtype | None:
    """bfloat16 on GPUs that support it, float16 otherwise; ``None`` = full precision (CPU)."""
    if not enabled or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast(device: torch.device, dtype: torch.dtype | None):
    """An autocast context for ``dtype`` (a no-op context when ``dtype`` is None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """Loss scaling is needed only for float16."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
