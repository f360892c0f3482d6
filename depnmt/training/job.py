"""A training run from its configuration to its manifest: what ``depnmt train`` and
:func:`depnmt.train_model` both call (:func:`train`). It joins torchrun's processes (if any),
holds the model directory's lock (rank 0, which writes it), sets the run up
(:func:`depnmt.training.setup.prepare_run`), trains (:class:`depnmt.training.loop.Trainer`) until a
budget ends it or a signal stops it (``last.pt`` saved, exit 143/130, no manifest) and writes
the manifest."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from depnmt.core.manifest import write_manifest
from depnmt.training import distributed as dist
from depnmt.training.config import TrainingRun
from depnmt.training.loop import Trainer
from depnmt.training.metricslog import METRICS
from depnmt.training.setup import check_not_foreign, prepare_run


def train(run: TrainingRun) -> None:
    """Train the run ``run`` describes (:mod:`depnmt.training.config`)."""
    from depnmt.core.device import bound_onednn_cache
    from depnmt.core.stopsignals import Stopped, StopSignals
    from depnmt.training.board import TensorBoardLog
    check_not_foreign(run.model_dir, run.resume, run.data_dir)   # before any write
    bound_onednn_cache()          # before the first bf16 matrix multiply of this process
    board = TensorBoardLog(run.tensorboard) if run.tensorboard else None   # fails early
    with dist.process_group(run.training.device):
        with lock_if_main(run.model_dir):
            trainer = Trainer(prepare_run(run), board)
            try:
                with StopSignals() as signals:
                    trainer.train(signals)
            except Stopped as exc:
                sys.exit(exc.exit_status)
            finally:
                if board is not None:
                    board.close()
            if dist.is_main():
                write_train_manifest(trainer)


def lock_if_main(model_dir: Path):
    """The model directory's lock on rank 0 (the writer), nothing on the other ranks."""
    from depnmt.storage.modeldir import lock_for_writing
    return lock_for_writing(model_dir) if dist.is_main() else nullcontext()


def write_train_manifest(trainer: Trainer) -> None:
    """The model directory's ``manifest.json``: the inputs, the run's training options, the
    progress reached and the precision it trained in."""
    from depnmt.core.device import machine_record, precision_name
    run = trainer.run
    write_manifest(run.model_dir, "train",
                   inputs={"bpe": str(run.data_dir.resolve()),
                           "trees": str(run.trees_dir.resolve()) if run.trees_dir else None},
                   options=asdict(run.training), outputs=[METRICS],
                   extra={"progress": {k: v for k, v in asdict(trainer.progress).items()
                                       if k != "history"},
                          "precision": precision_name(trainer.amp),
                          "machine": machine_record(trainer.device)})
