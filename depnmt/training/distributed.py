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
  (:func:`depnmt.core.log.mute`).
* Random streams: every rank starts from the same seed (so models are initialised alike), then
  ranks other than 0 switch to a stream of their own (:func:`seed_rank`: their dropout masks
  must differ); rank 0 keeps the single-process stream.
* Collectives block until every rank has called them, so ranks must call them at the same
  points; decisions taken on rank 0 alone (stop or go) reach the others via
  :func:`broadcast_flag`; a signal that only some ranks received reaches every rank via
  :func:`max_over_ranks`. While rank 0 validates, the others wait in a collective: the process
  group's timeout (:data:`TIMEOUT`) must exceed the longest validation.
* Every process reads the data (and, resumed, ``last.pt``) from its own file system: on
  machines without a shared one, from copies, which the trainer compares with rank 0's
  (:func:`unlike_rank0`) before it trains.
* Settings that are wrong fail at once, as one error naming the variable (:func:`settings`):
  ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` come together,
  as integers in range, with an address that resolves. Joining is bounded apart from
  :data:`TIMEOUT` (:func:`rendezvous`): a rank that never starts is an error after
  ``DEPNMT_RENDEZVOUS_TIMEOUT`` seconds (:data:`RENDEZVOUS_TIMEOUT` by default), not an hour's
  wait.
"""

from __future__ import annotations

import inspect
import os
import pickle
import random
import socket
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, overload

import torch
from torch import Tensor, nn

from depnmt.core.device import resolve_device
from depnmt.core.errors import DepnmtError
from depnmt.core.log import mute

TIMEOUT = timedelta(hours=1)    # longest wait in a collective (e.g. for rank 0's validation)
RENDEZVOUS_TIMEOUT_VAR = "DEPNMT_RENDEZVOUS_TIMEOUT"
RENDEZVOUS_TIMEOUT = 300.0      # seconds the ranks wait for each other when they join
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
    process, which is how one GPU proves the DDP path; also whenever ``WORLD_SIZE`` > 1 (or is
    not a number: :func:`process_group` then reports it, :func:`settings`)."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return True
    try:
        return int(os.environ.get("WORLD_SIZE") or "1") > 1
    except ValueError:
        return True


@dataclass(frozen=True)
class Settings:
    """Where this process stands among the training processes, from the variables that
    ``torchrun`` (or another launcher) sets: ``0 <= rank < world_size``,
    ``0 <= local_rank < local_world_size <= world_size``; the processes meet at
    ``master_addr:master_port``."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    @property
    def where(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def settings() -> Settings | None:
    """This process's place among several (:class:`Settings`), None in a single process: no
    ``TORCHELASTIC_RUN_ID``, and ``WORLD_SIZE`` and ``RANK`` unset or ``WORLD_SIZE=1`` (with
    ``RANK`` unset or 0). Otherwise the variables of :data:`REQUIRED` must all be set, as
    integers in range (``LOCAL_WORLD_SIZE`` may be left out: then taken as ``WORLD_SIZE``);
    else a DepnmtError naming the first wrong one. The address is not resolved here
    (:func:`check_address`)."""
    env = os.environ
    torchrun = bool(env.get("TORCHELASTIC_RUN_ID"))
    if not torchrun and not env.get("RANK") and not env.get("WORLD_SIZE"):
        return None
    world = _int_variable("WORLD_SIZE", 1)
    if not torchrun and world == 1 and not env.get("RANK"):
        return None
    rank = _int_variable("RANK", 0, world - 1, f"WORLD_SIZE is {world}")
    if not torchrun and world == 1:
        return None
    local_world = world
    if env.get("LOCAL_WORLD_SIZE"):
        local_world = _int_variable("LOCAL_WORLD_SIZE", 1, world, f"WORLD_SIZE is {world}")
    local_rank = _int_variable("LOCAL_RANK", 0, local_world - 1,
                               f"LOCAL_WORLD_SIZE is {local_world}"
                               if env.get("LOCAL_WORLD_SIZE") else f"WORLD_SIZE is {world}")
    return Settings(rank, world, local_rank, local_world, _variable("MASTER_ADDR"),
                    _int_variable("MASTER_PORT", 1, 65535))


def _variable(name: str) -> str:
    """The value of ``name``, one of the variables a run of several processes needs."""
    value = os.environ.get(name)
    if not value:
        given = [v for v in REQUIRED if os.environ.get(v)] or ["TORCHELASTIC_RUN_ID"]
        raise DepnmtError(f"{name}: not set, but {', '.join(given)} "
                          f"{'is' if len(given) == 1 else 'are'}: a run of several processes "
                          f"needs {', '.join(REQUIRED[:-1])} and {REQUIRED[-1]} (torchrun sets "
                          f"them all)")
    return value


def _int_variable(name: str, low: int, high: int | None = None, why: str = "") -> int:
    """The integer value of variable ``name`` (:func:`_variable`), from ``low`` to ``high``
    (no limit: None); ``why`` says where ``high`` comes from."""
    text = _variable(name)
    try:
        value = int(text)
    except ValueError:
        raise DepnmtError(f"{name}: {text!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        limits = f"at least {low}" if high is None else f"{low} to {high}"
        raise DepnmtError(f"{name}: {value} is out of range ({limits}"
                          f"{', as ' + why if why else ''})")
    return value


def rendezvous_timeout() -> float:
    """Seconds the ranks wait for each other when they join: ``DEPNMT_RENDEZVOUS_TIMEOUT``
    (a positive number) or :data:`RENDEZVOUS_TIMEOUT`."""
    text = os.environ.get(RENDEZVOUS_TIMEOUT_VAR)
    if not text:
        return RENDEZVOUS_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise DepnmtError(f"{RENDEZVOUS_TIMEOUT_VAR}: {text!r} is not a number of seconds "
                          f"above 0")
    return seconds


def check_address(s: Settings) -> None:
    """A DepnmtError unless ``MASTER_ADDR`` resolves (on a machine where it does not, every
    rank but the server's would wait for it until the timeout)."""
    try:
        socket.getaddrinfo(s.master_addr, s.master_port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DepnmtError(f"MASTER_ADDR: cannot resolve {s.master_addr!r}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None


def rendezvous(s: Settings, timeout: float) -> torch.distributed.Store:
    """The store at ``MASTER_ADDR:MASTER_PORT``, returned once all ``WORLD_SIZE`` processes
    have reached it (each adds 1 to a counter and waits for the sum), within ``timeout``
    seconds: a DepnmtError says how many came. Rank 0 hosts the store, or under ``torchrun``
    the launcher does (``TORCHELASTIC_USE_AGENT_STORE``), as ``init_process_group`` would.
    ``init_process_group``'s own rendezvous waits as long as the process group's timeout
    (:data:`TIMEOUT`), an hour for a rank that never starts."""
    from torch.distributed import TCPStore
    deadline = time.monotonic() + timeout
    host = s.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    if not host:
        _wait_for_server(s, timeout, deadline)
    try:
        store = TCPStore(host_name=s.master_addr, port=s.master_port, world_size=s.world_size,
                         is_master=host, timeout=timedelta(seconds=max(1.0, timeout)),
                         wait_for_workers=False, multi_tenant=True)
    except RuntimeError as exc:
        doing = "listen at" if host else "join the processes at"
        raise DepnmtError(f"MASTER_PORT: cannot {doing} {s.where}: "
                          f"{str(exc).splitlines()[0]}") from None
    try:
        wait_for_all(store, s, timeout, deadline, host)
    except RuntimeError as exc:          # the store's host stopped (it failed)
        raise DepnmtError(f"lost the processes at {s.where} while waiting for all "
                          f"{s.world_size}: {str(exc).splitlines()[0]}") from None
    store.set_timeout(TIMEOUT)
    return store


def wait_for_all(store: torch.distributed.Store, s: Settings, timeout: float,
                  deadline: float, host: bool) -> None:
    """Count this process in at ``store`` and return once all ``WORLD_SIZE`` have counted
    themselves in. After ``deadline`` (:func:`time.monotonic`) a DepnmtError, and the store
    tells the others, which stop too (the store's ``host`` lingers a moment so that they can
    read it: a store client whose server has gone logs C++ stack traces)."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    key, gone = f"depnmt/arrived/{attempt}", f"depnmt/gave-up/{attempt}"
    advice = f"start every rank or check WORLD_SIZE ({RENDEZVOUS_TIMEOUT_VAR} sets the wait)"
    arrived = store.add(key, 1)
    while arrived < s.world_size:
        if store.check([gone]):
            raise DepnmtError(f"another process stopped waiting for {s.world_size} processes "
                              f"at {s.where}: only {store.get(gone).decode()} came: {advice}")
        if time.monotonic() > deadline:
            store.set(gone, str(arrived))
            if host:
                time.sleep(0.5)
            raise DepnmtError(f"waited {timeout:g} s for {s.world_size} processes at "
                              f"{s.where} but only {arrived} came: {advice}")
        time.sleep(0.05)
        arrived = store.add(key, 0)


def _wait_for_server(s: Settings, timeout: float, deadline: float) -> None:
    """Return once something listens at ``MASTER_ADDR:MASTER_PORT`` (a plain connection: a
    store client that cannot connect logs a C++ stack trace at every retry)."""
    while True:
        try:
            with socket.create_connection((s.master_addr, s.master_port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise DepnmtError(f"waited {timeout:g} s for rank 0 at {s.where}, which does "
                                  f"not answer: start every rank or check MASTER_ADDR and "
                                  f"MASTER_PORT ({RENDEZVOUS_TIMEOUT_VAR} sets the "
                                  f"wait)") from None
            time.sleep(0.1)


def _active() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    """This process's global rank (0 in a single process)."""
    return torch.distributed.get_rank() if _active() else 0


def world_size() -> int:
    """Number of training processes (1 in a single process)."""
    return torch.distributed.get_world_size() if _active() else 1


def local_world_size() -> int:
    """The processes of this run on this machine (``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``;
    1 in a single process)."""
    s = settings()
    return s.local_world_size if s else 1


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
    s = settings()
    local = s.local_rank if s else 0
    if local >= torch.cuda.device_count():
        raise DepnmtError(f"LOCAL_RANK {local} but this node has only "
                          f"{torch.cuda.device_count()} CUDA device(s): start at most that many "
                          f"processes per node (--nproc_per_node)")
    return torch.device("cuda", local)


@contextmanager
def process_group(device_name: str = "auto") -> Iterator[None]:
    """Join the ``torchrun`` processes for the duration of the block (NCCL on CUDA, gloo on the
    CPU) and mute every rank but 0; on a normal exit the ranks leave together. A no-op in a
    single process. Wrong settings (:func:`settings`, :func:`check_address`) and a rank that
    does not come within the rendezvous timeout (:func:`rendezvous`) are DepnmtErrors."""
    global _device
    s = settings()
    if s is None or _active():
        yield
        return
    if not torch.distributed.is_available():
        raise DepnmtError(f"torchrun started {s.world_size} processes but this torch "
                          f"{torch.__version__} has no torch.distributed")
    timeout = rendezvous_timeout()
    check_address(s)
    device = local_device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    store = torch.distributed.PrefixStore("default_pg", rendezvous(s, timeout))
    torch.distributed.init_process_group("nccl" if cuda else "gloo", store=store, rank=s.rank,
                                         world_size=s.world_size, timeout=TIMEOUT,
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


def unlike_rank0(value: Any) -> tuple[Any, list[tuple[int, str, Any]]]:
    """Rank 0's ``value`` (picklable, compared with ``==``) and every rank whose ``value``
    differs from it, as ``(rank, host name, its value)``; the same answer on every rank (every
    rank must call this). In one process: ``(value, [])``. What each process read from its
    own file system (several machines without a shared one) is checked this way."""
    if not _active():
        return value, []
    every = gather_objects((socket.gethostname(), value))
    first = every[0][1]
    return first, [(r, host, v) for r, (host, v) in enumerate(every) if v != first]


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
