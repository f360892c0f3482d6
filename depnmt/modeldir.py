"""The self-contained model directory written by ``train`` and read by ``translate``.

```
MODEL_DIR/config.json        model architecture, scheme, languages, tokenizer and parser settings,
                             subword settings, search defaults, training options
MODEL_DIR/vocab.src.txt      vocabularies (copied from the bpe stage)
MODEL_DIR/vocab.tgt.txt
MODEL_DIR/<segmenter files>  BPE codes etc. (``Segmenter.save``)
MODEL_DIR/checkpoints/last.pt, best.pt
MODEL_DIR/metrics.jsonl      one JSON object per log line / validation
MODEL_DIR/.lock              held (``flock``) by the training that writes the directory
```

One writer: :func:`lock_for_writing` takes an exclusive ``fcntl.flock`` on ``MODEL_DIR/.lock``
for the whole training run. The kernel drops the lock when the process ends, however it ends
(SIGKILL included), so there is no stale lock to clean up; a second ``train`` (or ``--resume``)
on the directory fails with ``DIR: in use by process PID`` (the PID is written into the lock
file). Holding the lock, training removes the temporary files (``.NAME.*.tmp``) that a killed
writer left in the directory and its ``checkpoints/``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import __version__
from .errors import DepnmtError
from .textio import atomic_open, read_json
from .vocab import Vocab

CONFIG = "config.json"
LOCK = ".lock"
CONFIG_FORMAT = 1


def checkpoint_dir(model_dir: Path) -> Path:
    return model_dir / "checkpoints"


def write_config(model_dir: Path, config: dict[str, Any]) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    with atomic_open(model_dir / CONFIG) as fh:
        json.dump({"config_format": CONFIG_FORMAT, "depnmt_version": __version__, **config}, fh,
                  indent=2, ensure_ascii=False)
        fh.write("\n")


def read_config(model_dir: Path) -> dict[str, Any]:
    """Load ``config.json`` with a clear error when the folder is not a model directory."""
    path = model_dir / CONFIG
    config = read_json(path, f"{model_dir}: not a depnmt model directory (no {CONFIG}); train "
                             f"one with `depnmt train` or pass -m MODEL_DIR")
    if config.get("config_format") != CONFIG_FORMAT:
        raise DepnmtError(f"{path}: model config format {config.get('config_format')} (depnmt "
                          f"{config.get('depnmt_version')}) is not readable by depnmt {__version__}")
    return config


def save_vocabs(model_dir: Path, vocabs: tuple[Vocab, Vocab]) -> None:
    """Write the (source, target) vocabularies into the model directory."""
    for side, vocab in zip(("src", "tgt"), vocabs):
        vocab.save(model_dir / f"vocab.{side}.txt")


def load_vocabs(model_dir: Path) -> tuple[Vocab, Vocab]:
    """The (source, target) vocabularies of a model directory or of a bpe folder."""
    return Vocab.load(model_dir / "vocab.src.txt"), Vocab.load(model_dir / "vocab.tgt.txt")


def default_checkpoint(model_dir: Path) -> Path:
    """``best.pt`` when validation has run, else ``last.pt``."""
    ckpt = checkpoint_dir(model_dir)
    for name in ("best.pt", "last.pt"):
        if (ckpt / name).exists():
            return ckpt / name
    raise DepnmtError(f"{model_dir}: no checkpoint in {ckpt} (training has not saved one yet)")


@contextmanager
def lock_for_writing(model_dir: Path) -> Iterator[None]:
    """Hold ``MODEL_DIR/.lock`` for the block (created with the folder if needed) and remove
    the temporary files an interrupted writer left; an error when another process holds it."""
    model_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(model_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            raise DepnmtError(f"{model_dir}: in use by process {holder} (another training "
                              f"writes this model directory)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        for folder in (model_dir, checkpoint_dir(model_dir)):
            for leftover in folder.glob(".*.tmp") if folder.is_dir() else ():
                leftover.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)                        # releases the lock
