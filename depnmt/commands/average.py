"""``depnmt average``: average a run's last or best checkpoints (see
``depnmt/training/average.py``); its
flags are the fields of :class:`depnmt.training.average.AverageSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.training.average import AverageSettings


@deprecated_aliases("average")
@click.command("average", context_settings={"show_default": True})
@click_options(field_params(AverageSettings))
def command(**values) -> None:
    """Average the parameters of several checkpoints of one training run.

    \b
    Training with --keep-last N keeps the model at its last N validations (or --save-every
    points) as checkpoints/step{UPDATE}.pt. This averages the --last N newest of them or the
    --best N (by the run's --early-stop-metric) in fp32, as fairseq's
    scripts/average_checkpoints.py, and writes MODEL_DIR/checkpoints/NAME.pt (a second
    average into the same NAME waits for the first; the model may be training meanwhile),
    which `depnmt translate --checkpoint NAME` then uses.
    """
    from depnmt.core.log import info
    from depnmt.training.average import average

    settings = from_options(AverageSettings, values)
    out = average(settings.model_dir, settings.name, settings.last, settings.best)
    info(f"wrote {out}")
