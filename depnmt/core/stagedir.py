"""One writer, all or nothing: how a stage writes its output folder.

``with stage_output(OUT, "bpe") as tmp:`` — the stage writes every file into ``tmp``; when the
block ends without an error, ``manifest.json`` is already in ``tmp`` (the stage writes it
last), every file and the folder are flushed to disk (``fsync``) and ``tmp`` replaces ``OUT``
by a rename. So ``OUT`` is always either the previous complete output or the new complete
one (a kill between the two renames of a replacement leaves no ``OUT``, never a mixed one)::

    PARENT/OUT/                 the stage's output, complete (manifest.json last)
    PARENT/.OUT.lock            held (``flock``) by the process writing OUT; holds its PID
    PARENT/.OUT.tmp-PID/        the output being written (removed on failure)
    PARENT/.OUT.old-PID/        the previous output, while it is being deleted

One writer: :func:`hold_lock` takes an exclusive ``fcntl.flock`` for the whole stage. The
kernel drops it when the process ends, however it ends (SIGKILL included), so there is no
stale lock; a second writer fails at once with ``OUT: in use by process PID``. Holding the
lock, a writer removes the ``.OUT.tmp-*`` and ``.OUT.old-*`` folders that killed writers left.

``OUT`` is replaced as a whole, so a folder holding anything the stage does not own (``owns``)
is refused before any work is done, and so is a read-only one (replacing it would delete its
files).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from depnmt.core.errors import DepnmtError, os_error
from depnmt.core.textio import fsync_path, naming, read_json

MANIFEST = "manifest.json"
HELD: set[int] = set()          # descriptors of the locks this process holds
COMMIT_DELAY = "DEPNMT_STAGE_COMMIT_DELAY"  # tests: seconds to wait, locked, before the rename


@contextmanager
def hold_lock(lock_path: Path, folder: Path, writer: str, wait: bool = False
              ) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if needed) for the block, with
    this process's PID written into it; when another process holds it, a :class:`DepnmtError`
    ``FOLDER: in use by process PID (WRITER)``, or with ``wait`` wait until it is released."""
    with naming(lock_path, "write"):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            raise DepnmtError(f"{folder}: in use by process {holder} ({writer})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        HELD.add(fd)
        yield
    finally:
        HELD.discard(fd)
        os.close(fd)                        # releases the lock


def forget_held_locks() -> None:
    """In a forked child (a data-loader worker): close its copies of the parent's lock
    descriptors. A ``flock`` belongs to the open file, which a fork shares: a worker that
    kept a copy would hold the parent's lock after the parent was killed."""
    for fd in list(HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    HELD.clear()


def sibling(out_dir: Path, kind: str) -> Path:
    """``PARENT/.OUT.KIND`` (the lock, a temporary or an old folder of ``out_dir``)."""
    out_dir = named(out_dir)
    return out_dir.parent / f".{out_dir.name}.{kind}"


def named(out_dir: Path) -> Path:
    """``out_dir``, absolute where it ends in no name of its own (``-o .``, ``-o ''``,
    ``-o ..``): its lock, temporary folder and the renames that put it in place need the
    folder's name and parent. The root folder, which has neither, is a DepnmtError."""
    if out_dir.name not in ("", ".."):
        return out_dir
    absolute = Path(os.path.abspath(out_dir))
    if not absolute.name:
        raise DepnmtError(f"{out_dir}: the root folder cannot be an output folder")
    return absolute


def remove_leftovers(out_dir: Path) -> None:
    """Delete the temporary and old folders that interrupted writers of ``out_dir`` left
    (call it holding the lock: nobody else writes them then)."""
    for pattern in ("tmp-*", "old-*"):
        for leftover in out_dir.parent.glob(f".{out_dir.name}.{pattern}"):
            shutil.rmtree(leftover, ignore_errors=True)


def foreign_entries(out_dir: Path, stage: str, owns: Callable[[str], bool] | None) -> list[str]:
    """The entries of an existing ``out_dir`` that replacing it would wrongly delete: all of
    them when it holds another stage's output, else those neither its manifest lists nor
    ``owns`` accepts (``owns`` None: the stage owns the whole folder)."""
    if owns is None or not out_dir.is_dir():
        return []
    names = sorted(p.name for p in out_dir.iterdir())
    listed: set[str] = set()
    if MANIFEST in names:
        old = read_json(out_dir / MANIFEST, "")
        if old.get("stage") != stage:
            return names
        listed = set(old.get("outputs") or {}) | {MANIFEST}
    return [n for n in names if n not in listed and not owns(n) and not n.endswith(".tmp")]


def check_replaceable(out_dir: Path, stage: str, command: str,
                      owns: Callable[[str], bool] | None) -> None:
    """Refuse, before any work, an ``out_dir`` that is no folder, is read-only or holds what
    the stage does not own (:func:`foreign_entries`)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise DepnmtError(f"{out_dir}: exists and is not a folder")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise os_error(out_dir / MANIFEST, "write", PermissionError(errno.EACCES,
                                                                    os.strerror(errno.EACCES)))
    foreign = foreign_entries(out_dir, stage, owns)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise DepnmtError(f"{out_dir}: holds files that are not `depnmt {command}` output "
                          f"({shown}); the folder is replaced as a whole: move them away or "
                          f"choose another output folder")


def fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` (and its subfolders) and the folders themselves to disk."""
    for path in sorted(folder.rglob("*"), reverse=True) + [folder]:
        fsync_path(path)


def commit(tmp: Path, out_dir: Path) -> None:
    """Put the finished ``tmp`` in place of ``out_dir`` by renames, then delete the old one."""
    fsync_tree(tmp)
    delay = float(os.environ.get(COMMIT_DELAY, "0") or 0)
    if delay:
        time.sleep(delay)
    old = sibling(out_dir, f"old-{os.getpid()}")
    with naming(out_dir, "write"):
        if out_dir.exists():
            os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        fsync_path(out_dir.parent)
    shutil.rmtree(old, ignore_errors=True)


def rename_paths(exc: BaseException, tmp: Path, out_dir: Path) -> None:
    """Make an error about a file in ``tmp`` name the file the user asked for in ``out_dir``."""
    old, new = str(tmp), str(out_dir)
    exc.args = tuple(a.replace(old, new) if isinstance(a, str) else a for a in exc.args)
    if isinstance(getattr(exc, "path", None), str):
        exc.path = exc.path.replace(old, new)


def check_distinct(out_dir: Path, inputs: dict[str, Path]) -> None:
    """The output folder must neither be, nor hold, nor lie inside a path the stage reads
    (``{what: path}``, files or folders): replacing the folder would delete or change the
    stage's input. A :class:`DepnmtError` names the output folder and the input."""
    out = Path(os.path.realpath(out_dir))
    for what, path in inputs.items():
        read = Path(os.path.realpath(path))
        if out == read:
            raise DepnmtError(f"{out_dir}: the output folder must differ from the {what}")
        if out in read.parents:
            raise DepnmtError(f"{out_dir}: the output folder holds the {what} ({path}), which "
                              f"writing it would delete; choose another output folder")
        if read in out.parents:
            raise DepnmtError(f"{out_dir}: the output folder lies inside the {what} "
                              f"({path}), which it would change; choose another output folder")


def check_output_files(outputs: dict[str, Path | None],
                       reads: Iterable[tuple[str, Path | None]]) -> None:
    """Refuse, before any work, an output file (``{what: path}``; None: not asked for) that
    is a file the command reads, or lies inside a folder it reads (``reads``: ``(what,
    path)`` pairs, e.g. a model's checkpoints folder: :func:`~depnmt.storage.modeldir.model_parts`),
    since writing it would replace that input; a symbolic link counts as its target. Two
    outputs naming one file are refused too. A :class:`DepnmtError` names the output and
    the input."""
    reads = list(reads)
    given: dict[Path, str] = {}
    for what, out in outputs.items():
        if out is None or str(out) == "-":
            continue
        target = Path(os.path.realpath(out))
        if target in given:
            raise DepnmtError(f"{out}: given as the {given[target]} and as the {what}; "
                              f"choose two files")
        given[target] = what
        for input_what, path in reads:
            if path is None:
                continue
            read = Path(os.path.realpath(path))
            if target == read:
                raise DepnmtError(f"{out}: the {what} would replace the {input_what} ({path}), "
                                  f"which this command reads; choose another file")
            if read in target.parents and read.is_dir():
                raise DepnmtError(f"{out}: the {what} would be written into the {input_what} "
                                  f"({path}), which this command reads; choose another file")


def make_parent(out_dir: Path) -> None:
    """Create the folder ``out_dir`` goes in; an error names ``out_dir``."""
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:                 # a file where a folder of the path should be
        raise os_error(out_dir, "create the folder", NotADirectoryError(
            errno.ENOTDIR, os.strerror(errno.ENOTDIR))) from None
    except OSError as exc:
        raise os_error(out_dir, "create the folder", exc) from None


@contextmanager
def stage_output(out_dir: str | Path, stage: str, command: str | None = None,
                 owns: Callable[[str], bool] | None = lambda name: False) -> Iterator[Path]:
    """Write the output folder of ``stage`` (run by ``depnmt COMMAND``) all or nothing, as its
    one writer (module docstring); yields the temporary folder to write into.

    ``owns(name)``: whether an entry of an existing ``out_dir`` that its manifest does not list
    is the stage's to replace (default: none is); ``None``: the whole folder is (``--force``).
    An error inside the block leaves ``out_dir`` as it was and no temporary folder; errors
    naming a temporary file name the file in ``out_dir`` instead."""
    out_dir = named(Path(out_dir))
    if out_dir.is_symlink():
        out_dir = Path(os.path.realpath(out_dir))
    command = command or stage
    make_parent(out_dir)
    with hold_lock(sibling(out_dir, "lock"), out_dir, f"another `depnmt {command}` writes "
                                                      f"this folder"):
        check_replaceable(out_dir, stage, command, owns)
        remove_leftovers(out_dir)
        tmp = sibling(out_dir, f"tmp-{os.getpid()}")
        with naming(out_dir, "create the folder"):
            tmp.mkdir()
        try:
            yield tmp
            check_replaceable(out_dir, stage, command, owns)
            commit(tmp, out_dir)
        except DepnmtError as exc:
            rename_paths(exc, tmp, out_dir)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
