"""``depnmt plot``: training curves of several runs (see depnmt/curves.py)."""

from __future__ import annotations

from pathlib import Path

import click

from .options import deprecated_aliases


@deprecated_aliases("plot")
@click.command("plot", context_settings={"show_default": True})
@click.option("-m", "--model", "models", multiple=True, required=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="model directory of `depnmt train` (repeatable: one curve per run)")
@click.option("--label", "labels", multiple=True,
              help="legend label of each --model in order  [default: the model folder's name]")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the PNG to write")
def command(models: tuple[Path, ...], labels: tuple[str, ...], output: Path) -> None:
    """Plot dev loss and dev BLEU against updates and against training time, one line per run,
    from each model directory's metrics.jsonl.

    Training time is the run's own clock (validation included, summed over resumed runs),
    so runs on a busy machine look slower than they are: compare updates first.
    """
    from ..curves import load_run, write_curves
    from ..log import info
    from ..modeldir import model_reads
    from ..stagedir import check_output_files

    if labels and len(labels) != len(models):
        raise click.UsageError(f"{len(labels)} --label for {len(models)} --model; give one "
                               f"per model or none")
    check_output_files({"output": output}, model_reads(models))
    runs = [load_run(m, labels[i] if labels else None) for i, m in enumerate(models)]
    write_curves(runs, output)
    info(f"wrote {output} ({len(runs)} run(s))")
