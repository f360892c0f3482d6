"""The training loop: Adam (0.9, 0.98, 1e-9) with inverse-square-root warm-up (Vaswani et al.
2017 §5.3), label smoothing, token-count batches with gradient accumulation, validation (loss and
BLEU), last/best checkpoints, early stopping, a JSONL metrics log and exact resumption.

Resumption restores model, optimizer, scheduler, AMP scaler, RNG states and the data order: the
batch order of an epoch depends only on (seed, epoch), so the checkpoint stores the epoch and how
many batches of it were consumed, and a resumed run continues with the next batch.

Under ``torchrun`` (:mod:`depnmt.distributed`) every rank builds the same batch order and takes
its share of each update (:func:`~depnmt.data.shard_updates`): W processes with ``--update-freq
F`` train exactly like one process with ``--update-freq W·F``. The loss is normalised by the
target tokens of the whole update (summed over the ranks), so the gradients are the same too.
Rank 0 validates, prints and writes every file; stop decisions are rank 0's, broadcast.

On a GPU an update waits for the device once (:meth:`Trainer.train_step`): token counts are
counted on the host when batches are collated (and pinned, in a background thread), loss sums
stay on the device, and one all-reduce carries every rank's counts and sums. In fp16 an update
whose gradients overflowed is skipped by the loss scaler and, as in fairseq, does not count:
neither the learning-rate schedule nor the step count (``--max-steps``, ``--valid-every``)
advance. The GPU running out of memory is a one-line error that says what to lower.

Kills and signals (the guarantees ``tests/cli/test_reliability.py`` and
``bench/kill_resume.py`` check):

* A run never trains past ``--max-steps``: the budget is checked before the first update too,
  and resuming a finished run (a limit reached, or early stopping) trains, saves and logs
  nothing.
* ``metrics.jsonl`` holds each record once after any number of kills and resumes: every
  checkpoint records how many records the log held when it was saved (``log_records``), and
  ``--resume`` rewrites the log (atomically) to that many, plus the ``data_changed`` records
  of a resume on other data (:mod:`depnmt.provenance`); the steps after the checkpoint are
  re-run and logged again. A fresh start clears what a run killed before its first ``last.pt``
  left (log, ``best.pt``). A log line that is not UTF-8 is an error naming it.
* ``best.pt`` is written before ``last.pt``, and ``last.pt`` records the best step: a kill
  between the two leaves ``best.pt`` a step *ahead* of ``last.pt``, and the resumed run
  re-reaches that step and rewrites it; the log and ``last.pt`` always agree (both rewind to the
  checkpoint).
* SIGTERM/SIGINT/SIGHUP: see :mod:`depnmt.stopsignals` (save ``last.pt`` after the update, exit
  143/130/129). The caller holds the model directory's lock
  (:func:`depnmt.modeldir.lock_for_writing`), which also removes leftover temporary files.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import distributed as dist
from .checkpoint import load_checkpoint, save_checkpoint
from .data import (TokenBatcher, add_features, example_lengths, iterate_batches,
                   iterate_updates, pinned, prefetch)
from .loader import WaitClock, default_workers, worker_updates
from .device import (autocast, grad_scaler, out_of_memory, precision_name, precision_note,
                     train_precision)
from .errors import DepnmtError
from .log import info, progress_bar, warn
from .model.transformer import ModelConfig, TransformerNMT, label_smoothed_nll
from .modeldir import checkpoint_dir, load_model_checkpoint, metrics_lines, read_config
from .provenance import EVENT
from .search import SearchConfig
from .stopsignals import StopSignals, Stopped
from .runconfig import TrainOptions
from .textio import append_line, atomic_open
from .trainrun import METRICS, TrainingRun
from .vocab import PAD
from .warmstart import warm_start

if TYPE_CHECKING:
    from .board import TensorBoardLog


@dataclass
class Progress:
    """Where training is; saved in every checkpoint."""

    step: int = 0
    epoch: int = 1
    batches_done: int = 0           # batches of `epoch` already consumed
    elapsed: float = 0.0            # seconds of training so far (over all resumed runs)
    best: float | None = None
    best_metric: str | None = None  # the dev metric ``best`` is of (``dev_bleu``, ``dev_acc``, ...)
    best_step: int | None = None    # the step best.pt holds
    bad_validations: int = 0
    history: list[dict] = field(default_factory=list)
    log_records: int | None = None  # metrics.jsonl records when this was saved (None: older)


def inverse_sqrt(step: int, warmup: int) -> float:
    """LR factor: linear warm-up to 1 at ``warmup``, then ``sqrt(warmup / step)``."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step)) if warmup > 0 else 1.0 / math.sqrt(step)


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


