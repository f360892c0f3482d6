"""Several training processes under ``torchrun`` (DistributedDataParallel), one or many nodes.

``torchrun`` starts the processes and tells each one where it stands through environment
variables: ``WORLD_SIZE`` (processes in all), ``RANK`` (this one, 0-based over every node) and
``LOCAL_RANK`` (on this node). :func:`process_group` joins them — NCCL when they train on GPUs,
gloo on the CPU — and every helper below is a no-op in a process that ``torchrun`` did not
start, so the training loop calls them unconditionally. ``torchrun`` with one process forms a
group of one and trains through DDP (:func:`launched`).

* Device: with several processes each one trains on ``cuda:LOCAL_RANK`` when it uses CUDA
  (``--device auto`` or ``cuda``); ``--device cuda:N`` is then an error (choose the GPUs with
  ``CUDA_VISIBLE_DEVICES``); ``--device cpu`` gives gloo processes on the CPU.
* Rank 0 is the *main* process: it alone writes files and prints; the others are muted
  (:func:`depnmt.log.mute`).
* Random streams: every rank starts from the same seed (so models are initialised alike), then
  ranks other than 0 switch to a stream of their own (:func:`seed_rank`: their dropout masks
  must differ); rank 0 keeps the single-process stream.
* Collectives block until every rank has called them, so ranks must call them at the same
  points; decisions taken on rank 0 alone (stop or go) reach the others via
  :func:`broadcast_flag`; a signal that only some ranks received reaches every rank via
  :func:`max_over_ranks`. While rank 0 validates, the others wait in a collective: the process
  group's timeout (:data:`TIMEOUT`) must exceed the longest validation.
"""

from __future__ import annotations

import inspect
import os
import pickle
import random
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from typing import Any, overload

import torch
from torch import Tensor, nn

from .device import resolve_device
from .errors import DepnmtError
from .log import mute

TIMEOUT = timedelta(hours=1)    # longest wait in a collective (e.g. for rank 0's validation)
_device = torch.device("cpu")   # where collectives' tensors live (the process group's device)
# The tensors of the latest collectives, kept referenced here: a gloo worker thread may still
# hold a finished collective's work when the process group is destroyed, and if the last
# reference to one of its tensors were the thread's, freeing it would need the GIL that the
# destroying thread holds (torch before 2.8 does not release it there): the run would hang at
# exit after it has finished. With a reference here, the thread never frees a Python tensor.
# Counted in collectives, not tensors: an all_gather has one output tensor per rank.
_kept: deque[tuple[Tensor, ...]] = deque(maxlen=8)


def launched() -> bool:
    """True in a process that ``torchrun`` started (``TORCHELASTIC_RUN_ID`` is set), even
    alone: ``torchrun --nproc_per_node 1`` trains through DistributedDataParallel with one
    process, which is how one GPU proves the DDP path; also whenever ``WORLD_SIZE`` > 1."""
    return "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1


def _active() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    """This process's global rank (0 in a single process)."""
    return torch.distributed.get_rank() if _active() else 0


def world_size() -> int:
    """Number of training processes (1 in a single process)."""
    return torch.distributed.get_world_size() if _active() else 1


