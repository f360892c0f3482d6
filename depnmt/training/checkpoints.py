"""A training run's checkpoints: where training is (:class:`Progress`), ``last.pt`` and
``best.pt`` (model, optimizer, schedule, loss scale, progress and every rank's RNG states:
exact resumption), the ``step{N}.pt`` snapshots of ``--keep-last`` (for ``depnmt average``),
and restoring them on ``--resume``. The files themselves are written atomically and verified
on load (:mod:`depnmt.storage.checkpoint`).

``best.pt`` is written before ``last.pt``, and ``last.pt`` records the best step: a kill
between the two leaves ``best.pt`` a step *ahead* of ``last.pt``, and the resumed run
re-reaches that step and rewrites it (:meth:`Checkpoints.check_best` says so)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, warn
from depnmt.storage.checkpoint import load_checkpoint, save_checkpoint
from depnmt.storage.modeldir import (CHECKPOINT_FILES, checkpoint_dir, load_model_checkpoint,
                                     subword_digests)
from depnmt.training import distributed as dist

if TYPE_CHECKING:
    from depnmt.model.transformer import TransformerNMT
    from depnmt.training.config import TrainingRun
    from depnmt.training.step import Updater


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


class Checkpoints:
    """The checkpoint folder of ``run``: saves and restores ``model`` and the ``updater``'s
    optimizer, schedule and loss scale with the progress and RNG states."""

    def __init__(self, run: TrainingRun, model: TransformerNMT, updater: Updater):
        self.run, self.model, self.updater = run, model, updater
        self.folder = checkpoint_dir(run.model_dir)
        self._files: dict[str, str] | None = None
        self.saved_processes = 1        # the processes that saved the restored last.pt

    @property
    def files(self) -> dict[str, str]:
        """The sha256 of the model folder's vocabularies and codes, which every checkpoint
        records (read once, when first needed: the run's set-up wrote them)."""
        if self._files is None:
            self._files = subword_digests(self.run.model_dir)
        return self._files

    def save(self, progress: Progress, *names: str) -> None:
        """Write the checkpoint to each of ``names`` in order (default ``last.pt``; give
        ``last.pt`` last). Every rank must call this (the ranks' RNG states are gathered); rank
        0 writes. ``progress.log_records``: set by the caller."""
        self.check_weights_finite(progress.step)
        rngs = dist.gather_objects(rng_state(self.updater.device))
        if dist.is_main():
            state = self.state(progress, rngs)
            for name in names or ("last.pt",):
                save_checkpoint(self.folder / name, state)

    def state(self, progress: Progress, rngs: list[dict]) -> dict[str, Any]:
        """The checkpoint; ``rngs``: every rank's RNG states (``rng`` is rank 0's, and
        ``rng_ranks`` holds them all when there are several ranks)."""
        u = self.updater
        return {"model_config": self.run.model.to_dict(), "model": self.model.state_dict(),
                CHECKPOINT_FILES: self.files, "optimizer": u.optimizer.state_dict(), "scheduler": u.scheduler.state_dict(),
                "scaler": u.scaler.state_dict(), "progress": asdict(progress),
                "rng": rngs[0], **({"rng_ranks": rngs} if len(rngs) > 1 else {})}

    def snapshot(self, progress: Progress) -> None:
        """``--keep-last N``: write the model as ``step{STEP}.pt`` (model and progress only, for
        ``depnmt average``) and delete the older snapshots beyond the last N (rank 0). Each
        file is written atomically and deleted on its own, so a run killed in between leaves
        at most one snapshot too many, removed at the next save."""
        keep = self.run.training.keep_last
        if not keep or not dist.is_main():
            return
        save_checkpoint(self.folder / f"step{progress.step}.pt",
                        {"model_config": self.run.model.to_dict(),
                         "model": self.model.state_dict(), CHECKPOINT_FILES: self.files,
                         "progress": asdict(progress)})
        for old in snapshots(self.folder)[:-keep]:
            old.unlink(missing_ok=True)

    def restore(self) -> tuple[Path, Progress]:
        """Load ``last.pt`` into the model, optimizer, schedule and loss scale, and this rank's
        RNG states (a rank the saved run did not have, now more processes, keeps the stream
        :func:`~depnmt.training.distributed.seed_rank` gave it); returns its path and progress."""
        path = self.folder / "last.pt"
        state = load_model_checkpoint(path, self.run.model.to_dict(), self.files)
        u = self.updater
        try:
            self.model.load_state_dict(state["model"])
            u.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise DepnmtError(f"{path}: does not fit this model "
                              f"({str(exc).splitlines()[0]})") from None
        u.restore_schedule(state["scheduler"])
        u.restore_scaler(state["scaler"])
        saved = state.get("rng_ranks") or [state["rng"]]
        self.saved_processes = len(saved)
        if dist.rank() < len(saved):
            set_rng_state(saved[dist.rank()], u.device)
        return path, Progress(**state["progress"])

    def check_best(self, progress: Progress, path: Path) -> None:
        """Warn when best.pt is not the checkpoint ``path`` names as best (only a run killed
        by a depnmt that wrote last.pt first can leave that)."""
        best, p = self.folder / "best.pt", progress
        if p.best_step is None or not best.exists():
            return
        found = load_checkpoint(best)["progress"]["step"]
        if found > p.step:
            info(f"{best}: holds step {found}, after {path.name}'s step {p.step} (killed between "
                 f"the two writes); it is rewritten when the run gets there again")
        elif found != p.best_step:
            warn(f"{best}: holds step {found} but {path.name} names step {p.best_step} as best; "
                 f"it is replaced at the next improvement")

    def check_weights_finite(self, step: int) -> None:
        """Refuse to save weights that are not numbers (every rank holds the same weights, so
        every rank stops): a :class:`DepnmtError`, the checkpoints keep the last saved ones."""
        params = [p.detach() for p in self.model.parameters()]
        if not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
            raise DepnmtError(
                f"update {step}: the weights are not finite (inf or NaN), so they "
                f"are not saved; the checkpoints keep the last saved ones. Lower --lr (or set "
                f"--clip-norm), then --resume or start again")


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's RNG states: Python's, torch's and (on CUDA) the device's."""
    rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def set_rng_state(rng: dict[str, Any], device: torch.device) -> None:
    """Restore :func:`rng_state`'s states."""
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"], device)


def snapshots(ckpt_dir: Path) -> list[Path]:
    """The ``step{N}.pt`` snapshots of ``--keep-last`` in a checkpoint folder, oldest first."""
    found = [(int(p.stem[4:]), p) for p in ckpt_dir.glob("step*.pt") if p.stem[4:].isdigit()]
    return [p for _, p in sorted(found)]
