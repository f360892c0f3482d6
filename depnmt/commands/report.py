"""``depnmt report``: the results table of several trained systems (see
``depnmt/evaluation/report.py``);
its flags are the fields of :class:`depnmt.evaluation.report.ReportSettings`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.report import ReportSettings


@deprecated_aliases("report")
@click.command("report", context_settings={"show_default": True})
@click_options(field_params(ReportSettings))
def command(**values) -> None:
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
    run without one says "no test likelihood archived". A run whose HYP.settings (the
    recipes' record) names another training than its model folder holds now (trained again
    since) is refused.

    Power (with a test likelihood or --delta): per measure (BLEU, chrF, test NLL) the pooled
    run-to-run sd, the difference the present runs resolve, and the runs a side each --delta
    needs at power 0.8: the fewest n with (t(0.975, 2n−2) + t(0.8, 2n−2))·sd·√(2/n) ≤ Δ.
    """
    from depnmt.core.errors import DepnmtError
    from depnmt.core.stagedir import check_output_files
    from depnmt.core.textio import write_stdout
    from depnmt.evaluation import score as sc
    from depnmt.evaluation.report import markdown, noise, references_from_tokens, results
    from depnmt.evaluation.runs import System, runs_in_folders
    from depnmt.storage.modeldir import model_reads

    settings = from_options(ReportSettings, values)
    refs, prefix = settings.refs, settings.prefix
    outputs = output_files(prefix)
    runs = [System(*s) for s in settings.systems] + (runs_in_folders(settings.folders)
                                                     if settings.folders else [])
    if not runs:
        raise DepnmtError("no systems: give -s NAME MODEL_DIR HYP or -f RESULTS_DIR")
    check_output_files(outputs, [*(("reference", Path(ref)) for ref in refs),
                                 *((f"hypotheses of {run.name}", run.hyp) for run in runs),
                                 *model_reads(dict.fromkeys(run.model_dir for run in runs))])
    ref_lines = [sc.read_scored(path) for path in refs]
    if settings.ref_from_tokens:
        ref_lines = references_from_tokens(runs, ref_lines, refs)
    chosen = list(settings.baselines) or [runs[0].name]
    records = results(runs, ref_lines, refs, chosen, settings.tokenize, settings.lang,
                      settings.n_samples, settings.seed, settings.shuffles)
    deltas = dict(settings.deltas)
    table = markdown(records, chosen, deltas)
    power = noise(records, deltas=deltas)           # the power table's numbers, for OUT.json
    for record in records:
        record["power"] = power
    write_stdout(table)
    if prefix is not None:
        write_outputs(prefix, records, table)


def write_outputs(prefix: Path, records: list[dict], table: str) -> None:
    """``-o PREFIX``: the records as PREFIX.json, their plot as PREFIX.png and the tables as
    PREFIX.md, all written before any is put in place."""
    from depnmt.core.log import info
    from depnmt.evaluation.report import plot, write_together
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
