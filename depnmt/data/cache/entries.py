"""Where cache entries live, and finding or (re)building one, all or nothing, one writer.

The cache of a bpe folder ``DATA`` is ``DATA/cache/`` (``depnmt bpe`` replaces it with the
folder), or ``$DEPNMT_CACHE_DIR/<digest of DATA's path>/`` when that variable is set (a
read-only data folder, a faster disk). Each entry is a folder of it, written by
:func:`ensure_entry` holding ``cache/.lock`` (``flock``; other processes, e.g. the other
ranks of a ``torchrun``, wait and then use what it built) into a temporary folder that is
renamed into place when complete (:func:`depnmt.core.stagedir.commit`): an entry is whole or
absent, and one that no longer matches the bytes of the files it was made from (their sha256,
read at every start) is rebuilt, never used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info
from depnmt.core.stagedir import commit, hold_lock, remove_leftovers, sibling
from depnmt.data.cache.arrays import (check_arrays, file_digests, read_meta, source_identity,
                                      write_meta)

CACHE = "cache"
CACHE_ENV = "DEPNMT_CACHE_DIR"


def path_digest(path: Path, length: int) -> str:
    """A short hex digest of ``path``'s absolute form: names one folder's entries apart from
    another's."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:length]


def cache_root(data_dir: Path) -> Path:
    """The cache folder of the bpe folder ``data_dir`` (module docstring)."""
    base = os.environ.get(CACHE_ENV)
    if not base:
        return data_dir / CACHE
    return Path(base) / f"{data_dir.resolve().name}-{path_digest(data_dir, 16)}"


def matches(meta: dict[str, Any], digests: dict[str, str]) -> bool:
    """Whether an entry's meta was made from exactly the files whose sha256 are ``digests``
    (``{name: sha256}``)."""
    recorded = meta.get("sources", {})
    return set(recorded) == set(digests) and all(
        recorded[name].get("sha256") == digest for name, digest in digests.items())


def ensure_entry(root: Path, name: str, sources: dict[str, Path],
                 build: Callable[[Path], dict[str, Any]], known: dict[Path, str]
                 ) -> tuple[Path, dict[str, Any]]:
    """The entry ``root/name`` made from ``sources`` (``{name: file}``), built by
    ``build(folder)`` (which returns the meta) when absent or made from other bytes; its
    arrays checked (:func:`~depnmt.data.cache.arrays.check_arrays`). ``known``: the sha256 of
    files already read (path -> sha256), to which those of ``sources`` are added."""
    known.update(file_digests(sources.values(), known))
    digests = {name: known[path] for name, path in sources.items()}
    entry = root / name
    meta = read_meta(entry)
    if meta is None or not matches(meta, digests):
        make_root(root)
        with hold_lock(root / ".lock", root, "another depnmt train builds this cache",
                       wait=True):
            meta = read_meta(entry)
            if meta is None or not matches(meta, digests):
                meta = rebuild(entry, sources, digests, build, changed=meta is not None)
    check_arrays(entry, meta)
    return entry, meta


def rebuild(entry: Path, sources: dict[str, Path], digests: dict[str, str],
            build: Callable[[Path], dict[str, Any]], changed: bool) -> dict[str, Any]:
    """Build ``entry`` in a temporary folder and rename it into place (the lock held);
    ``digests``: the sources' sha256 as read before the build (a file changed during it
    is then rebuilt at the next start)."""
    remove_leftovers(entry)
    started = time.monotonic()
    tmp = sibling(entry, f"tmp-{os.getpid()}")
    tmp.mkdir()
    try:
        identities = {name: source_identity(path, digests[name])
                      for name, path in sources.items()}
        meta = build(tmp)
        meta.update(sources=identities)
        write_meta(tmp, meta)
        commit(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    what = ", ".join(str(p) for p in sources.values())
    info(f"{'rebuilt' if changed else 'built'} the training data cache {entry} from {what}"
         f"{' (changed since it was last built)' if changed else ''} in "
         f"{time.monotonic() - started:.1f} s")
    return meta


def make_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DepnmtError(f"{root}: cannot create the training data cache ({exc.strerror}); "
                          f"set {CACHE_ENV} to a writable folder") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DepnmtError(f"{root}: the training data cache is not writable; set {CACHE_ENV} "
                          f"to a writable folder")