def local_world_size() -> int:
    """The processes of this run on this machine (``LOCAL_WORLD_SIZE``; 1 without torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if launched() else 1


def is_main() -> bool:
    """True on rank 0, the process that writes files and prints."""
    return rank() == 0


def local_device(name: str = "auto") -> torch.device:
    """The device this process trains on: ``resolve_device(name)``, except that with several
    ``torchrun`` processes CUDA means ``cuda:LOCAL_RANK``."""
    if not launched():
        return resolve_device(name)
    if name.startswith("cuda:"):
        raise DepnmtError(f"--device {name}: under torchrun every process uses the GPU of its "
                          f"LOCAL_RANK; pass --device cuda (or auto) and choose the GPUs with "
                          f"CUDA_VISIBLE_DEVICES")
    device = resolve_device(name)
    if device.type != "cuda":
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise DepnmtError(f"LOCAL_RANK {local} but this node has only "
                          f"{torch.cuda.device_count()} CUDA device(s): start at most that many "
                          f"processes per node (--nproc_per_node)")
    return torch.device("cuda", local)


@contextmanager
def process_group(device_name: str = "auto") -> Iterator[None]:
    """Join the ``torchrun`` processes for the duration of the block (NCCL on CUDA, gloo on the
    CPU) and mute every rank but 0; on a normal exit the ranks leave together. A no-op in a
    single process."""
    global _device
    if not launched() or _active():
        yield
        return
    if not torch.distributed.is_available():
        raise DepnmtError(f"torchrun started {os.environ['WORLD_SIZE']} processes but this torch "
                          f"{torch.__version__} has no torch.distributed")
    device = local_device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    torch.distributed.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT,
                                         device_id=device if cuda else None)
    _device = device
    if not is_main():
        mute()
    try:
        yield
        barrier()
    finally:
        torch.distributed.destroy_process_group()
        _device = torch.device("cpu")


def barrier() -> None:
    """Wait until every rank is here."""
    if _active():
        torch.distributed.barrier()


@overload
def all_reduce_sum(value: Tensor) -> Tensor: ...
@overload
def all_reduce_sum(value: float) -> float: ...
@overload
def all_reduce_sum(value: Sequence[float]) -> list[float]: ...


def all_reduce_sum(value):
    """The sum over all ranks of a tensor (any shape, reduced in place and returned), a number
    or a sequence of numbers (summed in float64, element by element)."""
    if isinstance(value, Tensor):
        if _active():
            _keep(value)
            torch.distributed.all_reduce(value)
        return value
    if not _active():
        return value if isinstance(value, (int, float)) else list(value)
    scalar = isinstance(value, (int, float))
    t = torch.tensor([value] if scalar else list(value), dtype=torch.float64, device=_device)
    _keep(t)
    torch.distributed.all_reduce(t)
    return t.item() if scalar else t.tolist()


def broadcast_flag(flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank (stop decisions must agree, or a rank waits forever)."""
    if not _active():
        return flag
    t = torch.tensor([int(flag)], dtype=torch.uint8, device=_device)
    _keep(t)
    torch.distributed.broadcast(t, src=0)
    return bool(t.item())


def max_over_ranks(value: int) -> int:
    """The largest ``value`` of all ranks, on every rank (e.g. the number of a signal that only
    some ranks received: all of them stop after the same update)."""
    if not _active():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=_device)
    _keep(t)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return int(t.item())


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank: what
    ``torch.distributed.all_gather_object`` does (pickled bytes, gathered padded to the
    longest), with the tensors kept (:data:`_kept`)."""
    if not _active():
        return [obj]
    data = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
                            dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=_device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    _keep(size, *sizes)
    torch.distributed.all_gather(sizes, size)
    sizes_n = [int(n.item()) for n in sizes]
    padded = torch.zeros(max(sizes_n), dtype=torch.uint8, device=_device)
    padded[:data.numel()] = data.to(_device)
    out = [torch.empty_like(padded) for _ in sizes_n]
    _keep(padded, *out)
    torch.distributed.all_gather(out, padded)
    return [pickle.loads(t[:n].cpu().numpy().tobytes()) for t, n in zip(out, sizes_n)]


def _keep(*tensors: Tensor) -> None:
    """Reference the tensors of one collective in :data:`_kept` (the latest collectives')."""
    _kept.append(tensors)


def seed_rank(seed: int) -> None:
    """Give ranks other than 0 random streams of their own (dropout), derived from ``seed``;
    rank 0 keeps its stream, so that it is the single-process one."""
    if rank() > 0:
        random.seed(seed * 1000003 + rank())
        torch.manual_seed(seed * 1000003 + rank())


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DistributedDataParallel with several ranks, else ``model`` itself.

    ``find_unused_parameters`` stays off: every parameter of every scheme gets a gradient in
    every update (``tests/unit/test_ddp.py`` checks it; DBSA's parse heads run in the
    forward pass and their losses join the same backward), and turning it on would cost a walk
    of the autograd graph per step. Buffers are constants that every rank computes alike (e.g.
    sinusoidal tables): they are not broadcast at every forward (:func:`no_buffer_sync`).
    """
    if not _active():
        return model
    ddp = nn.parallel.DistributedDataParallel
    return ddp(model, device_ids=[device.index] if device.type == "cuda" else None,
               **no_buffer_sync(ddp))


def no_buffer_sync(ddp: type) -> dict[str, bool]:
    """The keyword that stops ``ddp`` (DistributedDataParallel) from broadcasting the buffers
    at every forward: ``forward_sync_buffers=False`` where this torch has it (2.13 on; the
    buffers are still broadcast once, when the model is wrapped), else
    ``broadcast_buffers=False`` (not even then: each rank keeps the buffers it computed, which
    are the same). ``broadcast_buffers`` is deprecated where the newer keyword exists."""
    params = inspect.signature(ddp.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: False}


def sync_gradients(net: nn.Module, now: bool):
    """Context for one micro-batch's forward and backward: the ranks' gradients are averaged in
    the backward only when ``now`` (the last micro-batch of an update; ``no_sync`` for the
    others). A no-op context for an unwrapped model."""
    if now or not isinstance(net, nn.parallel.DistributedDataParallel):
        return nullcontext()
    return net.no_sync()
