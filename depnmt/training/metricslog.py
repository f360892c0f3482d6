"""What a training run says: ``metrics.jsonl`` (one JSON object per record, appended by rank
0, each also a TensorBoard scalar with ``--tensorboard``), the loss and throughput window
between two ``train`` records, and the lines printed before the first update (the model's
size, the budget and the stop rule in effect).

The log holds each record once after any number of kills and resumes: every checkpoint
records how many records the log held when it was saved (``log_records``), and ``--resume``
keeps that many (:meth:`MetricsLog.rewind`), plus the records of a resume on other data
(``data_changed``, :mod:`depnmt.training.provenance`) or with other settings
(``settings_changed``, :func:`depnmt.training.provenance.settings_record`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from depnmt.core.log import info
from depnmt.core.textio import append_line, atomic_open
from depnmt.storage.modeldir import metrics_lines
from depnmt.training import distributed as dist
from depnmt.training.provenance import EVENT, SETTINGS_EVENT

RESUME_EVENTS = (EVENT, SETTINGS_EVENT)     # logged before a resumed run re-reaches any step

if TYPE_CHECKING:
    from depnmt.model.transformer import ModelConfig
    from depnmt.training.board import TensorBoardLog
    from depnmt.training.config import TrainOptions

METRICS = "metrics.jsonl"
NO_LIMIT_WARNING = ("no limit: no epoch, update or time limit and no early stopping, so "
                    "training runs until it is stopped (Ctrl-C saves last.pt); set --max-epochs, "
                    "--max-steps, --max-minutes or --patience")


class MetricsLog:
    """A model directory's ``metrics.jsonl``, written by rank 0 (the other ranks write
    nothing), and how many records it holds (what a checkpoint records as ``log_records``)."""

    def __init__(self, model_dir: Path, board: TensorBoardLog | None = None):
        """``board``: where ``--tensorboard`` writes every record (None: nowhere)."""
        self.path, self.board, self.records = model_dir / METRICS, board, 0

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` (rank 0 only)."""
        if not dist.is_main():
            return
        append_line(self.path, json.dumps(record))
        self.records += 1
        if self.board is not None:
            self.board.write(record)

    def last_event(self) -> str | None:
        """The ``event`` of the log's last record (None: no log, or no records)."""
        lines = metrics_lines(self.path) if self.path.exists() else []
        return event_of(lines[-1]) if lines else None

    def rewind(self, keep: int | None, step: int, checkpoint: Path) -> None:
        """Keep the records written before the checkpoint resumed from (``keep`` of them; None
        for a checkpoint of an earlier depnmt: those up to its update ``step``; the records
        after it are logged again when their steps are re-run) and the :data:`RESUME_EVENTS`
        ones (they record the data and settings, logged before the run re-reaches any step);
        rewritten
        atomically. A line that is not UTF-8 is an error naming it."""
        lines = metrics_lines(self.path) if self.path.exists() else []
        if keep is None:
            keep = records_up_to(lines, step)
        kept = lines[:keep] + [line for line in lines[keep:]
                               if event_of(line) in RESUME_EVENTS]
        if len(kept) < len(lines):
            with atomic_open(self.path) as fh:
                fh.writelines(kept)
            dropped = [line for line in lines[keep:] if event_of(line) not in RESUME_EVENTS]
            if any(event_of(line) not in ("end", "stopped") for line in dropped):    # redone
                info(f"{self.path}: dropped {len(dropped)} record(s) written after "
                     f"{checkpoint.name} was saved (step {step}); their steps are run again")
        self.records = len(kept)


def records_up_to(lines: list[str], step: int) -> int:
    """How many of a log's first ``lines`` were written up to update ``step`` (for a
    checkpoint that does not record it): up to the first of a later step, an ``end`` or
    ``stopped`` record or a line that is not a JSON object."""
    keep = 0
    for line in lines:
        try:
            record = json.loads(line)
            if record.get("step", 0) > step or record.get("event") in ("end", "stopped"):
                break
        except (ValueError, AttributeError):
            break
        keep += 1
    return keep


