"""``depnmt plot``: training curves of several runs (see depnmt/curves.py); its flags are the
fields of :class:`depnmt.curves.PlotSettings`."""

from __future__ import annotations

import click

from ..curves import PlotSettings
from ..optionspec import field_params, from_options
from .fields import click_options
from .options import deprecated_aliases, usage_errors


@deprecated_aliases("plot")
@click.command("plot", context_settings={"show_default": True})
@click_options(field_params(PlotSettings))
def command(**values) -> None:
    """Plot dev loss and dev BLEU against updates and against training time, one line per run,
    from each model directory's metrics.jsonl.

    Training time is the run's own clock (validation included, summed over resumed runs),
    so runs on a busy machine look slower than they are: compare updates first.
    """
    from ..curves import load_run, write_curves
    from ..log import info
    from ..modeldir import model_reads
    from ..stagedir import check_output_files

    with usage_errors():
        settings = from_options(PlotSettings, values)
    output = settings.output
    check_output_files({"output": output}, model_reads(settings.models))
    runs = [load_run(m, settings.label(i)) for i, m in enumerate(settings.models)]
    write_curves(runs, output)
    info(f"wrote {output} ({len(runs)} run(s))")
