"""A training run from its configuration: what ``depnmt train`` and :func:`depnmt.train_model`
both call (:func:`run`). It joins torchrun's processes (if any), holds the model directory's
lock (rank 0, which writes it), sets the run up (:func:`depnmt.trainrun.prepare_run`), trains
(:class:`depnmt.train.Trainer`) until a budget ends it or a signal stops it (``last.pt`` saved,
exit 143/130, no manifest) and writes the manifest."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from . import distributed as dist
from .manifest import write_manifest
from .runconfig import RunConfig
from .train import Trainer
from .trainrun import METRICS, check_not_foreign, prepare_run


def run(config: RunConfig) -> None:
    """Train the run ``config`` describes (:mod:`depnmt.runconfig`)."""
    from .board import TensorBoardLog
    from .device import bound_onednn_cache
    from .stopsignals import StopSignals, Stopped
    check_not_foreign(config.model_dir, config.resume, config.data_dir)   # before any write
    bound_onednn_cache()          # before the first bf16 matrix multiply of this process
    board = TensorBoardLog(config.tensorboard) if config.tensorboard else None   # fails early
    with dist.process_group(config.training.device):
        with lock_if_main(config.model_dir):
            setup = prepare_run(config.data_dir, config.model_dir, config.model, config.training,
                                config.trees_dir, config.resume, config.search, config.settings,
                                config.init_from, config.resume_on_changed_data)
            trainer = Trainer(setup, board)
            try:
                with StopSignals() as signals:
                    trainer.run(signals)
            except Stopped as exc:
                sys.exit(exc.exit_status)
            finally:
                if board is not None:
                    board.close()
            if dist.is_main():
                write_train_manifest(trainer)


def lock_if_main(model_dir: Path):
    """The model directory's lock on rank 0 (the writer), nothing on the other ranks."""
    from .modeldir import lock_for_writing
    return lock_for_writing(model_dir) if dist.is_main() else nullcontext()


def write_train_manifest(trainer: Trainer) -> None:
    from .device import precision_name
    run = trainer.setup
    write_manifest(run.model_dir, "train",
                   inputs={"bpe": str(run.data_dir.resolve()),
                           "trees": str(run.trees_dir.resolve()) if run.trees_dir else None},
                   options=asdict(run.opts), outputs=[METRICS],
                   extra={"progress": {k: v for k, v in asdict(trainer.progress).items()
                                       if k != "history"},
                          "precision": precision_name(trainer.amp)})
