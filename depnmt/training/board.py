"""TensorBoard scalars of a training run (``depnmt train --tensorboard DIR``).

Every record the trainer appends to ``metrics.jsonl`` (:meth:`depnmt.training.loop.Trainer.log`) is
also written to ``DIR`` at its update ``step``, with the record's own names:

* ``train`` records as ``train/loss``, ``train/lr``, ``train/tgt_tokens_per_s``,
  ``train/src_tokens_per_s`` and the schemes' auxiliary losses (e.g. ``train/dbsa_enc``);
* ``valid`` records: every ``dev_*`` metric as ``dev/*`` — ``dev/nll`` (the dev loss),
  ``dev/ppl``, ``dev/bleu`` and schemes' metrics such as ``dev/uas_enc``.

Other records (``start``, ``end``) and fields that are not numbers are not written. TensorBoard
is an optional extra: ``pip install 'depnmt[tensorboard]'``; view with ``tensorboard --logdir DIR``.

``DIR`` is made and checked when the log is set up (:class:`TensorBoardLog`, before the data is
read or a model built): a path that is a file, a folder that cannot be made or written in is
one error then, not after the training done up to the first record.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from depnmt.core.errors import DepnmtError, reason
from depnmt.core.textio import make_dir

TRAIN_SKIP = {"event", "step", "epoch", "time"}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def scalars(record: dict) -> dict[str, float]:
    """The TensorBoard tags and values of one ``metrics.jsonl`` record (see the module doc)."""
    event = record.get("event")
    if event == "train":
        return {f"train/{k}": v for k, v in record.items()
                if k not in TRAIN_SKIP and _is_number(v)}
    if event == "valid":
        return {f"dev/{k[4:]}": v for k, v in record.items()
                if k.startswith("dev_") and _is_number(v)}
    return {}


def check_log_dir(log_dir: Path) -> None:
    """Make the folder ``log_dir`` (and its parents) and check that a file can be written in
    it (a probe file, removed at once); a :class:`DepnmtError` naming it otherwise."""
    if log_dir.exists() and not log_dir.is_dir():
        raise DepnmtError(f"--tensorboard {log_dir}: is a file; give a folder (TensorBoard "
                          f"writes its event files into one)")
    make_dir(log_dir)
    try:
        fd, probe = tempfile.mkstemp(prefix=".depnmt-probe-", dir=log_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DepnmtError(f"--tensorboard {log_dir}: cannot write in it: {reason(exc)}") from None


class TensorBoardLog:
    """Writes records as scalars to an event file in ``log_dir`` (the file is created on the
    first record, so only the process that logs — rank 0 — writes one; the folder is made and
    checked here: :func:`check_log_dir`)."""

    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise DepnmtError("--tensorboard needs the tensorboard package: pip install "
                              "'depnmt[tensorboard]' (or pip install tensorboard)") from None
        check_log_dir(Path(log_dir))
        self._make = lambda: SummaryWriter(log_dir=str(log_dir))
        self.writer = None

    def write(self, record: dict) -> None:
        """Add the record's scalars at its ``step`` and flush (records are minutes apart)."""
        values = scalars(record)
        if not values:
            return
        if self.writer is None:
            self.writer = self._make()
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=record["step"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
