"""Worker processes for the data stages' ``--jobs N`` (``prepare``, ``bpe``, ``parse``).

A stage hands contiguous blocks of its input to ``N`` processes and takes the results back in
input order, so that its output is byte for byte the output of ``--jobs 1``, which runs the
very same function on the same blocks in the stage's own process::

    with worker_pool(jobs, state) as pool:
        for result in pool.map(work, blocks):   # work(state, block), results in order
            ...                                 # the stage's one writer writes them

* The processes are started with ``spawn`` (nothing of the parent's threads or locks is
  copied) and each sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS`` to 1
  before it imports anything heavy: N processes share the cores instead of N thread pools
  oversubscribing them (spaCy's ``nlp.pipe(n_process=...)`` gave no speed-up; independent
  processes over halves of the lines did).
* ``state`` (tokenizers, segmenters) travels to each process once, pickled, and is unpickled
  there on the first block; ``work`` and the blocks must be picklable (module-level functions,
  plain data). As with any ``spawn``, a script that calls a stage with ``jobs`` > 1 from its
  top level needs ``if __name__ == "__main__":`` (the workers import the main module).
* ``pool.set_state(new)`` between two maps gives the same processes a new state (written
  once to a file of the pool's private temporary folder; each worker reads it before its next
  block): ``bpe`` counts with its workers, learns the codes, then segments with them.
* At most ``2 N`` blocks are in flight, so the parent holds a bounded part of a streamed input.
* A worker's :class:`~depnmt.core.errors.DepnmtError` (a bad line, named by file and line) is
  raised in the parent as it is; the first failing block in input order wins, as with one
  process. A worker that dies (killed, out of memory) is a one-line error.
* Workers ignore SIGINT: Ctrl-C reaches the parent, which terminates them and lets the stage
  discard its temporary folder (:func:`~depnmt.core.stagedir.stage_output`); on Linux they are also
  killed when the parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue as queues
import signal
import tempfile
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from depnmt.core.errors import DepnmtError
from depnmt.core.textio import TextBlock, text_blocks

T = TypeVar("T")
R = TypeVar("R")
AUTO = "auto"
BLOCK_LINES = 2000          # lines a block of prepare (tests make it smaller)
BLOCK_BYTES = 1 << 20       # bytes a block of bpe's files (tests make it smaller)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
PR_SET_PDEATHSIG = 1

# in a worker process: the pickled state, the state once unpickled, the progress queue
_pickled: bytes | None = None
_state: Any = None
_queue: Any = None
_version = 0


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:              # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def resolve_jobs(value: int | str) -> int:
    """``--jobs``: a number of processes ≥ 1, or ``auto`` (:func:`available_cores`)."""
    if str(value).strip().lower() == AUTO:
        return available_cores()
    try:
        jobs = int(value)
    except (TypeError, ValueError):
        jobs = 0
    if jobs < 1:
        raise DepnmtError(f"--jobs {value!r}: expected a number of processes (1, 2, ...) or "
                          f"'{AUTO}'")
    return jobs


def blocks(items: Iterable[T], size: int | None = None) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (default :data:`BLOCK_LINES`), read lazily."""
    items = iter(items)
    while block := list(islice(items, size or BLOCK_LINES)):
        yield block


def file_blocks(path: str | Path) -> Iterator[TextBlock]:
    """The lines of a file in blocks of about :data:`BLOCK_BYTES` that a worker decodes itself
    (:meth:`~depnmt.core.textio.TextBlock.lines`): no line is decoded or pickled one by one here."""
    return text_blocks(path, BLOCK_BYTES)


def report(key: Any, n: int) -> None:
    """In a worker: tell the parent's ``on_progress(key, n)`` that ``n`` more units are done."""
    if _queue is not None:
        _queue.put((key, n))


# ---------------------------------------------------------------------------------------------
# In the worker processes

def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the process that started it ends."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _start(pickled: bytes, progress: Any) -> None:
    """A worker's initializer: one thread per library, no progress bars, Ctrl-C left to the
    parent; the state is unpickled on the first block (so that an error there is the block's)."""
    global _pickled, _queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    os.environ.update({name: "1" for name in THREAD_VARIABLES}, DEPNMT_NO_PROGRESS="1")
    _pickled, _queue = pickled, progress


