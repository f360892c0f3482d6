"""The self-contained model directory written by ``train`` and read by ``translate``.

```
MODEL_DIR/config.json        model architecture, scheme, languages, tokenizer and parser settings,
                             subword settings, search defaults, training options
MODEL_DIR/vocab.src.txt      vocabularies (copied from the bpe stage)
MODEL_DIR/vocab.tgt.txt
MODEL_DIR/<segmenter files>  BPE codes etc. (``Segmenter.save``)
MODEL_DIR/checkpoints/last.pt, best.pt, step{N}.pt (train --keep-last), NAME.pt (depnmt average)
MODEL_DIR/metrics.jsonl      one JSON object per log line / validation
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import __version__
from .errors import DepnmtError
from .textio import atomic_open, read_json
from .vocab import Vocab

CONFIG = "config.json"
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


RESERVED_CHECKPOINTS = ("last", "best")    # written by train; `average -o` must not take them


def named_checkpoint(model_dir: Path, name: str) -> Path:
    """``translate --checkpoint NAME``: ``MODEL_DIR/checkpoints/NAME.pt`` (``best``, ``last``,
    a ``stepN`` snapshot of ``--keep-last`` or an average's name), or NAME itself when it is a
    path (it contains a ``/`` or names an existing ``.pt`` file)."""
    given = Path(name)
    if "/" in name or (name.endswith(".pt") and given.is_file()):
        if not given.is_file():
            raise DepnmtError(f"{given}: no such checkpoint file")
        return given
    ckpt = checkpoint_dir(model_dir)
    path = ckpt / (name if name.endswith(".pt") else f"{name}.pt")
    if not path.is_file():
        names = sorted(p.stem for p in ckpt.glob("*.pt")) if ckpt.is_dir() else []
        raise DepnmtError(f"{model_dir}: no checkpoint named {name!r} in {ckpt} (there are: "
                          f"{', '.join(names) or 'none'})")
    return path
