"""``depnmt average``: average a run's last or best checkpoints (see ``depnmt/average.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .options import deprecated_aliases


@deprecated_aliases("average")
@click.command("average", context_settings={"show_default": True})
@click.option("-m", "--model", "model_dir", metavar="MODEL_DIR",
              type=click.Path(path_type=Path, file_okay=False),
              default=lambda: os.environ.get("DEPNMT_MODEL", "model"),
              help="model directory written by `depnmt train --keep-last N`")
@click.option("--last", type=click.IntRange(min=1), default=None,
              help="average the N newest snapshots (checkpoints/step*.pt)")
@click.option("--best", type=click.IntRange(min=1), default=None,
              help="average the N kept snapshots with the best validation by the run's "
                   "--early-stop-metric")
@click.option("-o", "--output", "name", required=True, metavar="NAME",
              help="write MODEL_DIR/checkpoints/NAME.pt (then `translate --checkpoint NAME`)")
def command(model_dir: Path, last: int | None, best: int | None, name: str) -> None:
    """Average the parameters of several checkpoints of one training run.

    \b
    Training with --keep-last N keeps the model at its last N validations (or --save-every
    points) as checkpoints/step{UPDATE}.pt. This averages the --last N newest of them or the
    --best N (by the run's --early-stop-metric) in fp32, as fairseq's
    scripts/average_checkpoints.py, and writes MODEL_DIR/checkpoints/NAME.pt (a second
    average into the same NAME waits for the first; the model may be training meanwhile),
    which `depnmt translate --checkpoint NAME` then uses.
    """
    from ..average import average
    from ..log import info

    out = average(model_dir, name, last, best)
    info(f"wrote {out}")
