"""Training batches collated in data-loader worker processes, and the time the loop waits.

:func:`worker_updates` yields what :func:`depnmt.data.batches.iterate_updates` yields — this rank's
batches of each update of an epoch, in the same order, with the same features — but
collated (pairs read from the cache, tree features computed, padded) by ``workers``
processes of a :class:`torch.utils.data.DataLoader`, a few updates ahead of the training
step, and pinned for a GPU by the loader's pinning thread. Nothing random happens in a
worker, and the loader draws its workers' seeds from a generator of its own (not from the
global one, which dropout reads and a checkpoint saves), so a run's batches, and its loss
curve, are the same with any number of workers, resumed or not.

A worker's :class:`~depnmt.core.errors.DepnmtError` (a tree that does not fit its sentence)
comes back as a value and is raised in the training process as it was raised, one line,
not as the loader's wrapped traceback; so is a system refusing to start the workers
(:func:`started`). ``--workers`` is at most 64 (:mod:`depnmt.training.config`).
:class:`WaitClock` measures the time the loop spends waiting for its next update: each
training record logs it (``batch_wait_s``, ``batch_wait_share``).
"""

from __future__ import annotations

import signal
import time
from typing import Any, Iterator, Sequence

import torch

from depnmt.core.errors import DepnmtError, reason
from depnmt.core.stagedir import forget_held_locks
from depnmt.core.workers import available_cores
from depnmt.data.batches import Batch, TokenBatcher, collate, shard_updates

PREFETCH = 4                      # batches each worker prepares ahead


class BatchSource(torch.utils.data.Dataset):
    """Batch ``n`` of an epoch's ``order`` (lists of example indices), collated with the
    model's ``schemes``; an error as a value (module docstring)."""

    def __init__(self, examples: Sequence, order: Sequence[Sequence[int]], schemes: Sequence):
        self.examples, self.order, self.schemes = examples, order, schemes

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, n: int) -> Batch | DepnmtError:
        try:
            return collate([self.examples[i] for i in self.order[n]], self.schemes)
        except DepnmtError as exc:
            return exc


def worker_updates(examples: Sequence, batcher: TokenBatcher, epoch: int, update_freq: int,
                   workers: int, start: int = 0, rank: int = 0, world: int = 1,
                   schemes: Sequence = (), pin: bool = False
                   ) -> Iterator[tuple[int, list[Batch]]]:
    """:func:`~depnmt.data.batches.iterate_updates` with the batches collated by ``workers``
    processes (``pin``: in page-locked memory, for a GPU)."""
    order = batcher.batches(epoch)
    plan = list(shard_updates(len(order), update_freq, start, rank, world))
    numbers = [n for _, batch_numbers in plan for n in batch_numbers]
    if not numbers:
        return
    loader = torch.utils.data.DataLoader(
        BatchSource(examples, order, schemes), batch_size=None, sampler=numbers,
        num_workers=workers, pin_memory=pin, prefetch_factor=PREFETCH,
        worker_init_fn=quiet_worker, generator=torch.Generator())   # not the global RNG
    batches = started(loader, workers)
    for done, batch_numbers in plan:
        update = [next(batches) for _ in batch_numbers]
        for item in update:
            if isinstance(item, DepnmtError):
                raise item
        yield done, update


def started(loader: torch.utils.data.DataLoader, workers: int) -> Iterator[Any]:
    """The loader's iterator, its ``workers`` processes started; a system that refuses them
    (a process or memory limit: ``fork`` fails) is one :class:`DepnmtError` saying so, before
    any batch of the epoch is trained on."""
    try:
        return iter(loader)
    except OSError as exc:
        raise DepnmtError(f"--workers {workers}: the system refused to start {workers} "
                          f"data-loader processes ({reason(exc)}); give fewer, or --workers 0 "
                          f"to make the batches in the training process") from None


def quiet_worker(_: int) -> None:
    """A worker computes features with one thread (the loader sets it), leaves SIGINT, SIGHUP
    and SIGTERM to the training process, which stops the run cleanly and then its workers
    (a terminal sends the first two to the whole process group; `timeout`, `kill -TERM
    -PGID`, batch schedulers and service managers send SIGTERM to every process of a job: a
    worker killed by it would make the training fail instead of saving), and holds none of
    its locks (:func:`~depnmt.core.stagedir.forget_held_locks`: a killed run's model directory is
    free at once, not when its workers notice). A worker whose training process is gone
    ends by itself (torch's loader watches its parent)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    forget_held_locks()


def default_workers(device: torch.device, local_world: int = 1) -> int:
    """``--workers`` when not given: on a GPU up to 4 a process, leaving a core for each
    training process; on the CPU 1 when there are 2 cores or more (the training step uses
    the others), else 0."""
    per_process = available_cores() // max(local_world, 1)
    if device.type == "cuda":
        return max(0, min(4, per_process - 1))
    return 1 if per_process >= 2 else 0


class WaitClock:
    """Wraps an iterator of updates and adds up the seconds ``next`` blocked (:attr:`waited`)."""

    def __init__(self) -> None:
        self.waited = 0.0

    def timed(self, items: Iterator[Any]) -> Iterator[Any]:
        items = iter(items)
        while True:
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                self.waited += time.perf_counter() - started
                return
            self.waited += time.perf_counter() - started
            yield item

    def take(self) -> float:
        """The seconds waited since the last call."""
        waited, self.waited = self.waited, 0.0
        return waited
