"""A cache entry: flat binary arrays with offsets, and the ``meta.json`` that vouches for them.

An entry is one folder, written all or nothing (:func:`~.entries.ensure_entry`), holding
little-endian arrays without headers (``NAME.bin``) and ``meta.json`` (written last)::

    {"format": 1, "kind": "text" | "trees",
     "sources": {"train.en": {"size": ..., "sha256": ...}, ...},
     "arrays": {"tokens.bin": {"dtype": "<i4", "count": ..., "sha256": ...}},
     ...}                                   what the kind adds (line counts, label names)

An entry is valid only for the exact bytes it was made from and holds: its sources are
compared by sha256 at every start (:func:`file_digests`; a file edited under the same size
and modification time, as ``cp -p``, ``rsync -t`` or a restored backup leave it, is a changed
file), and opening it (:func:`check_arrays`) checks every array's size and sha256, so a
truncated or changed array is a one-line error naming the file, never data trained on. Both
read every byte (0.8 s of a start at 250,000 pairs, a few seconds at millions): there is no
shortcut by size and modification time, which an edit or a rotting disk leaves as they were.
Reading (:class:`RowReader`) goes through ``os.pread`` into fresh buffers rather than a
memory map: the pages of a map that training touches stay in the process's resident set
(an epoch touches them all, so the peak RSS would grow with the corpus), while ``pread``
leaves them in the shared page cache, which the kernel gives back under pressure and which
every process of a ``torchrun`` shares. Only the offsets (8 bytes a row) are held in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from depnmt.core.errors import DepnmtError
from depnmt.core.textio import atomic_open, read_json
from depnmt.core.workers import available_cores
from depnmt.data.record import sha256

FORMAT = 1
META = "meta.json"

OFFSETS = np.dtype("<i8")
TOKENS = np.dtype("<i4")         # id << 1 | 1 when the subword continues into the next ("@@")
HASHES = np.dtype("<u8")         # per line: a 64-bit digest of its words (the tree check)
LINES = np.dtype("<i8")          # per tree: the line of the CoNLL-U file where its block starts
WORDS = np.dtype([("head", "<i4"), ("rel", "<i2"), ("upos", "<i2"), ("sent", "<i4")])
DTYPES = {"<i8": OFFSETS, "<i4": TOKENS, "<u8": HASHES, "word": WORDS}


def dtype_name(dtype: np.dtype) -> str:
    return "word" if dtype == WORDS else dtype.str


def file_digests(paths: Iterable[Path], known: dict[Path, str] | None = None
                 ) -> dict[Path, str]:
    """The sha256 of each file of ``paths``, read in threads (hashing releases the GIL), a
    file already in ``known`` (path -> sha256, e.g. a text that two entries are made from)
    not read again; a missing or unreadable file is a :class:`DepnmtError` naming it."""
    known = known or {}
    todo = [path for path in dict.fromkeys(paths) if path not in known]
    with ThreadPoolExecutor(max(1, min(len(todo), available_cores()))) as pool:
        digests = dict(zip(todo, pool.map(sha256, todo)))
    return {path: known.get(path) or digests[path] for path in paths}


def source_identity(path: Path, digest: str) -> dict[str, Any]:
    """What an entry records of a file it was made from: its size and sha256 (``digest``)."""
    return {"size": path.stat().st_size, "sha256": digest}


class ArrayWriter:
    """Appends arrays of one dtype to ``NAME.bin``; :meth:`close` returns its meta entry."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path, self.dtype, self.count = path, dtype, 0
        self.fh = open(path, "wb")
        self.digest = hashlib.sha256()

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype).tobytes()
        self.fh.write(data)
        self.digest.update(data)
        self.count += len(values)

    def close(self) -> dict[str, Any]:
        self.fh.close()
        return {"dtype": dtype_name(self.dtype), "count": self.count,
                "sha256": self.digest.hexdigest()}


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    with atomic_open(folder / META) as fh:
        json.dump({"format": FORMAT, **meta}, fh, indent=1, sort_keys=True)


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The entry's meta, or None when the folder holds no complete entry of this format."""
    if not (folder / META).is_file():
        return None
    try:
        meta = read_json(folder / META, "")
    except DepnmtError:
        return None
    return meta if meta.get("format") == FORMAT else None


