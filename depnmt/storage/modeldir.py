"""The self-contained model directory written by ``train`` and read by ``translate``.

```
MODEL_DIR/config.json        model architecture, scheme, languages, tokenizer and parser settings,
                             subword settings, search defaults, training options
MODEL_DIR/vocab.src.txt      vocabularies (copied from the bpe stage)
MODEL_DIR/vocab.tgt.txt
MODEL_DIR/<segmenter files>  BPE codes etc. (``Segmenter.save``)
MODEL_DIR/checkpoints/last.pt, best.pt, step{N}.pt (train --keep-last), NAME.pt (depnmt average)
MODEL_DIR/metrics.jsonl      one JSON object per log line / validation
MODEL_DIR/.lock              held (``flock``) by the training that writes the directory
```

One writer: :func:`lock_for_writing` takes an exclusive ``fcntl.flock``
(:func:`depnmt.core.stagedir.hold_lock`, as every stage does) on ``MODEL_DIR/.lock``
for the whole training run. The kernel drops the lock when the process ends, however it ends
(SIGKILL included), so there is no stale lock to clean up; a second ``train`` (or ``--resume``)
on the directory fails with ``DIR: in use by process PID`` (the PID is written into the lock
file). Holding the lock, training removes the temporary files (``.NAME.*.tmp``) that a killed
writer left in the directory and its ``checkpoints/``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.log import warn
from depnmt.core.searchlimits import search_json_types
from depnmt.core.stagedir import hold_lock
from depnmt.core.textio import atomic_open, make_dir, naming, read_json
from depnmt.core.vocab import Vocab
from depnmt.version import __version__

CONFIG = "config.json"
LOCK = ".lock"
BPE_CONFIG = "bpe.json"           # the bpe folder's segmenters, copied into the model folder
CONFIG_FORMAT = 2        # 2: model.schemes = [{name, options}]; 1 (read, upgraded): a flat bag

# What translate, `train --resume` and report read from config.json, with the JSON types they
# need (a test checks the model and search fields against ModelConfig and SearchConfig).
NUMBER = (int, float)
MODEL_FIELDS = {"src_vocab_size": int, "tgt_vocab_size": int, "d_model": int, "n_heads": int,
                "d_ff": int, "encoder_layers": int, "decoder_layers": int, "dropout": NUMBER,
                "attention_dropout": NUMBER, "tie_decoder_embeddings": bool,
                "share_all_embeddings": bool, "schemes": list}


class _SearchFields(Mapping):
    """The search options' names and JSON types, read from their declaration
    (:func:`depnmt.core.searchlimits.search_json_types`) when used."""

    def __getitem__(self, key: str) -> Any:
        return search_json_types()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(search_json_types())

    def __len__(self) -> int:
        return len(search_json_types())


SEARCH_FIELDS: Mapping[str, Any] = _SearchFields()
SECTIONS = {  # section -> (its fields and their types, required?)
    "model": (MODEL_FIELDS, True),
    "tokenizers": ({"src": dict, "tgt": dict}, True),
    "parser": ({"src": (dict, type(None))}, True),
    "search": (SEARCH_FIELDS, False),
    "training": ({}, False),
    "multitask": ({"tags": dict}, False),    # a model trained on `depnmt multitask` data
    "dev_bleu": ({"tokenize": str}, False),  # the tokenizer of the run's dev BLEU
}
TYPE_NAMES = {int: "an integer", NUMBER: "a number", bool: "true or false", list: "a list",
              dict: "an object", (dict, type(None)): "an object or null", str: "a string"}


def checkpoint_dir(model_dir: Path) -> Path:
    return model_dir / "checkpoints"


def write_config(model_dir: Path, config: dict[str, Any]) -> None:
    with atomic_open(model_dir / CONFIG) as fh:
        json.dump({"config_format": CONFIG_FORMAT, "depnmt_version": __version__, **config}, fh,
                  indent=2, ensure_ascii=False)
        fh.write("\n")


def read_config(model_dir: Path, upgrade: bool = False) -> dict[str, Any]:
    """Load ``config.json`` with a clear error when the folder is not a model directory; an
    old one (``config_format`` 1) in today's form (:func:`upgrade_config`). ``upgrade``: the
    model config in today's form whatever its format (options a model was saved without take
    their defaults), as ``train --resume`` needs it: a reader that upgrades here never
    upgrades it again (it needs the scheme registry, and so torch, which ``runs`` and
    ``report``, naming saved models' schemes, do without)."""
    path = model_dir / CONFIG
    config = read_json(path, f"{model_dir}: not a depnmt model directory (no {CONFIG}); train "
                             f"one with `depnmt train` or pass -m MODEL_DIR")
    if config.get("config_format") not in (1, CONFIG_FORMAT):
        raise DepnmtError(f"{path}: model config format {config.get('config_format')} (depnmt "
                          f"{config.get('depnmt_version')}) is not readable by depnmt {__version__}")
    if config["config_format"] == 1 or upgrade:
        config = upgrade_config(path, config)
    check_config(path, config)
    return config


def upgrade_config(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` in today's form (in memory; the file is left as it is): the model config
    upgraded (:func:`~depnmt.model.schemes.upgrade.upgrade_model_config`: a ``config_format``
    1 file's ``model.scheme`` + flat ``model.scheme_options`` become ``model.schemes``, each
    scheme with the options it declares; options saved under a 0.1.0 name or without a value
    take today's name or their default); and the training section of a model saved before
    ``--precision`` existed (format 1) says ``fp32`` (what it trained in on the CPU), which
    ``train --resume`` inherits."""
    from depnmt.model.schemes.upgrade import upgrade_model_config
    out = {**config, "config_format": CONFIG_FORMAT}
    model = config.get("model")
    if isinstance(model, dict) and (isinstance(model.get("schemes"), list) or (
            isinstance(model.get("scheme"), list)
            and isinstance(model.get("scheme_options", {}), dict))):
        try:
            out["model"] = upgrade_model_config(model)
        except DepnmtError as exc:
            raise DepnmtError(f"{path}: {exc}") from None
    if config["config_format"] == 1 and isinstance(config.get("training"), dict):
        out["training"] = {"precision": "fp32", **config["training"]}
    return out


def check_config(path: Path, config: dict[str, Any]) -> None:
    """Error naming ``path`` and the key when a part of :data:`SECTIONS` is missing or has the
    wrong JSON type (a hand-edited or foreign file), instead of a traceback later."""
    check_sections(path, config, SECTIONS, f"(not a {CONFIG} written by `depnmt train`?)")
    if not all(isinstance(s, dict) and isinstance(s.get("name"), str)
               and isinstance(s.get("options"), dict) for s in config["model"]["schemes"]):
        raise DepnmtError(f"{path}: \"model.schemes\" should be a list of "
                          f"{{\"name\": ..., \"options\": {{...}}}} objects")


def check_sections(path: Path, record: dict[str, Any], sections: dict, hint: str) -> None:
    """The :data:`SECTIONS`-style ``sections`` of a JSON ``record`` read from ``path`` (a
    model's config.json, an export's record): each required one present, each field of the
    JSON type it needs, no unknown search setting; else a DepnmtError naming the key, with
    ``hint``."""
    for section, (fields, required) in sections.items():
        value = record.get(section, _MISSING)
        if value is _MISSING and not required:
            continue
        _check_type(path, section, value, dict, hint)
        for key, types in fields.items():
            if required or key in value:
                _check_type(path, f"{section}.{key}", value.get(key, _MISSING), types, hint)
    unknown = sorted(set(record.get("search", {})) - set(SEARCH_FIELDS))
    if unknown:
        raise DepnmtError(f"{path}: unknown search setting(s) {', '.join(unknown)}")


_MISSING = object()


def _check_type(path: Path, key: str, value: Any, types: type | tuple[type, ...],
                hint: str) -> None:
    if value is _MISSING:
        raise DepnmtError(f"{path}: no \"{key}\" {hint}")
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or isinstance(value, bool) and bool not in allowed:
        name = TYPE_NAMES.get(types) or TYPE_NAMES[allowed[0]]
        raise DepnmtError(f"{path}: \"{key}\" should be {name}, found "
                          f"{json.dumps(value)[:40]} {hint}")


# -- the subword files: vocabularies and segmenter files, checked as a whole --------------------

def subword_files(folder: Path) -> list[str]:
    """The names of a bpe or model folder's vocabularies and the files its segmenters read
    (BPE codes, filter vocabularies; as ``bpe.json`` names them)."""
    sides = read_json(folder / BPE_CONFIG, "").get("sides", {}) \
        if (folder / BPE_CONFIG).is_file() else {}
    named = {cfg[key] for cfg in sides.values() for key in ("codes", "filter_vocab")
             if isinstance(cfg, dict) and cfg.get(key)}
    return ["vocab.src.txt", "vocab.tgt.txt", *sorted(named)]


def default_model_dir() -> Path:
    """The model directory a command reads when given none: ``$DEPNMT_MODEL``, else ./model."""
    return Path(os.environ.get("DEPNMT_MODEL", "model"))


MODEL_FILES = (CONFIG, "train.yaml", "metrics.jsonl", "manifest.json", BPE_CONFIG, LOCK)


def model_parts(model_dir: Path) -> list[tuple[str, Path]]:
    """``(what, path)`` of what a model folder consists of (its files and its checkpoints
    folder, as :func:`~depnmt.core.stagedir.check_output_files` takes them): what an output file
    of a command reading the model must not replace. Other files in the folder (a user's
    translations, say) are not the model's."""
    names = dict.fromkeys([*MODEL_FILES, *subword_files(model_dir)])
    return [*((f"model's {name}", model_dir / name) for name in names),
            ("model's checkpoints folder", checkpoint_dir(model_dir))]


def model_reads(model_dirs: Iterable[Path], checkpoint: str | None = None
                ) -> list[tuple[str, Path]]:
    """What a command reading these models (``-m``, ``--checkpoint``) must not write onto:
    each one's :func:`model_parts`, and the checkpoint when it is given as a file."""
    reads = [part for model_dir in model_dirs for part in model_parts(model_dir)]
    if checkpoint and checkpoint_file(checkpoint):
        reads.append(("checkpoint", Path(checkpoint)))
    return reads


def subword_digests(model_dir: Path) -> dict[str, str]:
    """``{name: sha256}`` of the model folder's :func:`subword_files` (``config.json``'s
    ``files``, written by ``train``)."""
    from depnmt.data.record import sha256
    return {name: sha256(model_dir / name) for name in subword_files(model_dir)}


def check_subword_files(model_dir: Path, config: dict[str, Any]) -> None:
    """The model folder's vocabularies and codes are those it was trained with: each file
    ``config.json`` records (``files``) present with its sha256, else a :class:`DepnmtError`
    naming it; a folder of an earlier depnmt (no ``files``) loads with a warning."""
    from depnmt.data.record import sha256
    recorded = config.get("files")
    if not isinstance(recorded, dict):
        warn(f"{model_dir}/{CONFIG}: records no checksums of its vocabularies and codes "
             f"(written by an earlier depnmt); they are not checked")
        return
    for name, digest in recorded.items():
        path = model_dir / name
        if not path.is_file():
            raise DepnmtError(f"{path}: missing ({CONFIG} lists it; the model needs it)")
        actual = sha256(path)
        if actual != digest:
            raise DepnmtError(f"{path}: not the file the model was trained with (sha256 "
                              f"{actual[:12]}…, {CONFIG} records {digest[:12]}…): it was "
                              f"changed or cut short; restore it from the bpe folder")


def check_same_subwords(data_dir: Path, model_dir: Path, flag: str = "--resume") -> None:
    """``--resume`` (``flag``; also ``--init-from``): the data folder's vocabularies and codes
    are byte for byte the model's (another segmentation of the same size would swap them under
    the trained weights); else a :class:`DepnmtError` naming the first file that differs."""
    from depnmt.data.record import sha256
    for name in subword_files(model_dir):
        ours, theirs = model_dir / name, data_dir / name
        if not theirs.is_file() or sha256(theirs) != sha256(ours):
            raise DepnmtError(f"{theirs}: differs from the model's {ours}: {flag} needs the "
                              f"data the model was trained on (the same vocabularies and "
                              f"subword codes)")


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


def metrics_lines(path: Path) -> list[str]:
    """The lines of a ``metrics.jsonl``, each with its line break (the last one may have
    none). ``train`` writes the log as ASCII JSON, so bytes that are not UTF-8 mean a damaged
    file: an :class:`InputError` naming the first such line, never a guess."""
    with naming(path, "read"):
        data = path.read_bytes()
    raw = data.split(b"\n")
    lines = [line + b"\n" for line in raw[:-1]] + ([raw[-1]] if raw[-1] else [])
    out = []
    for lineno, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(path, lineno, "not valid UTF-8 (train writes this log as ASCII "
                                           "JSON, so the line was damaged: restore the file "
                                           "from a copy, or delete the line)") from None
    return out


def read_metrics(model_dir: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` in order (a line that is not UTF-8, not a JSON
    object or one without an integer ``step`` is an error naming the line). An unfinished
    last line (no line break after it: a training is appending it, or was killed while it
    did) is left out with a warning:
    ``runs``, ``plot`` and ``report`` read the logs of runs in progress and of killed ones
    (which ``train --resume`` repairs). Every record has an ``event``; readers take the
    events they know (``train``, ``valid``, ...) and pass over the others (``data_changed``:
    :mod:`depnmt.training.provenance`)."""
    path = model_dir / "metrics.jsonl"
    if not path.exists():
        raise DepnmtError(f"{path}: missing; is {model_dir} a trained model directory?")
    lines = metrics_lines(path)
    finished = not lines or lines[-1].endswith("\n")
    records = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not finished:
                warn(f"{path}:{lineno}: an unfinished last record (being written, or its "
                     f"training was killed while writing it) is left out")
                break
            raise InputError(path, lineno, f"not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("event"), str):
            raise InputError(path, lineno, "not a metrics record (a JSON object with \"event\")")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InputError(path, lineno, f"a {json.dumps(record['event'])} record "
                             + ("without \"step\"" if "step" not in record else
                                f"whose \"step\" is {json.dumps(step)}")
                             + " (every record has the update count, an integer >= 0)")
        records.append(record)
    return records


RESERVED_CHECKPOINTS = ("last", "best")    # written by train; `average -o` must not take them


def named_checkpoint(model_dir: Path, name: str) -> Path:
    """``translate --checkpoint NAME``: ``MODEL_DIR/checkpoints/NAME.pt`` (``best``, ``last``,
    a ``stepN`` snapshot of ``--keep-last`` or an average's name), or NAME itself when it is a
    path (it contains a ``/`` or names an existing ``.pt`` file)."""
    given = Path(name)
    if checkpoint_file(name):
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


def checkpoint_file(name: str) -> bool:
    """Whether ``--checkpoint NAME`` is a path (it contains a ``/`` or names an existing
    ``.pt`` file) rather than a name in the model's checkpoints folder."""
    return "/" in name or (name.endswith(".pt") and Path(name).is_file())


@contextmanager
def lock_for_writing(model_dir: Path) -> Iterator[None]:
    """Hold ``MODEL_DIR/.lock`` for the block (created with the folder if needed) and remove
    the temporary files an interrupted writer left; an error when another process holds it.
    A folder it created that holds nothing but the lock when the block fails (a run refused
    before it wrote anything) is removed."""
    created = not model_dir.exists()
    make_dir(model_dir)
    with hold_lock(model_dir / LOCK, model_dir, "another training writes this model directory"):
        for folder in (model_dir, checkpoint_dir(model_dir)):
            for leftover in folder.glob(".*.tmp") if folder.is_dir() else ():
                leftover.unlink(missing_ok=True)
        try:
            yield
        except BaseException:
            if created and [p.name for p in model_dir.iterdir()] == [LOCK]:
                (model_dir / LOCK).unlink()
                model_dir.rmdir()
            raise


def load_model_checkpoint(path: Path, expected_model: dict[str, Any],
                          files: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`depnmt.storage.checkpoint.load_checkpoint`, and a DepnmtError when the checkpoint was
    trained with another architecture or positional scheme than ``expected_model`` (a
    :class:`~depnmt.model.transformer.ModelConfig` dict) or, given the model folder's
    ``files`` (``config.json``'s sha256 of its vocabularies and codes), with other ones
    (:func:`check_same_files`); an average whose snapshots changed since
    (:func:`depnmt.storage.averaged.check_average`)."""
    from depnmt.storage.averaged import check_average
    from depnmt.storage.checkpoint import load_checkpoint
    state = load_checkpoint(path)
    check_same_model(path, state.get("model_config", {}), expected_model)
    check_parameters(path, state.get("model"), expected_model)
    check_same_files(path, state.get(CHECKPOINT_FILES), files)
    check_average(path, state)
    return state


CHECKPOINT_FILES = "files"      # a checkpoint's record of its run's vocabularies and codes


def check_same_files(path: Path, trained: Any, files: dict[str, str] | None) -> None:
    """The checkpoint ``path`` was trained with the vocabularies and codes ``files`` (``{name:
    sha256}``, as ``config.json`` records them): a checkpoint of another run whose weights
    have the same shapes (the same vocabulary sizes) would translate with this folder's
    vocabularies swapped under its weights. Checkpoints of an earlier depnmt (no record), and
    folders without one, are not checked."""
    if not isinstance(trained, dict) or not isinstance(files, dict):
        return
    for name in sorted(files.keys() | trained.keys()):
        if trained.get(name) != files.get(name):
            raise DepnmtError(f"{path}: trained with another {name} than the model folder's "
                              f"(sha256 {str(trained.get(name))[:12]}…, {CONFIG} records "
                              f"{str(files.get(name))[:12]}…): a checkpoint of another run; "
                              f"translate it with its own model folder")


def check_parameters(path: Path, weights: Any, model: dict[str, Any]) -> None:
    """The checkpoint's weights include every parameter of the model ``model`` describes, in
    its shapes (:func:`~depnmt.model.shapes.state_shapes`: no memory, no weights drawn), else a
    DepnmtError naming the first that is missing or of another shape (weights it has beyond
    them are the loader's to judge: the model drops some it no longer builds)."""
    import torch

    from depnmt.model.shapes import state_shapes
    if not isinstance(weights, dict):
        raise DepnmtError(f"{path}: holds no model weights")
    for name, shape in state_shapes(model).items():
        found = weights.get(name)
        if not isinstance(found, torch.Tensor):
            raise DepnmtError(f"{path}: has no weights for {name} (the checkpoint is incomplete)")
        if found.shape != shape:
            raise DepnmtError(f"{path}: {name} is {tuple(found.shape)}, the model's is "
                              f"{tuple(shape)}")


def check_same_model(path: Path, found: dict, expected: dict) -> None:
    """Error naming the first differing setting (scheme first: the most common mistake);
    ``expected`` in today's form (a run's model, or one :func:`read_config` read), ``found``
    the checkpoint's as saved: upgraded here, where it is read (a checkpoint saved with an old
    model config, a flat options bag, is compared upgraded)."""
    from depnmt.model.schemes.upgrade import upgrade_model_config
    found = upgrade_model_config(found)
    keys = ["schemes"] + sorted(k for k in expected if k != "schemes")
    for key in keys:
        if found.get(key) != expected.get(key):
            raise DepnmtError(f"{path}: checkpoint was trained with {key}={found.get(key)!r} but "
                              f"this model is configured with {key}={expected.get(key)!r}")
