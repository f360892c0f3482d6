"""Device selection and mixed precision (AMP) settings.

Training precision (``depnmt train --precision``): ``fp32``; ``bf16`` / ``fp16`` autocast (the
matrix multiplies in 16 bits; parameters, optimizer states, the loss and its log-softmax, and
the attention softmax stay in fp32); ``auto`` = bf16 on CUDA GPUs of compute capability 8.0 or
later (Ampere on: bf16 tensor cores) and fp16 with loss scaling on older ones (V100, T4: there
torch emulates bf16, slowly, though ``torch.cuda.is_bf16_supported()`` says yes), bf16 on CPUs
that multiply bf16 matrices in hardware, fp32 on every other CPU (``train`` says so in one
line: :func:`precision_note`). An explicit ``bf16`` on a GPU before 8.0 trains with a warning
that it is emulated (an error where torch cannot run bf16 there at all); on a CPU without native
bf16 it trains, emulated and slower than fp32.

**Native bf16 on the CPU** (:func:`cpu_bf16_missing`; the flags are read once per process)
needs all three:

* the hardware: an ``avx512_bf16`` or ``amx_bf16`` flag in ``/proc/cpuinfo`` (none: not Linux,
  or an AVX2 / plain AVX-512 CPU);
* torch's CPU kernels at an AVX-512 level: ``torch.backends.cpu.get_cpu_capability()``, which
  honours ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``: off);
* oneDNN, which runs the bf16 matrix multiplies, not capped below AVX512_CORE_BF16 by
  ``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``; ``AVX2``, ``AVX512_CORE``,
  ...: off). Capped at AVX2, oneDNN has no bf16 LSTM at all, so GPS's path LSTM runs in fp32
  there (:mod:`depnmt.model.schemes.gps`).

``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` thus makes a CPU with AVX512-BF16 behave
as an AVX2-only one (the tests run the bf16 paths that way).
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Callable, Iterator, Mapping

import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.core.optionspec import PRECISION

PRECISIONS = PRECISION.choices
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
ONEDNN_ISA_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")     # the first one set wins
# oneDNN's ISAs below AVX512_CORE_BF16 (its partial order: SSE41 < AVX < AVX2 < AVX2_VNNI <
# AVX2_VNNI_2; AVX2 < AVX512_CORE < AVX512_CORE_VNNI < AVX512_CORE_BF16 < AVX10_1_512 < ...):
# capped at one of them, oneDNN multiplies no bf16 in hardware. Any other value (DEFAULT, ALL,
# an AMX level, one oneDNN does not know and ignores) leaves the hardware's ISA.
ONEDNN_ISAS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                                      "AVX512_CORE", "AVX512_CORE_VNNI"})
ONEDNN_CACHE_VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE_CAPACITY = 64      # primitives; oneDNN's default is 1,024


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


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty where that file is absent)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags")
            for flag in line.partition(":")[2].split()}


@functools.lru_cache(maxsize=1)
def this_cpu_flags() -> frozenset[str]:
    """:func:`cpu_flags` of this machine, read once (the path LSTM asks at every batch)."""
    return frozenset(cpu_flags())


# The CPU flags that choose torch's and oneDNN's kernels (and so a run's exact numbers)
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def machine_record(device: torch.device) -> dict:
    """What a run's numbers depend on beyond its data and settings, for its manifest: the
    device (and a GPU's name), torch's CPU kernel level, oneDNN's ISA cap, the CPU's ISA
    flags and torch's thread count (bf16 and even fp32 results follow the kernels a machine
    gets, so two runs are comparable bit for bit only on the same record)."""
    record = {"device": str(device), "torch": torch.__version__,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "onednn_max_isa": onednn_max_isa() or None,
              "cpu_flags": sorted(set(ISA_FLAGS) & this_cpu_flags()),
              "threads": torch.get_num_threads()}
    if device.type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(device)
    return record


def onednn_max_isa(environ: Mapping[str, str] = os.environ) -> str:
    """The ISA that ``ONEDNN_MAX_CPU_ISA`` (else ``DNNL_MAX_CPU_ISA``) caps oneDNN at, upper
    case as oneDNN compares it; ``""`` when neither is set."""
    return next((environ[var] for var in ONEDNN_ISA_VARS if environ.get(var)), "").upper()


def cpu_bf16_missing(flags: set[str] | frozenset[str] | None = None,
                     capability: str | None = None, onednn_isa: str | None = None) -> str | None:
    """Why torch cannot multiply bf16 matrices in hardware on this CPU (a clause for a
    message), None when it can (see the module docstring). ``flags`` (:func:`cpu_flags`),
    ``capability`` (``torch.backends.cpu.get_cpu_capability()``) and ``onednn_isa``
    (:func:`onednn_max_isa`) default to this process's."""
    flags = this_cpu_flags() if flags is None else flags
    if not NATIVE_BF16_FLAGS & flags:
        return "this CPU has no AVX512-BF16 or AMX-BF16 (no avx512_bf16 or amx_bf16 flag)"
    capability = torch.backends.cpu.get_cpu_capability() if capability is None else capability
    if not capability.upper().startswith("AVX512"):
        return (f"torch runs its CPU kernels at level {capability} (ATEN_CPU_CAPABILITY), "
                f"without AVX-512")
    isa = onednn_max_isa() if onednn_isa is None else onednn_isa.upper()
    if isa in ONEDNN_ISAS_WITHOUT_BF16:
        return f"oneDNN is capped at {isa} (ONEDNN_MAX_CPU_ISA), below AVX512_CORE_BF16"
    return None