def check_arrays(folder: Path, meta: dict[str, Any]) -> None:
    """Every array of the entry has the size and sha256 its meta records; else a one-line
    :class:`DepnmtError` naming the file (the entry is damaged: delete it to rebuild)."""
    specs = meta.get("arrays", {})
    for name, spec in specs.items():
        path = folder / name
        expected = spec["count"] * DTYPES[spec["dtype"]].itemsize
        size = path.stat().st_size if path.is_file() else None
        if size != expected:
            raise DepnmtError(f"{path}: cache array has {size} bytes, its {META} says "
                              f"{expected} (truncated or damaged): delete {folder} and train "
                              f"again to rebuild it")
    digests = file_digests([folder / name for name in specs])
    for name, spec in specs.items():
        if digests[folder / name] != spec["sha256"]:
            raise DepnmtError(f"{folder / name}: cache array does not match the checksum in "
                              f"its {META} (changed or damaged): delete {folder} and train "
                              f"again to rebuild it")


def read_array(folder: Path, name: str, dtype: np.dtype) -> np.ndarray:
    """A whole (small) array, e.g. the offsets, read into memory."""
    return np.fromfile(folder / name, dtype=dtype)


def file_identity(fd: int) -> tuple[int, int, int]:
    """What tells the file open as ``fd`` from another at its path: device, inode and size.
    A cache array is never changed in place (an entry is replaced whole,
    :func:`~.entries.rebuild`), and the process that opened it first keeps it open, so
    another file at the path has another inode."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size


class RowReader:
    """Row ``i`` of a flat array cut by ``offsets`` (``[rows + 1]``, held in memory), read
    with ``os.pread`` (module docstring). The file is opened at once, so that a cache entry
    rebuilt later (renamed into place) does not change what this reader reads; forked worker
    processes share the descriptor (``pread`` has no file position), a pickled reader (the
    loader's workers under the ``spawn`` or ``forkserver`` start method) opens the path again
    and refuses a file that is not the one first opened (:func:`file_identity`: an entry
    rebuilt since by another run, whose rows the offsets held here do not describe)."""

    def __init__(self, path: Path, dtype: np.dtype, offsets: np.ndarray):
        self.path, self.dtype, self.offsets = path, dtype, offsets
        self._fd: int | None = os.open(path, os.O_RDONLY)
        self.identity = file_identity(self._fd)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        size = self.dtype.itemsize
        data = os.pread(self._file(), (end - start) * size, start * size)
        if len(data) != (end - start) * size:
            raise DepnmtError(f"{self.path}: cache array ends early (changed while training?)")
        return np.frombuffer(data, dtype=self.dtype)

    def _file(self) -> int:
        if self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                raise DepnmtError(f"{self.path}: cache array gone while training "
                                  f"({exc.strerror}; its entry rebuilt or deleted by another "
                                  f"run?): train again") from None
            if file_identity(fd) != self.identity:
                os.close(fd)
                raise DepnmtError(f"{self.path}: cache array replaced while training (its entry "
                                  f"rebuilt by another run from changed data?); its rows are "
                                  f"not those this run indexed: train again")
            self._fd = fd
        return self._fd

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None}


class ItemReader(RowReader):
    """Item ``i`` of a flat array (one item a row: no offsets held), read with ``pread``."""

    def __init__(self, path: Path, dtype: np.dtype):
        super().__init__(path, dtype, np.zeros(0, OFFSETS))

    def __getitem__(self, i: int):
        size = self.dtype.itemsize
        return np.frombuffer(os.pread(self._file(), size, i * size), dtype=self.dtype)[0]
