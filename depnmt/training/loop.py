"""The training loop: epochs of token-count batches, an update at a time
(:class:`~depnmt.training.step.Updater`), validation every ``--valid-every`` updates or epoch
(:mod:`depnmt.training.validation`), last/best checkpoints (:mod:`depnmt.training.checkpoints`),
early
stopping, the epoch, update and time budgets, a JSONL metrics log
(:mod:`depnmt.training.metricslog`) and
exact resumption.

Resumption restores model, optimizer, scheduler, AMP scaler, RNG states and the data order: the
batch order of an epoch depends only on (seed, epoch), so the checkpoint stores the epoch and how
many batches of it were consumed, and a resumed run continues with the next batch.

Under ``torchrun`` (:mod:`depnmt.training.distributed`) every rank builds the same batch order and
takes
its share of each update (:func:`~depnmt.data.batches.shard_updates`; the loss normalised over the
whole update: :mod:`depnmt.training.step`). Rank 0 validates, prints and writes every file; stop
decisions are rank 0's, broadcast. Every rank must train on rank 0's data and resume from its
``last.pt`` (:func:`check_same_data`, :func:`check_same_checkpoint`: copies on machines without
a shared file system). The GPU running out of memory is a one-line error that says
what to lower.

Kills and signals (the guarantees ``tests/cli/test_reliability.py`` and
``bench/kill_resume.py`` check):

* A run never trains past ``--max-steps``: the budget is checked before the first update too,
  and resuming a finished run (a limit reached, or early stopping) trains, saves and logs
  nothing.
* ``metrics.jsonl`` holds each record once after any number of kills and resumes
  (:class:`~depnmt.training.metricslog.MetricsLog`); the steps after the checkpoint are re-run and
  logged
  again. A fresh start clears what a run killed before its first ``last.pt`` left (log,
  ``best.pt``). A log line that is not UTF-8 is an error naming it.
* ``best.pt`` is written before ``last.pt`` (:mod:`depnmt.training.checkpoints`); the log and
  ``last.pt`` always agree (both rewind to the checkpoint).
* SIGTERM/SIGINT/SIGHUP: see :mod:`depnmt.core.stopsignals` (save ``last.pt`` after the update, exit
  143/130/129). The caller holds the model directory's lock
  (:func:`depnmt.storage.modeldir.lock_for_writing`), which also removes leftover temporary files.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from depnmt.core.device import out_of_memory_as, precision_name, precision_note, train_precision
from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, progress_bar, warn
from depnmt.core.stopsignals import Stopped, StopSignals
from depnmt.data.batches import TokenBatcher, add_features, iterate_updates, pinned, prefetch
from depnmt.data.loader import WaitClock, default_workers, worker_updates
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.training import distributed as dist
from depnmt.training.checkpoints import Checkpoints, Progress
from depnmt.training.config import TrainingRun
from depnmt.training.metricslog import (NO_LIMIT_WARNING, MetricsLog, Window, budget_summary,
                                        has_limit, left_out_warning, model_summary)
from depnmt.training.step import Updater
from depnmt.training.validation import Validator, improved
from depnmt.training.warmstart import warm_start

if TYPE_CHECKING:
    from depnmt.training.board import TensorBoardLog


class Trainer:
    """Owns the model and progress of one training run and runs its loop; the run itself
    (model directory, data, config: ``run``) is set up by
    :func:`depnmt.training.setup.prepare_run`. Its parts: ``updater`` (optimizer, schedule, loss
    scale, one update), ``validator``, ``checkpoints`` and ``metrics`` (the log)."""

    def __init__(self, run: TrainingRun, board: TensorBoardLog | None = None):
        """``board``: where ``--tensorboard`` writes every record (None: nowhere)."""
        self.run, training = run, run.training
        random.seed(training.seed)      # before anything random (model initialisation
        torch.manual_seed(training.seed)  # included); a resumed run then restores the RNG states
        self.device = dist.local_device(training.device)
        self.amp = train_precision(self.device,
                                   training.precision if training.amp else "fp32")
        self.metrics = MetricsLog(run.model_dir, board)
        with building_model(run.model, self.device):
            self.model = TransformerNMT(run.model, run.schemes or None
                                        ).to(self.device)               # alike on every rank
        if run.init_from is not None and not run.resume:
            warm_start(self.model, run.init_from, run.data_dir)
        if dist.is_main():         # rank 0 validates; training batches get theirs when collated
            add_features(run.dev_data, self.model.schemes.schemes)
        dist.seed_rank(training.seed)
        self.updater = Updater(self.model, self.device, self.amp, training)
        self.checkpoints = Checkpoints(run, self.model, self.updater)
        self.validator = Validator(run, self.model, self.device, self.amp)
        self.progress = Progress()
        self.batcher = TokenBatcher(run.train_data.lengths(), training.max_tokens,
                                    training.seed,
                                    max_sentences=training.batch_sentences or None)
        self.workers = (training.workers if training.workers >= 0 else
                        default_workers(self.device, dist.local_world_size()))
        self.wait = WaitClock()
        check_same_data(run)
        if run.resume:
            self._resume()
        self.updater.use(dist.wrap(self.model, self.device))    # what trains: DDP or the model

    @property
    def net(self) -> torch.nn.Module:
        """What training runs: the model or its DDP wrapper."""
        return self.updater.net

    def _resume(self) -> None:
        """Continue from ``last.pt`` (:meth:`Checkpoints.restore`); rank 0 rewinds the log to
        it (unless the run had finished) and checks ``best.pt``."""
        path, self.progress = self.checkpoints.restore()
        check_same_checkpoint(path, self.progress)
        if dist.is_main():
            if self.finished() is None:     # a finished run's log stays as it is
                self.metrics.rewind(self.progress.log_records, self.progress.step, path)
            self.checkpoints.check_best(self.progress, path)
        info(f"resumed from {path}: step {self.progress.step}, epoch {self.progress.epoch}, "
             f"batch {self.progress.batches_done}")

    def save(self, *names: str) -> None:
        """Save the checkpoint as each of ``names`` (:meth:`Checkpoints.save`; every rank)."""
        if dist.is_main():
            self.progress.log_records = self.metrics.records
        self.checkpoints.save(self.progress, *names)

    def log(self, record: dict) -> None:
        """Append ``record`` to metrics.jsonl with the training time so far (rank 0 only)."""
        self.metrics.write({"time": round(self.progress.elapsed, 2), **record})

    def train_step(self, batches: list) -> dict[str, Any]:
        """One update (:meth:`Updater.step`), counted in the progress when it stepped."""
        stats = self.updater.step(batches)
        if stats["stepped"]:
            self.progress.step += 1
        return stats

    # -- the budget --------------------------------------------------------------------------
    def _budget_left(self, started: float, base: float) -> bool:
        """Update the elapsed time; False once ``--max-steps`` or ``--max-minutes`` is spent (rank
        0's clock decides for every rank)."""
        o, p = self.run.training, self.progress
        p.elapsed = base + time.monotonic() - started
        if o.max_steps and p.step >= o.max_steps:
            return False
        if o.max_minutes and p.elapsed >= o.max_minutes * 60:
            return False
        return True

    def _keep_going(self, started: float, base: float) -> bool:
        """:meth:`_budget_left` as rank 0 sees it, on every rank (so that all stop together)."""
        return dist.broadcast_flag(self._budget_left(started, base))

    def finished(self) -> str | None:
        """What ended the run already (``--max-steps 10``, ...: a finished run resumed with the
        same limits), or None when it has updates left to train."""
        o, p = self.run.training, self.progress
        if o.max_steps and p.step >= o.max_steps:
            return f"--max-steps {o.max_steps}"
        if o.max_epochs and p.epoch > o.max_epochs:
            return f"--max-epochs {o.max_epochs}"
        if o.max_minutes and p.elapsed >= o.max_minutes * 60:
            return f"--max-minutes {o.max_minutes:g}"
        if o.patience and p.bad_validations >= o.patience:
            return f"--patience {o.patience}"
        return None

    # -- the loop ----------------------------------------------------------------------------
    def train(self, signals: StopSignals) -> Progress:
        """Train until a budget (epochs, steps, minutes) or early stopping ends the run; after
        each update, stop (:class:`Stopped`) when ``signals`` received SIGTERM/SIGINT/SIGHUP.
        A finished run resumed trains, saves and logs nothing (but the ``end`` record a kill
        right after its ``last.pt`` kept it from writing)."""
        o, p = self.run.training, self.progress
        done = self.finished() if self.run.resume else None
        if done is not None:
            info(f"{self.run.model_dir}: the run finished at update {p.step} ({done}); "
                 f"nothing to train (give a larger {done.split()[0]} to continue it)")
            if self.metrics.last_event() != "end":   # killed between last.pt and its record
                self._log_end()
            return p
        clock = time.monotonic(), p.elapsed
        self._announce()
        window = Window()                       # over epochs, until it is logged
        stop = not self._keep_going(*clock)     # e.g. a finished run resumed
        with progress_bar() as bar:
            task = bar.add_task(f"epoch {p.epoch}", total=o.max_steps or None, completed=p.step)
            while not stop and (not o.max_epochs or p.epoch <= o.max_epochs):
                if self._epoch(signals, clock, window, lambda **k: bar.update(task, **k)):
                    break
                p.epoch, p.batches_done = p.epoch + 1, 0   # saved progress = next epoch's start
                if not o.valid_every:
                    stop = self._validate_and_save(epoch=p.epoch - 1)
                budget = self._keep_going(*clock)
                stop = stop or not budget
                if not stop:
                    self._stop_if_signalled(signals, clock)
        self._budget_left(*clock)
        self.save("last.pt")
        self._log_end()
        return p

    def _log_end(self) -> None:
        """The log's last record: where the run ended (after ``last.pt`` is saved)."""
        p = self.progress
        self.log({"event": "end", "step": p.step, "epoch": p.epoch, "elapsed": round(p.elapsed, 1),
                  **self.updater.compiled.observe()})
        if counts := self.updater.compiled.counts():
            info(counts.summary())

    def _epoch(self, signals: StopSignals, clock: tuple[float, float], window: Window,
               show: Callable[..., None]) -> bool:
        """The rest of the current epoch, an update at a time, each followed by what is due
        (a ``train`` record of ``window``, validation and checkpoints, or a save; ``show``
        updates the progress bar); True when the run stops in it (a budget spent, early
        stopping)."""
        o, p = self.run.training, self.progress
        for done, batches in self._updates():
            with self._out_of_memory(training=True):
                stats = self.train_step(batches)
            p.batches_done = done
            stepped = stats["stepped"]      # else: nothing of this update counts
            if stepped:
                self._check_finite(stats["loss"])
                window.add(stats)
                show(completed=p.step, description=f"epoch {p.epoch} loss {stats['loss']:.3f}")
                if p.step % o.log_every == 0:
                    self.log({**window.record(p.step, p.epoch, self.updater.lr, self.wait.take()),
                              **self.updater.compiled.observe()})
                    window.reset()
            else:
                info(f"update {p.step + 1}: inf/NaN gradients in fp16, skipped (loss "
                     f"scale now {self.updater.loss_scale:g})")
            budget = self._keep_going(*clock)
            stop = False
            if stepped and o.valid_every and p.step % o.valid_every == 0 or not budget:
                stop = self._validate_and_save() or not budget
            elif stepped and o.save_every and p.step % o.save_every == 0:
                self.checkpoints.snapshot(p)
                self.save("last.pt")
            if stop:
                return True
            self._stop_if_signalled(signals, clock)
        return False

    def _updates(self):
        """This rank's batches of each remaining update of the current epoch: collated (pairs
        read from the cache, tree features computed) by ``--workers`` processes, or here (on
        CUDA in a background thread), and pinned for a GPU; the time the loop waits for them
        is measured (:class:`~depnmt.data.loader.WaitClock`)."""
        p, cuda = self.progress, self.device.type == "cuda"
        where = dict(start=p.batches_done, rank=dist.rank(), world=dist.world_size(),
                     schemes=self.model.schemes.schemes)
        data, freq = self.run.train_data, self.run.training.update_freq
        if self.workers:
            updates = worker_updates(data, self.batcher, p.epoch, freq, self.workers, pin=cuda,
                                     **where)
        else:
            updates = iterate_updates(data, self.batcher, p.epoch, freq, **where)
            updates = prefetch(pinned(updates)) if cuda else updates
        return self.wait.timed(updates)

    def _announce(self) -> None:
        """Print and log the start; an error when an epoch is shorter than one update."""
        o, world, run = self.run.training, dist.world_size(), self.run
        n_batches = len(self.batcher.batches(1))
        if n_batches < o.update_freq * world:
            raise DepnmtError(f"an epoch has {n_batches} batches of --max-tokens {o.max_tokens}, "
                              f"fewer than one update takes ({world} process(es) × --update-freq "
                              f"{o.update_freq}): lower --max-tokens or --update-freq")
        n_params = sum(t.numel() for t in self.model.parameters())
        where = f"{self.device}" + (f" × {world} processes" if world > 1 else "")
        info(f"training {'+'.join(run.model.scheme_names)} on {where} in "
             f"{precision_name(self.amp)} ({n_params:,} parameters, {len(run.train_data):,} "
             f"pairs, {n_batches} batches/epoch)")
        if note := precision_note(self.device, o.precision if o.amp else "fp32"):
            info(note)
        info(model_summary(run.model, n_params))
        info(budget_summary(o, bool(run.dev_refs)))
        if not has_limit(o):
            warn(NO_LIMIT_WARNING)
        if left_out := left_out_warning(n_batches, o.update_freq, world):
            warn(left_out)
        for note in resumed_update_notes(self.progress, n_batches, o.update_freq, world,
                                         self.checkpoints.saved_processes if run.resume else world):
            warn(note)
        self.log({"event": "start", "step": self.progress.step, "parameters": n_params,
                  "device": str(self.device), "processes": world,
                  "precision": precision_name(self.amp),
                  **({"compile": o.compile} if self.updater.compiled.on else {})})

    def _stop_if_signalled(self, signals: StopSignals, clock: tuple[float, float]) -> None:
        """After an update (and its validation): when any rank received SIGTERM/SIGINT/SIGHUP,
        save last.pt, say so and raise :class:`Stopped` on every rank."""
        signum = dist.max_over_ranks(signals.received)
        if not signum:
            return
        self._budget_left(*clock)
        self.save("last.pt")
        stopped = Stopped(signum)
        self.log({"event": "stopped", "step": self.progress.step, "signal": stopped.name})
        info(f"{stopped} after update {self.progress.step}: saved "
             f"{self.checkpoints.folder / 'last.pt'}; continue with `depnmt train -i "
             f"{self.run.data_dir} -o {self.run.model_dir} --resume`")
        dist.barrier()      # no rank exits (and makes torchrun kill the others) before the save
        raise stopped

    def _check_finite(self, loss: float) -> None:
        """A :class:`DepnmtError` when an update's loss is not finite: the weights it stepped
        to are not numbers, so nothing more is saved (``last.pt`` and ``best.pt`` keep the last
        validated weights) and the run stops."""
        if not math.isfinite(loss):
            raise DepnmtError(
                f"update {self.progress.step}: the training loss is {loss} (not finite), so the "
                f"weights are no longer numbers; the checkpoints keep the last saved ones. Lower "
                f"--lr (or set --clip-norm), then --resume or start again")

    # -- validation ----------------------------------------------------------------------------
    def _validate_and_save(self, epoch: int | None = None) -> bool:
        """Validate (rank 0; the other ranks wait), log, save last (and best); returns True on
        every rank when early stopping triggers. ``epoch``: the epoch just completed (end-of-
        epoch validation), else the current one."""
        improved_now = stop = False
        patience = self.run.training.patience
        if dist.is_main():
            improved_now = self._validate_and_log(epoch)
            stop = bool(patience) and self.progress.bad_validations >= patience
        self.checkpoints.snapshot(self.progress)   # before last.pt: a kill in between makes
        self.save(*(["best.pt"] if improved_now else []), "last.pt")   # it again; best first
        return dist.broadcast_flag(stop)

    def _validate_and_log(self, epoch: int | None) -> bool:
        """Validate, record and print the result; returns whether it is the best so far."""
        with self._out_of_memory(training=False):
            result = self.validator.validate()
        best = improved(self.progress, self.run.training.early_stop_metric, result)
        record = {"event": "valid", "step": self.progress.step,
                  "epoch": epoch or self.progress.epoch,
                  **{k: round(v, 4) for k, v in result.items()}, "best": best}
        self.progress.history.append(record)
        self.log(record)
        info("  ".join(f"{k}={v}" for k, v in record.items() if k != "event"))
        return best

    def _out_of_memory(self, training: bool):
        """The device running out of memory in the block (an update, or validation; a GPU or
        the CPU) as a one-line error that names the device, the update and what to lower
        (:func:`~depnmt.core.device.out_of_memory_as`)."""
        def message() -> str:
            o, step = self.run.training, self.progress.step
            if training:
                return (f"out of memory on {self.device} in update {step + 1} (--max-tokens "
                        f"{o.max_tokens}, --update-freq {o.update_freq}): halve --max-tokens "
                        f"and double --update-freq to keep the same update size")
            return (f"out of memory on {self.device} while validating after update {step} (dev "
                    f"batches of --max-tokens {o.max_tokens}, --valid-beam {o.valid_beam}): "
                    f"lower --max-tokens (and double --update-freq to keep the same update "
                    f"size) or --valid-beam")
        return out_of_memory_as(message)


def resumed_update_notes(p: Progress, n_batches: int, update_freq: int, world: int,
                         saved: int) -> list[str]:
    """What a resumed run (at ``p``; ``saved``: the processes that saved its ``last.pt``, the
    run's ``world`` when it is not resumed) changes in its updates of ``update_freq`` × ``world``
    batches of an epoch of ``n_batches``: another number of processes (another update size on
    the same learning-rate schedule; a rank the saved run lacked starts a random stream of its
    own), and an epoch resumed at a batch that is no multiple of the update size (the
    processes, or ``--update-freq``, changed): how many batches the rest of it leaves out,
    which the epoch's warning (:func:`left_out_warning`, from batch 0) does not say."""
    size, notes = update_freq * world, []
    if saved != world:
        notes.append(f"resumed with {world} process(es), last.pt was saved by {saved}: an "
                     f"update now takes {size} batches (--update-freq {update_freq} × {world}), "
                     f"not {update_freq * saved}")
    rest = n_batches - p.batches_done
    left = rest % size
    if p.batches_done % size and left:
        notes.append(f"epoch {p.epoch} resumes at batch {p.batches_done} of {n_batches}: its "
                     f"remaining {rest} batches make {rest // size} updates of {size}, and the "
                     f"last {left} {'is' if left == 1 else 'are'} left out of this epoch")
    return notes


def check_same_data(run: TrainingRun) -> None:
    """Under torchrun every process reads ``-i`` (and ``-t``) from its own file system: on
    several machines without a shared one, from copies. Every rank must train on what rank 0
    does: the same training files (``run.digests``, their sha256) and vocabularies, else a
    DepnmtError on every rank naming the first file that differs. (A rank on other pairs of
    the same lengths would take its share of the same batch plan and exit 0.)"""
    paths = {path.name: path for path in run.digests if path.name.startswith("train.")}
    ours = {name: run.digests[path] for name, path in paths.items()}
    for side, vocab in (("src", run.src_vocab), ("tgt", run.tgt_vocab)):
        if vocab is not None:
            name = f"vocab.{side}.txt"
            paths[name] = run.data_dir / name
            ours[name] = hashlib.sha256("\n".join(vocab.itos).encode("utf-8")).hexdigest()
    first, unlike = dist.unlike_rank0(ours)
    if not unlike:
        return
    r, host, theirs = unlike[0]
    name = next(k for k in sorted(set(first) | set(theirs)) if first.get(k) != theirs.get(k))
    raise DepnmtError(f"{paths.get(name, name)}: rank {r} (on {host}) reads other contents "
                      f"than rank 0: every process must train on the same data; give each "
                      f"machine the same -i (and -t) folder, byte for byte")


def check_same_checkpoint(path: Path, progress: Progress) -> None:
    """``--resume`` under torchrun: every rank restored the ``last.pt`` rank 0 did (on several
    machines without a shared file system each reads its own copy), else a DepnmtError on
    every rank saying which is behind. A stale copy would resume at another batch, with
    other optimizer moments and schedule, while DDP gives it rank 0's weights and only rank
    0's files are written: the run would exit 0."""
    def where(p: Progress) -> tuple:
        return p.step, p.epoch, p.batches_done, p.elapsed

    first, unlike = dist.unlike_rank0(where(progress))
    if not unlike:
        return
    r, host, theirs = unlike[0]
    raise DepnmtError(f"{path}: rank {r} (on {host}) holds update {theirs[0]} (epoch "
                      f"{theirs[1]}, batch {theirs[2]}), rank 0 update {first[0]} (epoch "
                      f"{first[1]}, batch {first[2]}): every process must resume from the same "
                      f"checkpoint; copy rank 0's model directory to every machine before "
                      f"--resume (or use a shared file system)")


def building_model(cfg: ModelConfig, device: torch.device):
    """The device running out of memory while the model ``cfg`` is built: a one-line error
    with the sizes that made it so large."""
    return out_of_memory_as(lambda: (
        f"out of memory on {device} building the model (d_model {cfg.d_model}, "
        f"d_ff {cfg.d_ff}, {cfg.encoder_layers}+{cfg.decoder_layers} layers, vocabularies "
        f"{cfg.src_vocab_size:,} and {cfg.tgt_vocab_size:,}): lower --d-model, --d-ff or "
        f"--layers"))