def cpu_has_native_bf16(flags: set[str] | frozenset[str] | None = None,
                        capability: str | None = None, onednn_isa: str | None = None) -> bool:
    """Whether torch multiplies bf16 matrices in hardware on this CPU (there oneDNN's bf16 GEMM
    is ~2× faster than fp32; on AVX2/plain AVX-512 CPUs bf16 is emulated and slower than fp32):
    :func:`cpu_bf16_missing` finds no reason against it."""
    return cpu_bf16_missing(flags, capability, onednn_isa) is None


def train_precision(device: torch.device, name: str = "auto",
                    native_bf16: bool | None = None) -> torch.dtype | None:
    """The autocast dtype of ``--precision name`` on ``device`` (None = fp32); see the module
    docstring. ``native_bf16`` overrides the CPU detection (tests)."""
    if name not in PRECISIONS:
        raise DepnmtError(f"unknown precision '{name}' (use {', '.join(PRECISIONS)})")
    if name == "fp32":
        return None
    if device.type == "cuda":
        return _gpu_precision(device, name)
    if name == "fp16":
        raise DepnmtError("--precision fp16 needs a CUDA GPU; on the CPU use bf16, fp32 or auto")
    if name == "auto":
        native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
        return torch.bfloat16 if native else None
    return torch.bfloat16


def precision_note(device: torch.device, name: str) -> str | None:
    """The line ``train`` prints when ``--precision name`` on ``device`` trains in fp32 because
    the CPU has no native bf16 (``auto``; see :func:`cpu_bf16_missing`), None otherwise."""
    if name != "auto" or device.type != "cpu":
        return None
    reason = cpu_bf16_missing()
    if reason is None:
        return None
    return (f"--precision auto: {reason}, so training runs in fp32 (slower than bf16 on a CPU "
            f"with AVX512-BF16 or AMX)")


def _gpu_precision(device: torch.device, name: str) -> torch.dtype:
    """``auto``, ``bf16`` or ``fp16`` on the CUDA ``device`` (see the module docstring)."""
    major, minor = torch.cuda.get_device_capability(device)
    if major >= 8 or name == "fp16":
        return DTYPES["bf16" if name == "auto" else name]
    if name == "auto":
        return torch.float16
    gpu = f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"
    if not torch.cuda.is_bf16_supported():
        raise DepnmtError(f"--precision bf16: this GPU ({gpu}) does not support bfloat16; use "
                          f"fp16, fp32 or auto")
    warn(f"--precision bf16: this GPU ({gpu}) has no bf16 tensor cores (8.0 on): bf16 is "
         f"emulated and slow; fp16 (or auto) trains faster")
    return torch.bfloat16


def precision_name(dtype: torch.dtype | None) -> str:
    """``None`` -> ``fp32``, ``torch.bfloat16`` -> ``bf16``, ``torch.float16`` -> ``fp16``."""
    return {v: k for k, v in DTYPES.items()}[dtype]


