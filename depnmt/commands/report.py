"""``depnmt report``: the results table of several trained systems (see ``depnmt/report.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..score import DEFAULT_SAMPLES, DEFAULT_SEED, TOKENIZERS
from .options import SEED


@click.command("report", context_settings={"show_default": True})
@click.option("-r", "--ref", "refs", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False), help="reference file (repeatable)")
@click.option("-s", "--system", "systems", multiple=True, required=True, nargs=3,
              type=(str, click.Path(exists=True, file_okay=False, path_type=Path),
                    click.Path(exists=True, dir_okay=False, path_type=Path)),
              metavar="NAME MODEL_DIR HYP", help="a system: its name, model directory and test "
              "hypotheses (repeat for each system)")
@click.option("-b", "--baseline", "baselines", multiple=True,
              help="system NAME to test the others against with paired bootstrap (repeatable; "
                   "default: the first system); tokens/s ratios are to the first baseline")
@click.option("-t", "--tokenize", type=click.Choice(TOKENIZERS), default=None,
              help="BLEU tokenizer [default: sacrebleu's default for --lang, else 13a]")
@click.option("-l", "--lang", default=None, metavar="LANG", help="target language")
@click.option("--bootstrap", "n_samples", type=click.IntRange(min=0), default=DEFAULT_SAMPLES,
              help="paired bootstrap resamples (0 disables the p-values)")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, help="bootstrap random seed")
@click.option("-o", "--out", "prefix", type=click.Path(path_type=Path), default=None,
              help="also write OUT.md, OUT.json and OUT.png (BLEU and chrF bars)")
def command(refs: tuple[str, ...], systems: tuple[tuple[str, Path, Path], ...],
            baselines: tuple[str, ...], tokenize: str | None, lang: str | None, n_samples: int,
            seed: int, prefix: Path | None) -> None:
    """Results table of trained systems: scheme, parameters, updates, training time, target
    tokens/s (and its ratio to the baseline), BLEU, chrF and paired-bootstrap p-values against
    each baseline (Koehn 2004; the share of resamples that contradict the observed difference).

    \b
    Example (the comparison of the Multi30k recipe):
      depnmt report --ref work/prepare/test.raw.de -b abs -b rel -o work/results \\
        -s abs work/m-abs work/abs.de -s rel work/m-rel work/rel.de -s dep work/m-dep work/dep.de
    """
    from ..log import info
    from ..report import System, markdown, plot, results
    from ..textio import atomic_open, read_lines, write_stdout

    ref_lines = [read_lines(path) for path in refs]
    chosen = list(baselines) or [systems[0][0]]
    records = results([System(*s) for s in systems], ref_lines, refs, chosen, tokenize, lang,
                      n_samples, seed)
    table = markdown(records, chosen)
    write_stdout(table)
    if prefix is not None:
        with atomic_open(prefix.with_name(prefix.name + ".md")) as fh:
            fh.write(table)
        with atomic_open(prefix.with_name(prefix.name + ".json")) as fh:
            json.dump(records, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        plot(records, prefix.with_name(prefix.name + ".png"))
        info(f"wrote {prefix}.md, {prefix}.json and {prefix}.png")