def has_limit(o: TrainOptions) -> bool:
    """Whether anything ends the run by itself: an epoch, update or time limit or early
    stopping."""
    return bool(o.max_epochs or o.max_steps or o.max_minutes or o.patience)


NO_LIMIT_WARNING = ("no limit: no epoch, update or time limit and no early stopping, so "
                    "training runs until it is stopped (Ctrl-C saves last.pt); set --max-epochs, "
                    "--max-steps, --max-minutes or --patience")


class Trainer:
    """Owns the model, optimizer and progress of one training run and runs its loop; the run
    itself (model directory, data, config: ``setup``) is set up by
    :func:`depnmt.trainrun.prepare_run`."""

    def __init__(self, setup: TrainingRun, board: TensorBoardLog | None = None):
        """``board``: where ``--tensorboard`` writes every record (None: nowhere)."""
        self.setup, self.opts, self.board = setup, setup.opts, board
        opts = self.opts
        random.seed(opts.seed)      # before anything random (model initialisation included);
        torch.manual_seed(opts.seed)  # a resumed run then restores the saved RNG states
        self.device = dist.local_device(opts.device)
        self.amp = train_precision(self.device, opts.precision if opts.amp else "fp32")
        self.ckpt_dir = checkpoint_dir(self.setup.model_dir)
        self._log_records = 0
        with self._out_of_memory_building():
            self.model = TransformerNMT(self.setup.model_cfg, self.setup.schemes or None
                                        ).to(self.device)               # alike on every rank
        if setup.init_from is not None and not setup.resume:
            warm_start(self.model, setup.init_from, setup.data_dir)
        if dist.is_main():         # rank 0 validates; training batches get theirs when collated
            add_features(self.setup.dev_data, self.model.schemes.schemes)
        dist.seed_rank(opts.seed)
        self.optimizer = adam(self.model.parameters(), opts.lr, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: inverse_sqrt(s, opts.warmup))
        self.scaler = grad_scaler(self.device, self.amp)
        self.progress = Progress()
        self.batcher = TokenBatcher(setup.train_data.lengths(), opts.max_tokens,
                                    opts.seed, max_sentences=opts.batch_sentences or None)
        self.workers = (opts.workers if opts.workers >= 0 else
                        default_workers(self.device, dist.local_world_size()))
        self.wait = WaitClock()
        if setup.resume:
            self._restore()
        self._loss_scale = self.scaler.get_scale()      # fp16: drops when a step is skipped
        self.net = dist.wrap(self.model, self.device)   # what training runs: DDP or the model

    # -- checkpoints -----------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return rng

    def _set_rng_state(self, rng: dict[str, Any]) -> None:
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        if self.device.type == "cuda" and "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], self.device)

    def _state(self, rngs: list[dict]) -> dict[str, Any]:
        """The checkpoint; ``rngs``: every rank's RNG states (``rng`` is rank 0's, and
        ``rng_ranks`` holds them all when there are several ranks)."""
        return {"model_config": self.setup.model_cfg.to_dict(), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "progress": asdict(self.progress),
                "rng": rngs[0], **({"rng_ranks": rngs} if len(rngs) > 1 else {})}

    def save(self, *names: str) -> None:
        """Write the checkpoint to each of ``names`` in order (default ``last.pt``; give
        ``last.pt`` last) in the checkpoint folder. Every rank must call this (the ranks' RNG
        states are gathered); rank 0 writes."""
        self._check_weights_finite()
        rngs = dist.gather_objects(self._rng_state())
        if dist.is_main():
            self.progress.log_records = self._log_records
            state = self._state(rngs)
            for name in names or ("last.pt",):
                save_checkpoint(self.ckpt_dir / name, state)

    def _restore(self) -> None:
        path = self.ckpt_dir / "last.pt"
        state = load_model_checkpoint(path, self.setup.model_cfg.to_dict())
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise DepnmtError(f"{path}: does not fit this model ({str(exc).splitlines()[0]})") from None
        self.scheduler.load_state_dict(state["scheduler"])
        self._restore_scaler(state["scaler"])
        self.progress = Progress(**state["progress"])
        if dist.is_main():
            if self.finished() is None:     # a finished run's log stays as it is
                self._rewind_log(path)
            self._check_best(path)
        # each rank takes the RNG states its rank saved; a rank the saved run did not have (now
        # more processes) keeps the stream seed_rank gave it
        saved = state.get("rng_ranks") or [state["rng"]]
        if dist.rank() < len(saved):
            self._set_rng_state(saved[dist.rank()])
        info(f"resumed from {path}: step {self.progress.step}, epoch {self.progress.epoch}, "
             f"batch {self.progress.batches_done}")

    def _restore_scaler(self, saved: dict) -> None:
        """The saved loss scale, when both runs scale the loss (fp16). A run saved without
        loss scaling (fp32, bf16: its state is empty) resumed in fp16 starts a fresh scale; a
        run saved in fp16 resumed without scaling drops it."""
        if self.scaler.is_enabled() and not saved:
            info("the checkpoint was saved without fp16 loss scaling: starting a fresh loss "
                 f"scale ({self.scaler.get_scale():g})")
            return
        self.scaler.load_state_dict(saved)      # a disabled scaler ignores it

    def _rewind_log(self, path: Path) -> None:
        """Keep the metrics.jsonl records written before the checkpoint we resume from (those
        after it are logged again when their steps are re-run) and the ``data_changed`` ones
        (they record the data, logged before the run re-reaches any step); rewritten
        atomically. A line that is not UTF-8 is an error naming it."""
        log = self.setup.model_dir / METRICS
        lines = metrics_lines(log) if log.exists() else []
        keep = self.progress.log_records
        if keep is None:                    # a checkpoint of an earlier depnmt: by step
            keep = 0
            for line in lines:
                try:
                    record = json.loads(line)
                    if record.get("step", 0) > self.progress.step or \
                            record.get("event") in ("end", "stopped"):     # logged after it
                        break
                except (ValueError, AttributeError):
                    break
                keep += 1
        kept = lines[:keep] + [line for line in lines[keep:] if _event(line) == EVENT]
        if len(kept) < len(lines):
            with atomic_open(log) as fh:
                fh.writelines(kept)
            dropped = [line for line in lines[keep:] if _event(line) != EVENT]
            if any(_event(line) not in ("end", "stopped") for line in dropped):    # redone
                info(f"{log}: dropped {len(dropped)} record(s) written after {path.name} "
                     f"was saved (step {self.progress.step}); their steps are run again")
        self._log_records = len(kept)

    def _check_best(self, path: Path) -> None:
        """Warn when best.pt is not the checkpoint ``path`` names as best (only a run killed
        by a depnmt that wrote last.pt first can leave that)."""
        best, p = self.ckpt_dir / "best.pt", self.progress
        if p.best_step is None or not best.exists():
            return
        found = load_checkpoint(best)["progress"]["step"]
        if found > p.step:
            info(f"{best}: holds step {found}, after {path.name}'s step {p.step} (killed between "
                 f"the two writes); it is rewritten when the run gets there again")
        elif found != p.best_step:
            warn(f"{best}: holds step {found} but {path.name} names step {p.best_step} as best; "
                 f"it is replaced at the next improvement")

    # -- logging ---------------------------------------------------------------------------
    def log(self, record: dict) -> None:
        """Append ``record`` to metrics.jsonl (rank 0 only)."""
        if not dist.is_main():
            return
        record = {"time": round(self.progress.elapsed, 2), **record}
        append_line(self.setup.model_dir / METRICS, json.dumps(record))
        self._log_records += 1
        if self.board is not None:
            self.board.write(record)

    # -- training --------------------------------------------------------------------------
    def train_step(self, batches: list) -> dict[str, Any]:
        """One optimizer update over this rank's ``update_freq`` batches; the loss is normalised
        per target token of the whole update (every rank's batches), so the gradients are those
        of one process that saw all of them. The returned statistics are over all ranks;
        ``stepped`` is False when fp16 loss scaling found inf/NaN gradients and skipped the
        update (:meth:`_optimizer_step`).

        One host synchronisation per update (in fp16 one more, for the loss scale, right
        after it): the token counts are the host's (the batches counted them when they were
        collated), the loss sums stay on the device until the update is done, and the counts
        and sums of every rank travel in one all-reduce."""
        self.model.train()
        counts = [sum(b.n_tokens for b in batches), sum(b.n_src_tokens for b in batches)]
        norm = self._loss_norm(counts[0])
        # copied to the GPU before this update queues any work (a copy from pageable memory
        # waits until the queue is empty)
        counted = torch.tensor(counts, dtype=torch.float64).to(self.device)
        sums: dict[str, torch.Tensor] = {}
        for i, batch in enumerate(batches):
            with dist.sync_gradients(self.net, now=i == len(batches) - 1):
                for name, value in self._backward(batch.to(self.device), norm).items():
                    sums[name] = sums[name] + value if name in sums else value
        names = list(sums)                      # the same order on every rank
        totals = dist.all_reduce_sum(torch.cat([counted, torch.stack([sums[k] for k in names])]))
        if dist.world_size() > 1:               # DDP averaged Σ_r objective_r / norm
            self._scale_gradients(dist.world_size() * norm / totals[0])
        stepped = self._optimizer_step()
        tokens, src_tokens, *values = totals.tolist()       # the update's one host sync
        if stepped:
            self.scheduler.step()
            self.progress.step += 1
        sums = {k: v / tokens for k, v in zip(names, values)}
        return {"loss": sums.pop("loss"), "nll": sums.pop("nll"), "tokens": int(tokens),
                "src_tokens": int(src_tokens), "aux": sums, "stepped": stepped}

    def _loss_norm(self, tokens: int) -> float:
        """What each rank divides its summed objective by before the backward: in one
        process the update's target tokens (the loss per token); with several, a number every
        rank knows without asking the others (``--max-tokens × --update-freq``), and
        :meth:`_scale_gradients` turns the averaged gradients into per-token ones once the
        ranks' token counts are summed (in the update's one all-reduce)."""
        if dist.world_size() == 1:
            return float(tokens)
        return float(self.opts.max_tokens * self.opts.update_freq)

    def _scale_gradients(self, factor: torch.Tensor) -> None:
        """Multiply every gradient by ``factor`` (a 0-dim tensor on the device: no sync)."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor.to(grads[0].dtype))

    def _backward(self, batch, norm: float) -> dict[str, torch.Tensor]:
        """Forward and backward of one batch, the objective divided by ``norm``; returns the
        batch's summed ``loss``, ``nll`` and auxiliary losses (each its mean × target tokens)
        as 0-dim float64 tensors on the device (read once per update)."""
        with autocast(self.device, self.amp):
            logits, extras = self.net(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
        loss, nll = label_smoothed_nll(logits, batch.tgt_out, self.opts.label_smoothing)
        objective, n = loss, batch.n_tokens
        sums = {"loss": loss.detach().double(), "nll": nll.detach().double()}
        # schemes' auxiliary losses (e.g. DBSA, Deguchi et al. Eq. 18): + λ · mean per token
        for name, aux in extras.losses.items():
            sums[name] = aux.value.detach().double() * n
            if aux.weight:
                objective = objective + aux.weight * aux.value * n
        self.scaler.scale(objective / norm).backward()
        return sums

    def _optimizer_step(self) -> bool:
        """Clip (``--clip-norm``), step and update the AMP scale; False when the fp16 loss
        scaler found inf/NaN gradients and skipped the step (its scale then drops). A skipped
        step does not count, as in fairseq: neither the learning-rate schedule nor
        ``progress.step`` (``--max-steps``, ``--valid-every``) advance, the update's batches
        are consumed."""
        if self.opts.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.opts.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if not self.scaler.is_enabled():
            return True
        scale, self._loss_scale = self._loss_scale, self.scaler.get_scale()   # fp16 only: a
        return self._loss_scale >= scale        # sync after the step (GradScaler.step has one)

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Dev loss/perplexity (teacher forcing) and dev BLEU (greedy unless --valid-beam)."""
        import sacrebleu

        self.model.eval()
        tokens = 0
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)   # nll, right tokens
        counts: dict[str, list[int]] = {}          # schemes' dev metrics, e.g. DBSA's UAS
        batcher = TokenBatcher(example_lengths(self.setup.dev_data), self.opts.max_tokens,
                               shuffle=False)
        for _, batch in iterate_batches(self.setup.dev_data, batcher, 0,
                                        schemes=self.model.schemes.schemes):
            batch = batch.to(self.device)
            with autocast(self.device, self.amp):
                logits, extras = self.model(batch.src, batch.tgt_in, batch.src_feats)
            nll = label_smoothed_nll(logits, batch.tgt_out, 0.0)[1]
            sums += torch.stack([nll.double(), token_matches(logits, batch.tgt_out).double()])
            tokens += batch.n_tokens
            for name, (c, t) in self.model.schemes.validation_counts(extras, batch.src_feats,
                                                                     batch.tgt_feats).items():
                acc = counts.setdefault(name, [0, 0])
                acc[0], acc[1] = acc[0] + c, acc[1] + t
        loss_sum, correct = sums.tolist()          # read once, after the last batch
        result = {"dev_nll": loss_sum / max(tokens, 1)}
        result["dev_ppl"] = math.exp(min(result["dev_nll"], 50))
        result["dev_acc"] = 100.0 * correct / max(tokens, 1)
        result.update({f"dev_{name}": 100.0 * c / t for name, (c, t) in counts.items() if t})
        if self.setup.dev_refs:
            n = self.opts.valid_max_sentences or len(self.setup.dev_data)
            hyps = self.translator.translate_examples(self.setup.dev_data[:n])
            refs = [self.setup.dev_refs[e.index] for e in self.setup.dev_data[:n]]
            result["dev_bleu"] = sacrebleu.corpus_bleu(hyps, [refs]).score
        return result

    @property
    def translator(self):
        """Decodes dev examples to detokenized text exactly as ``translate`` would."""
        if getattr(self, "_translator", None) is None:
            from .translate import Translator
            search = SearchConfig(**{**asdict(self.setup.search), "beam": self.opts.valid_beam})
            run = self.setup
            self._translator = Translator(self.model, read_config(run.model_dir), run.src_vocab,
                                          run.tgt_vocab, None, self.device, search,
                                          amp=self.amp)
        return self._translator

    def _improved(self, result: dict) -> bool:
        """Whether ``result`` is the best validation so far by ``--early-stop-metric`` (dev
        BLEU, dev token accuracy or dev loss; BLEU falls back to the loss without dev
        references). Counts the validations without improvement for ``--patience``."""
        metric, sign = selection_metric(self.opts.early_stop_metric, result)
        p = self.progress
        if p.best_metric != metric:      # e.g. --resume with another --early-stop-metric
            seen = [sign * r[metric] for r in p.history if metric in r]
            p.best, p.best_metric = (max(seen) if seen else None), metric
        value = sign * result[metric]
        if p.best is None or value > p.best:
            p.best, p.best_step = value, p.step
            p.bad_validations = 0
            return True
        p.bad_validations += 1
        return False

    def _validate_and_save(self, epoch: int | None = None) -> bool:
        """Validate (rank 0; the other ranks wait), log, save last (and best); returns True on
        every rank when early stopping triggers. ``epoch``: the epoch just completed (end-of-
        epoch validation), else the current one."""
        improved = stop = False
        if dist.is_main():
            improved = self._validate_and_log(epoch)
            stop = bool(self.opts.patience) and \
                self.progress.bad_validations >= self.opts.patience
        self._snapshot()            # before last.pt: a kill in between makes it again on resume
        self.save(*(["best.pt"] if improved else []), "last.pt")   # best first: see above
        return dist.broadcast_flag(stop)

    def _snapshot(self) -> None:
        """``--keep-last N``: write the model as ``step{STEP}.pt`` (model and progress only, for
        ``depnmt average``) and delete the older snapshots beyond the last N (rank 0). Each
        file is written atomically and deleted on its own, so a run killed in between leaves
        at most one snapshot too many, removed at the next save."""
        if not self.opts.keep_last or not dist.is_main():
            return
        save_checkpoint(self.ckpt_dir / f"step{self.progress.step}.pt",
                        {"model_config": self.setup.model_cfg.to_dict(),
                         "model": self.model.state_dict(), "progress": asdict(self.progress)})
        for old in snapshots(self.ckpt_dir)[:-self.opts.keep_last]:
            old.unlink(missing_ok=True)

    def _validate_and_log(self, epoch: int | None) -> bool:
        """Validate, record and print the result; returns whether it is the best so far."""
        with self._out_of_memory(training=False):
            result = self.validate()
        improved = self._improved(result)
        record = {"event": "valid", "step": self.progress.step,
                  "epoch": epoch or self.progress.epoch,
                  **{k: round(v, 4) for k, v in result.items()}, "best": improved}
        self.progress.history.append(record)
        self.log(record)
        info("  ".join(f"{k}={v}" for k, v in record.items() if k != "event"))
        return improved

    @contextmanager
    def _out_of_memory_building(self) -> Iterator[None]:
        """The device running out of memory while the model is built: a one-line error with
        the sizes that made it so large."""
        try:
            yield
        except (RuntimeError, MemoryError) as exc:
            if not out_of_memory(exc):
                raise
            c = self.setup.model_cfg
            raise DepnmtError(
                f"out of memory on {self.device} building the model (d_model {c.d_model}, "
                f"d_ff {c.d_ff}, {c.encoder_layers}+{c.decoder_layers} layers, vocabularies "
                f"{c.src_vocab_size:,} and {c.tgt_vocab_size:,}): lower --d-model, --d-ff or "
                f"--layers") from None

    @contextmanager
    def _out_of_memory(self, training: bool) -> Iterator[None]:
        """Turn the device running out of memory in the block (an update, or validation; a GPU
        or the CPU: :func:`~depnmt.device.out_of_memory`) into a one-line error that names the
        device, the update and what to lower."""
        try:
            yield
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            if not out_of_memory(exc):
                raise
            o, step = self.opts, self.progress.step
            if training:
                raise DepnmtError(
                    f"out of memory on {self.device} in update {step + 1} (--max-tokens "
                    f"{o.max_tokens}, --update-freq {o.update_freq}): halve --max-tokens and "
                    f"double --update-freq to keep the same update size") from None
            raise DepnmtError(
                f"out of memory on {self.device} while validating after update {step} (dev "
                f"batches of --max-tokens {o.max_tokens}, --valid-beam {o.valid_beam}): lower "
                f"--max-tokens (and double --update-freq to keep the same update size) or "
                f"--valid-beam") from None

    def _budget_left(self, started: float, base: float) -> bool:
        """Update the elapsed time; False once ``--max-steps`` or ``--max-minutes`` is spent (rank
        0's clock decides for every rank)."""
        o, p = self.opts, self.progress
        p.elapsed = base + time.monotonic() - started
        if o.max_steps and p.step >= o.max_steps:
            return False
        if o.max_minutes and p.elapsed >= o.max_minutes * 60:
            return False
        return True

    def finished(self) -> str | None:
        """What ended the run already (``--max-steps 10``, ...: a finished run resumed with the
        same limits), or None when it has updates left to train."""
        o, p = self.opts, self.progress
        if o.max_steps and p.step >= o.max_steps:
            return f"--max-steps {o.max_steps}"
        if o.max_epochs and p.epoch > o.max_epochs:
            return f"--max-epochs {o.max_epochs}"
        if o.max_minutes and p.elapsed >= o.max_minutes * 60:
            return f"--max-minutes {o.max_minutes:g}"
        if o.patience and p.bad_validations >= o.patience:
            return f"--patience {o.patience}"
        return None

    def run(self, signals: StopSignals) -> Progress:
        """Train until a budget (epochs, steps, minutes) or early stopping ends the run; after
        each update, stop (:class:`Stopped`) when ``signals`` received SIGTERM/SIGINT/SIGHUP.
        A finished run resumed trains, saves and logs nothing."""
        o, p = self.opts, self.progress
        done = self.finished() if self.setup.resume else None
        if done is not None:
            info(f"{self.setup.model_dir}: the run finished at update {p.step} ({done}); "
                 f"nothing to train (give a larger {done.split()[0]} to continue it)")
            return p
        started, base = time.monotonic(), p.elapsed
        self._announce()
        window = {"tokens": 0, "src_tokens": 0, "loss": 0.0, "t": time.monotonic()}
        stop = not self._keep_going(started, base)     # e.g. a finished run resumed
        with progress_bar() as bar:
            task = bar.add_task(f"epoch {p.epoch}", total=o.max_steps or None, completed=p.step)
            while not stop and (not o.max_epochs or p.epoch <= o.max_epochs):
                for done, batches in self._updates():
                    with self._out_of_memory(training=True):
                        stats = self.train_step(batches)
                    p.batches_done = done
                    stepped = stats["stepped"]      # else: nothing of this update counts
                    if stepped:
                        self._check_finite(stats["loss"])
                    if stepped:
                        add_to_window(window, stats)
                        bar.update(task, completed=p.step, description=f"epoch {p.epoch} "
                                   f"loss {stats['loss']:.3f}")
                        if p.step % o.log_every == 0:
                            self._log_window(window)
                    else:
                        info(f"update {p.step + 1}: inf/NaN gradients in fp16, skipped (loss "
                             f"scale now {self._loss_scale:g})")
                    budget = self._keep_going(started, base)
                    if stepped and o.valid_every and p.step % o.valid_every == 0 or not budget:
                        stop = self._validate_and_save() or not budget
                    elif stepped and o.save_every and p.step % o.save_every == 0:
                        self._snapshot()
                        self.save("last.pt")
                    if stop:
                        break
                    self._stop_if_signalled(signals, started, base)
                if stop:
                    break
                p.epoch, p.batches_done = p.epoch + 1, 0   # saved progress = next epoch's start
                if not o.valid_every:
                    stop = self._validate_and_save(epoch=p.epoch - 1)
                budget = self._keep_going(started, base)
                stop = stop or not budget
                if not stop:
                    self._stop_if_signalled(signals, started, base)
        self._budget_left(started, base)
        self.save("last.pt")
        self.log({"event": "end", "step": p.step, "epoch": p.epoch, "elapsed": round(p.elapsed, 1)})
        return p

    def _check_weights_finite(self) -> None:
        """Refuse to save weights that are not numbers (every rank holds the same weights, so
        every rank stops): a :class:`DepnmtError`, the checkpoints keep the last saved ones."""
        params = [p.detach() for p in self.model.parameters()]
        if not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
            raise DepnmtError(
                f"update {self.progress.step}: the weights are not finite (inf or NaN), so they "
                f"are not saved; the checkpoints keep the last saved ones. Lower --lr (or set "
                f"--clip-norm), then --resume or start again")

    def _check_finite(self, loss: float) -> None:
        """A :class:`DepnmtError` when an update's loss is not finite: the weights it stepped
        to are not numbers, so nothing more is saved (``last.pt`` and ``best.pt`` keep the last
        validated weights) and the run stops."""
        if not math.isfinite(loss):
            raise DepnmtError(
                f"update {self.progress.step}: the training loss is {loss} (not finite), so the "
                f"weights are no longer numbers; the checkpoints keep the last saved ones. Lower "
                f"--lr (or set --clip-norm), then --resume or start again")

    def _announce(self) -> None:
        """Print and log the start; an error when an epoch is shorter than one update."""
        o, world = self.opts, dist.world_size()
        n_batches = len(self.batcher.batches(1))
        if n_batches < o.update_freq * world:
            raise DepnmtError(f"an epoch has {n_batches} batches of --max-tokens {o.max_tokens}, "
                              f"fewer than one update takes ({world} process(es) × --update-freq "
                              f"{o.update_freq}): lower --max-tokens or --update-freq")
        n_params = sum(t.numel() for t in self.model.parameters())
        where = f"{self.device}" + (f" × {world} processes" if world > 1 else "")
        info(f"training {'+'.join(self.setup.model_cfg.scheme_names)} on {where} in "
             f"{precision_name(self.amp)} ({n_params:,} parameters, {len(self.setup.train_data):,} "
             f"pairs, {n_batches} batches/epoch)")
        if note := precision_note(self.device, o.precision if o.amp else "fp32"):
            info(note)
        info(model_summary(self.setup.model_cfg, n_params))
        info(budget_summary(o, bool(self.setup.dev_refs)))
        if not has_limit(o):
            warn(NO_LIMIT_WARNING)
        self.log({"event": "start", "step": self.progress.step, "parameters": n_params,
                  "device": str(self.device), "processes": world,
                  "precision": precision_name(self.amp)})

    def _updates(self):
        """This rank's batches of each remaining update of the current epoch: collated (pairs
        read from the cache, tree features computed) by ``--workers`` processes, or here (on
        CUDA in a background thread), and pinned for a GPU; the time the loop waits for them
        is measured (:class:`~depnmt.loader.WaitClock`)."""
        p, cuda = self.progress, self.device.type == "cuda"
        where = dict(start=p.batches_done, rank=dist.rank(), world=dist.world_size(),
                     schemes=self.model.schemes.schemes)
        if self.workers:
            updates = worker_updates(self.setup.train_data, self.batcher, p.epoch,
                                     self.opts.update_freq, self.workers, pin=cuda, **where)
        else:
            updates = iterate_updates(self.setup.train_data, self.batcher, p.epoch,
                                      self.opts.update_freq, **where)
            updates = prefetch(pinned(updates)) if cuda else updates
        return self.wait.timed(updates)

    def _stop_if_signalled(self, signals: StopSignals, started: float, base: float) -> None:
        """After an update (and its validation): when any rank received SIGTERM/SIGINT/SIGHUP, save
        last.pt, say so and raise :class:`Stopped` on every rank."""
        signum = dist.max_over_ranks(signals.received)
        if not signum:
            return
        self._budget_left(started, base)
        self.save("last.pt")
        stopped = Stopped(signum)
        self.log({"event": "stopped", "step": self.progress.step, "signal": stopped.name})
        info(f"{stopped} after update {self.progress.step}: saved {self.ckpt_dir / 'last.pt'}; "
             f"continue with `depnmt train -i {self.setup.data_dir} -o {self.setup.model_dir} "
             f"--resume`")
        dist.barrier()      # no rank exits (and makes torchrun kill the others) before the save
        raise stopped

    def _keep_going(self, started: float, base: float) -> bool:
        """:meth:`_budget_left` as rank 0 sees it, on every rank (so that all stop together)."""
        return dist.broadcast_flag(self._budget_left(started, base))

    def _log_window(self, window: dict) -> None:
        """Log the window's mean losses and (global) throughput, then start a new window."""
        dt = max(time.monotonic() - window["t"], 1e-9)
        record = {"event": "train", "step": self.progress.step, "epoch": self.progress.epoch,
                  "loss": round(window["loss"] / max(window["tokens"], 1), 4),
                  "lr": self.scheduler.get_last_lr()[0],
                  "tgt_tokens_per_s": round(window["tokens"] / dt, 1),
                  "src_tokens_per_s": round(window["src_tokens"] / dt, 1)}
        waited = self.wait.take()
        record["batch_wait_s"] = round(waited, 4)       # the loop waiting for its next batches
        record["batch_wait_share"] = round(waited / dt, 4)
        load = load_average()
        if load is not None:
            record["load"] = load        # what else ran: tokens/s of separate runs need it
        record.update({k: round(v / max(window["tokens"], 1), 4)
                       for k, v in window.get("aux", {}).items()})
        self.log(record)
        window.update(tokens=0, src_tokens=0, loss=0.0, aux={}, t=time.monotonic())


def adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam (0.9, 0.98, 1e-9) as fast as ``device`` runs it (:func:`adam_kernel`)."""
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, **adam_kernel(device))


def adam_kernel(device: torch.device) -> dict[str, bool]:
    """On CUDA the fused Adam (one kernel for every parameter; it also takes the fp16 loss
    scaler's inf check without a host sync) where this torch has it, else the foreach one;
    on the CPU torch's default (the numbers the CPU runs have always had)."""
    if device.type != "cuda":
        return {}
    fused = "fused" in inspect.signature(torch.optim.Adam).parameters
    return {"fused": True} if fused else {"foreach": True}


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes, this one included), rounded;
    None where the OS has none (Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def token_matches(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Non-PAD target tokens whose argmax prediction is right (dev token accuracy, the metric
    Omote et al. 2019 select models by), a 0-dim int64 tensor on the logits' device.
    ``logits [B, T, V]``, ``target [B, T]``."""
    keep = target != PAD
    return ((logits.argmax(dim=-1) == target) & keep).sum()


def selection_metric(name: str, result: dict) -> tuple[str, int]:
    """The validation key ``--early-stop-metric NAME`` selects by and its sign (+1: higher is
    better): ``bleu`` -> dev_bleu (dev_nll without dev references), ``acc`` -> dev_acc,
    ``loss`` -> dev_nll."""
    if name == "bleu" and "dev_bleu" in result:
        return "dev_bleu", 1
    if name == "acc":
        return "dev_acc", 1
    return "dev_nll", -1


def snapshots(ckpt_dir: Path) -> list[Path]:
    """The ``step{N}.pt`` snapshots of ``--keep-last`` in a checkpoint folder, oldest first."""
    found = [(int(p.stem[4:]), p) for p in ckpt_dir.glob("step*.pt") if p.stem[4:].isdigit()]
    return [p for _, p in sorted(found)]


def _event(line: str) -> str | None:
    """The ``event`` of a metrics.jsonl line (None when it is not a JSON object)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("event") if isinstance(record, dict) else None


def add_to_window(window: dict, stats: dict) -> None:
    """Add one update's :meth:`Trainer.train_step` statistics to the logging window."""
    for k in ("tokens", "src_tokens"):
        window[k] += stats[k]
    window["loss"] += stats["loss"] * stats["tokens"]
    aux = window.setdefault("aux", {})      # schemes' auxiliary losses
    for k, v in stats["aux"].items():
        aux[k] = aux.get(k, 0.0) + v * stats["tokens"]