def event_of(line: str) -> str | None:
    """The ``event`` of a metrics.jsonl line (None when it is not a JSON object)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("event") if isinstance(record, dict) else None


@dataclass
class Window:
    """What the updates since the last ``train`` record add up to: target and source tokens,
    the loss and the schemes' auxiliary losses (each summed per target token)."""

    tokens: int = 0
    src_tokens: int = 0
    loss: float = 0.0
    aux: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def add(self, stats: dict[str, Any]) -> None:
        """Add one update's statistics (:meth:`depnmt.training.step.Updater.step`)."""
        self.tokens += stats["tokens"]
        self.src_tokens += stats["src_tokens"]
        self.loss += stats["loss"] * stats["tokens"]
        for k, v in stats["aux"].items():
            self.aux[k] = self.aux.get(k, 0.0) + v * stats["tokens"]

    def reset(self) -> None:
        """Start a new window (after its record is logged)."""
        self.tokens, self.src_tokens, self.loss, self.aux = 0, 0, 0.0, {}
        self.started = time.monotonic()

    def record(self, step: int, epoch: int, lr: float, waited: float) -> dict[str, Any]:
        """The ``train`` record of the window: mean losses and (global) throughput;
        ``waited``: the seconds the loop waited for its batches in the window."""
        dt = max(time.monotonic() - self.started, 1e-9)
        tokens = max(self.tokens, 1)
        record = {"event": "train", "step": step, "epoch": epoch,
                  "loss": round(self.loss / tokens, 4), "lr": lr,
                  "tgt_tokens_per_s": round(self.tokens / dt, 1),
                  "src_tokens_per_s": round(self.src_tokens / dt, 1),
                  "batch_wait_s": round(waited, 4),     # the loop waiting for its next batches
                  "batch_wait_share": round(waited / dt, 4)}
        load = load_average()
        if load is not None:
            record["load"] = load        # what else ran: tokens/s of separate runs need it
        record.update({k: round(v / tokens, 4) for k, v in self.aux.items()})
        return record


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes, this one included), rounded;
    None where the OS has none (Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def model_summary(cfg: ModelConfig, n_params: int) -> str:
    """``model: 6+6 layers, d_model 512, 8 heads, d_ff 2048, 44.1 M parameters``."""
    return (f"model: {cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, "
            f"{cfg.n_heads} heads, d_ff {cfg.d_ff}, {n_params / 1e6:.1f} M parameters")


def budget_summary(o: TrainOptions, dev_refs: bool) -> str:
    """``budget: at most 30 epochs or 20 minutes; stops early after 5 validations without a
    better dev acc`` — the limits and the stop rule in effect (``dev_refs``: whether the dev
    set has references, without which ``--early-stop-metric bleu`` selects by the loss)."""
    limits = [f"{n:g} {unit if n != 1 else unit[:-1]}"
              for n, unit in ((o.max_epochs, "epochs"), (o.max_steps, "updates"),
                              (o.max_minutes, "minutes")) if n]
    budget = ("at most " + " or ".join(limits)) if limits else "no epoch, update or time limit"
    metric = {"bleu": "BLEU" if dev_refs else "loss", "acc": "acc", "loss": "loss"}
    stop = (f"stops early after {o.patience} validations without a better dev "
            f"{metric[o.early_stop_metric]}") if o.patience else "no early stopping"
    return f"budget: {budget}; {stop}"


def left_out_warning(n_batches: int, update_freq: int, world: int) -> str | None:
    """What the epoch's last, incomplete update leaves out (None: nothing): an update takes
    ``update_freq × world`` batches (:func:`~depnmt.data.batches.shard_updates`), and the
    ``n_batches % (update_freq × world)`` batches that do not make a whole one are not trained
    on that epoch (which ones changes with the shuffled order of every epoch)."""
    size = update_freq * world
    left = n_batches % size
    if not left:
        return None
    by = "--update-freq" + (" × processes" if world > 1 else "")
    return (f"{by} {update_freq}{f' × {world}' if world > 1 else ''}: each epoch's {n_batches} "
            f"batches make {n_batches // size} updates of {size}, and the last {left} "
            f"{'batch' if left == 1 else 'batches'} "
            f"({100 * left / n_batches:.1f}% of the epoch, other pairs every epoch) "
            f"{'is' if left == 1 else 'are'} left out; an {by} that divides {n_batches} trains "
            f"on every pair")


def has_limit(o: TrainOptions) -> bool:
    """Whether anything ends the run by itself: an epoch, update or time limit or early
    stopping."""
    return bool(o.max_epochs or o.max_steps or o.max_minutes or o.patience)