def autocast(device: torch.device, dtype: torch.dtype | None):
    """An autocast context for ``dtype`` (a no-op context when ``dtype`` is None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


# torch >= 2.4 asks autocast per device type; torch 2.3 has functions for the CPU and the GPU
PER_DEVICE_AUTOCAST = hasattr(torch, "get_autocast_dtype")


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on ``device_type`` ("cpu", "cuda") here, None when it is
    off. torch < 2.4 has no per-device ``torch.is_autocast_enabled(device_type)``: there the CPU
    and the GPU have functions of their own."""
    if PER_DEVICE_AUTOCAST:
        on = torch.is_autocast_enabled(device_type)
        return torch.get_autocast_dtype(device_type) if on else None
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """Loss scaling is needed only for float16."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def bound_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> None:
    """Cap oneDNN's primitive cache at ``capacity`` unless ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
    is set already. bf16 matrix multiplies on the CPU run through oneDNN, which keeps one
    primitive (with its buffers) per input shape, up to 1,024; length-bucketed batches bring a
    new shape almost every batch, so the peak RSS of a bf16 run grew with every update
    (docs/performance.md, "Memory").
    A training step uses a few dozen primitives, so 64 keeps its reuse. oneDNN reads the
    variable once, when the process creates its first primitive: call this before any
    computation (``depnmt train`` does)."""
    os.environ.setdefault(ONEDNN_CACHE_VAR, str(capacity))


# Attention kernels a search may use on a GPU: every fused SDPA backend but cuDNN's, which
# builds an execution plan for each new shape, and a search's shapes change at every step (the
# keys grow by one, sentences leave the batch).
SEARCH_SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def search_attention(device: torch.device):
    """A context for decoding on ``device``: on CUDA, scaled dot-product attention restricted to
    :data:`SEARCH_SDPA_BACKENDS` (where this torch can restrict it); elsewhere a no-op."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:                 # torch < 2.3: no cuDNN backend to leave out
        return contextlib.nullcontext()
    return sdpa_kernel([getattr(SDPBackend, name) for name in SEARCH_SDPA_BACKENDS])


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device running out of memory: CUDA's ``OutOfMemoryError``, or on
    the CPU the allocator's ``RuntimeError`` ("can't allocate memory") or a ``MemoryError``."""
    return (isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError))
            or isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


@contextlib.contextmanager
def out_of_memory_as(message: Callable[[], str]) -> Iterator[None]:
    """The device running out of memory in the block (:func:`out_of_memory`) as one
    ``DepnmtError(message())``, the message made when it happens (what to lower); any other
    error passes through."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:   # torch.OutOfMemoryError is a RuntimeError
        if not out_of_memory(exc):
            raise
        raise DepnmtError(message()) from None


# `train --max-tokens` when not given: the CPU's, and on a GPU what a Transformer-base with a
# 32k vocabulary fits (one H200, bf16: peak 24.7 GiB for abs and 26.7 GiB for abs+dep+rel at
# 25,000 target tokens, docs/gpu.md), scaled down on GPUs with less memory
TRAIN_MAX_TOKENS_CPU, TRAIN_MAX_TOKENS_GPU = 4096, 25_000
GIB_PER_1K_TOKENS = 1.1         # the measured ~1.0 GiB per 1,000 tokens, with room to spare


def train_max_tokens(name: str) -> int:
    """``train --max-tokens``'s default on device ``name`` (``auto``, ``cpu``, ``cuda[:N]``):
    :data:`TRAIN_MAX_TOKENS_CPU` on the CPU; on a GPU :data:`TRAIN_MAX_TOKENS_GPU`, or on one
    with less memory than that needs, the thousands of tokens that 80 % of its memory holds
    (never below the CPU's)."""
    device = resolve_device(name)
    if device.type != "cuda":
        return TRAIN_MAX_TOKENS_CPU
    fits = int(0.8 * gpu_memory_gib(device) / GIB_PER_1K_TOKENS) * 1000
    return max(TRAIN_MAX_TOKENS_CPU, min(TRAIN_MAX_TOKENS_GPU, fits))


def gpu_memory_gib(device: torch.device) -> float:
    """The total memory of CUDA ``device`` in GiB."""
    return torch.cuda.get_device_properties(device).total_memory / 2 ** 30