def _run(work: Callable[[Any, T], R], item: T, given: tuple[int, str] | None = None) -> R:
    """Run ``work(state, item)`` in a worker. ``given``: the version and file of the state
    that :meth:`Workers.set_state` gave the pool last (None: the pool's first state)."""
    global _state, _pickled, _version
    if given is not None and given[0] != _version:
        _state, _pickled, _version = pickle.loads(Path(given[1]).read_bytes()), None, given[0]
    elif _pickled is not None:
        _state, _pickled = pickle.loads(_pickled), None
    return work(_state, item)


# ---------------------------------------------------------------------------------------------
# In the stage's process

class InProcess:
    """``--jobs 1``: the blocks are worked on here, one after the other."""

    def __init__(self, state: Any):
        self.state = state

    def set_state(self, state: Any) -> None:
        """The state of the blocks mapped from now on."""
        self.state = state

    def map(self, work: Callable[[Any, T], R], items: Iterable[T]) -> Iterator[R]:
        for item in items:
            yield work(self.state, item)


class Workers:
    """``--jobs N``: the blocks are worked on by a pool of ``N`` processes."""

    def __init__(self, pool: ProcessPoolExecutor, jobs: int, progress: Any,
                 on_progress: Callable[[Any, int], None] | None, folder: Path):
        self.pool, self.ahead = pool, 2 * jobs
        self.progress, self.on_progress = progress, on_progress
        self.folder, self.given = folder, None

    def set_state(self, state: Any) -> None:
        """The state of the blocks mapped from now on, for the same processes: pickled once
        into a file of the pool's private folder, which each worker reads before its next
        block (a stage that learns what its workers need after they have started keeps them)."""
        version = 1 + (self.given[0] if self.given else 0)
        path = self.folder / f"state-{version}.pickle"
        with open(path, "wb") as fh:    # kept with the folder: a block of an abandoned map
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)   # may still need one
        self.given = (version, str(path))

    def map(self, work: Callable[[Any, T], R], items: Iterable[T]) -> Iterator[R]:
        """``work(state, item)`` of every item, in order; at most ``2 N`` items in flight."""
        pending: deque[Future] = deque()
        try:
            for item in items:
                pending.append(self.pool.submit(_run, work, item, self.given))
                if len(pending) >= self.ahead:
                    yield self.result(pending.popleft())
            while pending:
                yield self.result(pending.popleft())
        except BrokenProcessPool:
            raise DepnmtError("a worker process of --jobs ended unexpectedly (killed, or out "
                              "of memory?); nothing was written") from None
        finally:
            for future in pending:          # the caller stopped early, or an error
                future.cancel()

    def result(self, future: Future) -> Any:
        """The future's result, passing on progress reports while waiting."""
        while True:
            try:
                result = future.result(timeout=0.2 if self.progress is not None else None)
            except FutureTimeout:
                self.drain()
                continue
            self.drain()
            return result

    def drain(self) -> None:
        """Hand the progress reports received so far to ``on_progress``."""
        while self.progress is not None:
            try:
                key, n = self.progress.get_nowait()
            except queues.Empty:
                return
            self.on_progress(key, n)  # type: ignore[misc]


@contextmanager
def worker_pool(jobs: int, state: Any = None,
                on_progress: Callable[[Any, int], None] | None = None,
                start: str = "spawn") -> Iterator[InProcess | Workers]:
    """``jobs`` worker processes sharing ``state`` (:class:`InProcess` for 1); see the module
    docstring. ``on_progress(key, n)`` receives the workers' :func:`report` calls. Leaving the
    block by an error or Ctrl-C terminates the workers at once. ``start="fork"`` (where the
    platform has it) for work that needs no thread of the parent's and must not make its
    caller need a ``__main__`` guard (``train``'s cache build, called by the Python API)."""
    if jobs <= 1:
        yield InProcess(state)
        return
    if start not in multiprocessing.get_all_start_methods():
        start = "spawn"
    context = multiprocessing.get_context(start)
    progress = context.Queue() if on_progress is not None else None
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_start,
                               initargs=(pickle.dumps(state), progress))
    with tempfile.TemporaryDirectory(prefix="depnmt-workers-") as folder:
        try:
            yield Workers(pool, jobs, progress, on_progress, Path(folder))
        except BaseException:
            terminate(pool)
            raise
        pool.shutdown(wait=True)


def terminate(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's processes now, whatever they are doing."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()
