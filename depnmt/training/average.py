"""Checkpoint averaging: the parameters of several checkpoints of one run, averaged.

As fairseq's ``scripts/average_checkpoints.py``: the ``model`` state dicts must have the same
keys in the same order; floating-point tensors are summed in fp32 (fp16/bf16 ones converted) and
divided by the number of checkpoints, integer buffers are floor-divided; the result is fp32. The
checkpoints are chosen among the ``step{N}.pt`` snapshots that ``train --keep-last`` keeps:
``--last N`` (highest updates) or ``--best N`` (best validations by the run's
``--early-stop-metric``, read from ``metrics.jsonl``). The average is written with the model
config and its sources (names, updates and SHA-256s: :mod:`depnmt.storage.averaged`) to
``MODEL_DIR/checkpoints/NAME.pt``, which ``translate --checkpoint NAME`` loads: refused when a
snapshot it averaged holds other weights now, with a warning when the run has trained on since.
One writer per name: an average holds ``checkpoints/.NAME.pt.lock``
(:func:`depnmt.core.stagedir.hold_lock`) from choosing the snapshots
to writing the file; a second average into the same name waits for it. The lock is the
file's, not the model directory's, so a model can be averaged while it trains.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import POSITIVE, Folder, check_options, option
from depnmt.core.stagedir import hold_lock
from depnmt.core.textio import make_dir
from depnmt.storage.averaged import average_record, source_record
from depnmt.storage.checkpoint import peek_checkpoint, save_checkpoint
from depnmt.storage.modeldir import (CHECKPOINT_FILES, RESERVED_CHECKPOINTS, checkpoint_dir,
                                     default_model_dir, load_model_checkpoint, read_config,
                                     read_metrics)
from depnmt.training.checkpoints import snapshots
from depnmt.training.validation import selection_metric


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]], names: Sequence[str] | None = None
                        ) -> OrderedDict[str, torch.Tensor]:
    """The mean of ``states`` (model state dicts) key by key (module docstring)."""
    if not states:
        raise DepnmtError("no checkpoints to average")
    names = names or [f"checkpoint {i + 1}" for i in range(len(states))]
    keys = list(states[0])
    total: OrderedDict[str, torch.Tensor] = OrderedDict()
    for state, name in zip(states, names):
        if list(state) != keys:
            raise DepnmtError(f"{name}: its parameters differ from those of {names[0]} (another "
                              f"model?)")
        for k in keys:
            p = state[k].float() if state[k].is_floating_point() else state[k]
            total[k] = p.clone() if k not in total else total[k] + p   # clone: tied parameters
    for k, v in total.items():
        total[k] = v / len(states) if v.is_floating_point() else v // len(states)
    return total


def choose(model_dir: Path, last: int | None = None, best: int | None = None) -> list[Path]:
    """The snapshots to average: the ``last`` newest, or the ``best`` by the run's selection
    metric (only snapshots taken at a validation qualify); oldest first."""
    found = snapshots(checkpoint_dir(model_dir))
    want = last or best
    if not want or want < 1 or (last and best):
        raise DepnmtError("give one of --last N or --best N (N ≥ 1)")
    if last:
        chosen = found[-last:]
    else:
        metric_name = read_config(model_dir).get("training", {}).get("early_stop_metric", "bleu")
        scores = validation_scores(model_dir, metric_name)
        ranked = sorted((p for p in found if int(p.stem[4:]) in scores),
                        key=lambda p: scores[int(p.stem[4:])], reverse=True)
        chosen = sorted(ranked[:best], key=lambda p: int(p.stem[4:]))
    if len(chosen) < want:
        raise DepnmtError(f"{model_dir}: {len(chosen)} snapshot(s) to choose from, {want} asked "
                          f"for (train with --keep-last {want} or more; snapshots are "
                          f"checkpoints/step*.pt)")
    return chosen


def validation_scores(model_dir: Path, metric_name: str) -> dict[int, float]:
    """Step -> selection score (higher is better) of every validation in ``metrics.jsonl``."""
    scores = {}
    records = read_metrics(model_dir) if (model_dir / "metrics.jsonl").exists() else []
    for record in records:
        if record.get("event") == "valid":
            key, sign = selection_metric(metric_name, record)
            if key in record:
                scores[record["step"]] = sign * record[key]
    return scores


@dataclass
class AverageSettings:
    """The options of ``depnmt average`` (:func:`average`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    model_dir: Path = option(default_model_dir, "model directory written by `depnmt train "
                             "--keep-last N`", Folder(), flag=("-m", "--model"),
                             metavar="MODEL_DIR")
    last: int | None = option(None, "average the N newest snapshots (checkpoints/step*.pt)",
                              POSITIVE)
    best: int | None = option(None, "average the N kept snapshots with the best validation by "
                              "the run's --early-stop-metric", POSITIVE)
    name: str | None = option(None, "write MODEL_DIR/checkpoints/NAME.pt (then `translate "
                              "--checkpoint NAME`)", str, flag=("-o", "--output"), required=True,
                              metavar="NAME")

    def __post_init__(self):
        check_options(self)


def average(model_dir: Path, name: str, last: int | None = None, best: int | None = None) -> Path:
    """Average the chosen snapshots of ``model_dir`` into ``checkpoints/NAME.pt``; returns it."""
    if not name or "/" in name or name.removesuffix(".pt") in RESERVED_CHECKPOINTS or \
            (name.startswith("step") and name.removesuffix(".pt")[4:].isdigit()):
        raise DepnmtError(f"-o {name!r}: give a plain name other than last, best and stepN "
                          f"(the files train writes)")
    out = checkpoint_dir(model_dir) / (name if name.endswith(".pt") else f"{name}.pt")
    config = read_config(model_dir, upgrade=True)
    model_config, files = config["model"], config.get(CHECKPOINT_FILES)
    with hold_lock(make_dir(out.parent) / f".{out.name}.lock", out,
                   "another `depnmt average` writes it", wait=True):
        check_replaceable(out)
        paths = choose(model_dir, last, best)
        models, sources = [], []
        for path in paths:              # one snapshot's optimizer state in memory at a time
            state = load_model_checkpoint(path, model_config, files)
            models.append(state["model"])
            sources.append(source_record(path, state))
        save_checkpoint(out, {"model_config": model_config,
                              "model": average_state_dicts(models, [str(p) for p in paths]),
                              **({CHECKPOINT_FILES: files} if isinstance(files, dict) else {}),
                              "averaged_from": [p.name for p in paths],
                              **average_record(out.parent, sources)})
    return out


def check_replaceable(out: Path) -> None:
    """An existing ``out`` is replaced only when it is an earlier average (it records the
    snapshots it averaged, ``averaged_from``): a checkpoint of another kind put there by hand
    (a copy of a best.pt, another run's model) is a :class:`DepnmtError` naming it, never
    overwritten. Read memory-mapped (:func:`~depnmt.storage.checkpoint.peek_checkpoint`): its
    tensors are not loaded."""
    if out.exists() and "averaged_from" not in (peek_checkpoint(out) or {}):
        raise DepnmtError(f"{out}: exists and is not an average (depnmt average replaces only "
                          f"its own): give -o another name, or move the file away")
