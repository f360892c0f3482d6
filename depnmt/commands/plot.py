"""``depnmt plot``: training curves of several runs (see depnmt/evaluation/curves.py); its flags are
the
fields of :class:`depnmt.evaluation.curves.PlotSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases, usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.curves import PlotSettings


@deprecated_aliases("plot")
@click.command("plot", context_settings={"show_default": True})
@click_options(field_params(PlotSettings))
def command(**values) -> None:
    """Plot dev loss and dev BLEU against updates and against training time, one line per run,
    from each model directory's metrics.jsonl.

    Training time is the run's own clock (validation included, summed over resumed runs),
    so runs on a busy machine look slower than they are: compare updates first.
    """
    from depnmt.core.log import info
    from depnmt.core.stagedir import check_output_files
    from depnmt.evaluation.curves import load_run, write_curves
    from depnmt.storage.modeldir import model_reads

    with usage_errors():
        settings = from_options(PlotSettings, values)
    output = settings.output
    check_output_files({"output": output}, model_reads(settings.models))
    runs = [load_run(m, settings.label(i)) for i, m in enumerate(settings.models)]
    write_curves(runs, output)
    info(f"wrote {output} ({len(runs)} run(s))")
