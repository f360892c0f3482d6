"""``depnmt report``: the results table of several trained systems (see ``depnmt/report.py``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from ..score import DEFAULT_SAMPLES, DEFAULT_SEED, TOKENIZERS
from ..significance import DEFAULT_SHUFFLES
from .options import SEED, deprecated_aliases


class Delta(click.ParamType):
    """``MEASURE=VALUE``: a difference of one of the report's measures (``bleu``, ``chrf``,
    ``nll``: test NLL per word) to plan the runs for, as ``(measure, value)``."""

    name = "MEASURE=VALUE"

    def convert(self, value, param, ctx):
        from ..report import MEASURES
        if isinstance(value, tuple):
            return value
        measure, sep, number = str(value).partition("=")
        measure = measure.strip().lower()
        if not sep or measure not in MEASURES:
            self.fail(f"{value!r}: expected MEASURE=VALUE, MEASURE one of "
                      f"{', '.join(MEASURES)} (e.g. bleu=0.5)", param, ctx)
        try:
            amount = float(number)
        except ValueError:
            amount = math.nan
        if not math.isfinite(amount) or amount <= 0:
            self.fail(f"{value!r}: the difference must be a positive number", param, ctx)
        return measure, amount


def deltas_by_measure(pairs: tuple[tuple[str, float], ...]) -> dict[str, float]:
    """The ``--delta`` values by measure; a measure given twice is a usage error."""
    out: dict[str, float] = {}
    for measure, value in pairs:
        if measure in out:
            raise click.BadParameter(f"{measure} given twice ({out[measure]:g} and {value:g})",
                                     param_hint="'--delta'")
        out[measure] = value
    return out


@deprecated_aliases("report")
@click.command("report", context_settings={"show_default": True})
@click.option("-r", "--ref", "refs", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False), help="reference file (repeatable)")
@click.option("-s", "--system", "systems", multiple=True, nargs=3,
              type=(str, click.Path(exists=True, file_okay=False, path_type=Path),
                    click.Path(exists=True, dir_okay=False, path_type=Path)),
              metavar="NAME MODEL_DIR HYP", help="a run of a system: its name, model directory "
              "and test hypotheses (repeat for each system; repeat a NAME for its other runs, "
              "e.g. seeds, each with hypotheses of its own: a file or a copy given twice is "
              "refused)")
@click.option("-f", "--runs-dir", "folders", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="a results folder of the comparison recipes (models/NAME, hyps/NAME.LANG); "
                   "each is one run of every system finished in it (repeat for the seeds)")
@click.option("-b", "--baseline", "baselines", multiple=True,
              help="system NAME to test the others against with paired bootstrap (repeatable; "
                   "default: the first system); tokens/s ratios are to the first baseline")
@click.option("--ref-from-tokens", is_flag=True,
              help="the references are tokenized text (a corpus distributed tokenized, e.g. "
                   "small_parallel_enja's test.en): each line becomes the reference prepare "
                   "wrote for it, by the runs' target tokenizer")
@click.option("--tokenize", type=click.Choice(TOKENIZERS), default=None,
              help="BLEU tokenizer [default: sacrebleu's default for --lang, else 13a]")
@click.option("-l", "--lang", default=None, metavar="LANG", help="target language")
@click.option("--bootstrap", "n_samples", type=click.IntRange(min=0), default=DEFAULT_SAMPLES,
              help="paired bootstrap resamples (0 disables the p-values)")
@click.option("--shuffles", type=click.IntRange(min=0), default=DEFAULT_SHUFFLES,
              help="approximate randomization shuffles (0 disables its p-values)")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, help="bootstrap and shuffling seed")
@click.option("--delta", "deltas", multiple=True, type=Delta(),
              help="a difference to plan for (repeatable; MEASURE is bleu, chrf or nll, the "
                   "test NLL per word; e.g. --delta bleu=0.5 --delta nll=0.01): the power table "
                   "gives the runs a side it needs to be found with power 0.8 at two-sided "
                   "α 0.05, from the pooled run-to-run sd")
@click.option("-o", "--output", "prefix", type=click.Path(path_type=Path), default=None,
              metavar="OUT",
              help="also write OUT.md, OUT.json and OUT.png (every run as a point, means "
                   "and 95 % intervals); all three are written in full before any is put in "
                   "place, OUT.json last")
def command(refs: tuple[str, ...], systems: tuple[tuple[str, Path, Path], ...],
            folders: tuple[Path, ...], baselines: tuple[str, ...], ref_from_tokens: bool,
            tokenize: str | None,
            lang: str | None, n_samples: int, shuffles: int, seed: int,
            deltas: tuple[tuple[str, float], ...], prefix: Path | None) -> None:
    """Results table of trained systems, each trained once or several times (runs, e.g.
    seeds): per system the mean ± sd of BLEU and chrF over its runs and every run's BLEU, the
    mean dev loss, updates and epochs at the selected checkpoint, training time, target
    tokens/s (and its ratio to the first baseline); per system and baseline the difference of
    the means with Welch's 95 % interval, the p-value of approximate randomization stratified
    over runs (Clark, Dyer, Lavie & Smith 2011, as MultEval; two-sided, needs the same number
    of runs), Holm-adjusted over all systems against the same baseline, and the paired
    bootstrap's (Koehn 2004; on the runs pooled; one-sided). Below the tables: the run-to-run
    sd pooled over the systems with several runs and the smallest difference that many runs
    can show (and the runs a side an observed 0.5 BLEU would need).

    Test likelihood: a run whose hypothesis file HYP has HYP.ref-logprob beside it (the
    log-probability of every test reference under its selected checkpoint, `depnmt rescore`;
    the comparison recipes write it and `depnmt archive` keeps it) is also compared on its test
    NLL per word (−Σ log p / reference words, comparable across segmentations) and per subword
    (where the systems' segmentations are the same), as on BLEU: mean ± sd, Welch's interval,
    stratified approximate randomization on the per-sentence (−log p, words) sums, Holm, the
    paired bootstrap and an answer (lower NLL: yes, likely, no, not shown). A system with a
    run without one says "no test likelihood archived".

    Power (with a test likelihood or --delta): per measure (BLEU, chrF, test NLL) the pooled
    run-to-run sd, the difference the present runs resolve, and the runs a side each --delta
    needs at power 0.8: the fewest n with (t(0.975, 2n−2) + t(0.8, 2n−2))·sd·√(2/n) ≤ Δ.
    """
    from ..errors import DepnmtError
    from ..log import info
    from ..report import markdown, plot, references_from_tokens, results, write_together
    from ..modeldir import model_reads
    from ..runs import System, runs_in_folders
    from ..stagedir import check_output_files
    from ..textio import read_lines, write_stdout

    outputs = output_files(prefix)
    runs = [System(*s) for s in systems] + (runs_in_folders(folders) if folders else [])
    if not runs:
        raise DepnmtError("no systems: give -s NAME MODEL_DIR HYP or -f RESULTS_DIR")
    check_output_files(outputs, [*(("reference", Path(ref)) for ref in refs),
                                 *((f"hypotheses of {run.name}", run.hyp) for run in runs),
                                 *model_reads(dict.fromkeys(run.model_dir for run in runs))])
    ref_lines = [read_lines(path) for path in refs]
    if ref_from_tokens:
        ref_lines = references_from_tokens(runs, ref_lines, refs)
    chosen = list(baselines) or [runs[0].name]
    records = results(runs, ref_lines, refs, chosen, tokenize, lang, n_samples, seed, shuffles)
    table = markdown(records, chosen, deltas_by_measure(deltas))
    write_stdout(table)
    if prefix is not None:                  # all written before any is put in place
        write_together({prefix.with_name(prefix.name + ext): data for ext, data in (
            (".json", json.dumps(records, indent=1, ensure_ascii=False).encode() + b"\n"),
            (".png", plot(records)), (".md", table.encode()))})
        info(f"wrote {prefix}.md, {prefix}.json and {prefix}.png")


def output_files(prefix: Path | None) -> dict[str, Path]:
    """``-o PREFIX``'s files (PREFIX.json, .png, .md) by what the refusal of an output that is
    an input calls them; a prefix that names a folder (``.``, ``..``, empty) is a usage
    error."""
    if prefix is None:
        return {}
    if prefix.name in ("", ".", ".."):
        raise click.BadParameter(f"{str(prefix)!r} names a folder: give a file name prefix, "
                                 f"e.g. results/table", param_hint="'-o'")
    return {f"output {prefix.name}{ext}": prefix.with_name(prefix.name + ext)
            for ext in (".json", ".png", ".md")}
