"""``depnmt score``: sacrebleu BLEU / chrF / TER of hypothesis files (see
``depnmt/evaluation/score.py``);
its flags are the fields of :class:`depnmt.evaluation.score.ScoreSettings`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import click

from depnmt.commands.fields import GivenPath, click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, track
from depnmt.core.optionspec import field_params, from_options
from depnmt.core.stagedir import check_output_files
from depnmt.core.textio import STDOUT, atomic_open, naming
from depnmt.evaluation import score as sc

METRIC_LABELS = {"bleu": "BLEU", "chrf": "chrF", "ter": "TER"}


@deprecated_aliases("score")
@click.command(name="score")
@click_options(field_params(sc.ScoreSettings))
@click.argument("hyps", nargs=-1, required=True, type=GivenPath(dir_okay=False))
def command(hyps: tuple[str, ...], **values) -> None:
    """Score HYP files against --ref with sacrebleu BLEU, chrF and TER.

    \b
    The first HYP is the baseline: every other one gets paired-bootstrap p-values (Koehn 2004)
    for BLEU and chrF: the share of resamples in which it is not better than the baseline in
    the direction of the observed difference.
    """
    settings = from_options(sc.ScoreSettings, values)
    refs, src, bucket_plot = settings.refs, settings.src, settings.bucket_plot
    bounds = sc.parse_buckets(settings.buckets)
    metrics = sc.make_metrics(
        [name.strip() for name in settings.metric_names.split(",") if name.strip()],
        tokenize=settings.tokenize, lang=settings.lang, chrf_word_order=settings.chrf_word_order)
    if bucket_plot and (not src or len(hyps) < 2 or "bleu" not in metrics):
        raise DepnmtError("--bucket-plot needs --src, BLEU and at least two HYP files (Δ-BLEU "
                          "vs the first)")
    check_output_files({"--bucket-plot file": bucket_plot and Path(bucket_plot)},
                       [*(("reference", Path(r)) for r in refs),
                        *(("hypotheses", Path(h)) for h in hyps),
                        ("--src file", src and Path(src))])
    ref_lines, systems, src_lines = load_inputs(refs, hyps, src)
    sc.check_bleu_tokenizer(metrics, ref_lines[0], refs[0], settings.tokenize, settings.lang)
    bucket_ids = None
    if src_lines is not None:
        sc.check_bucket_source(src_lines, src)
        bucket_ids = sc.assign_buckets(src_lines, bounds)
    records = sc.evaluate(track(systems, "scoring"), ref_lines, metrics,
                          n_samples=settings.n_samples, seed=settings.seed, buckets=bucket_ids,
                          bounds=bounds)
    with naming(STDOUT):
        if settings.as_json:
            for record in records:
                click.echo(json.dumps(record, ensure_ascii=False))
        else:
            print_report(records, settings.chrf_word_order, settings.n_samples, settings.seed)
    if bucket_plot:
        plot_bucket_deltas(records, bucket_plot)
        info(f"wrote {bucket_plot}")


def load_inputs(ref_paths: Sequence[str], hyp_paths: Sequence[str], src_path: str | None
                ) -> tuple[list[list[str]], list[tuple[str, list[str]]], list[str] | None]:
    """Read references, hypotheses and the optional source (:func:`~depnmt.evaluation.score.
    read_scored`); all must have the same line count."""
    refs = [sc.read_scored(path) for path in ref_paths]
    sc.check_parallel(refs[0], refs[1:], ref_paths[0], ref_paths[1:])
    systems = [(path, sc.read_scored(path)) for path in hyp_paths]
    for path, lines in systems:
        sc.check_parallel(lines, refs, path, ref_paths)
    src = None
    if src_path is not None:
        src = sc.read_scored(src_path)
        sc.check_parallel(refs[0], [src], ref_paths[0], [src_path])
    return refs, systems, src


# ------------------------------------------------------------------------------------- report

def fmt(value: float | None, digits: int = 2) -> str:
    """A score or p-value for the tables; ``-`` when missing."""
    return "-" if value is None else f"{value:.{digits}f}"


def chrf_label(word_order: int) -> str:
    """``chrF``, ``chrF++`` (word order 2) or ``chrF(nw=N)``."""
    return {0: "chrF", 2: "chrF++"}.get(word_order, f"chrF(nw={word_order})")


def print_report(records: list[dict], chrf_word_order: int, n_samples: int, seed: int) -> None:
    """Rich tables on stdout: scores and p-values, BLEU by bucket, then the signatures."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a file or pipe: don't fold file names at 80
    keys = [key for key in sc.METRICS if key in records[0]]
    labels = dict(METRIC_LABELS, chrf=chrf_label(chrf_word_order))
    table = Table(title="Scores")
    table.add_column("System", overflow="fold")
    p_keys = [key for key in sc.BOOTSTRAP_METRICS if f"p_{key}" in records[-1]]
    for key in keys:
        table.add_column(labels[key], justify="right")
    for key in p_keys:
        table.add_column(f"p({labels[key]})", justify="right")
    for record in records:
        table.add_row(record["hyp"], *[fmt(record[key]) for key in keys],
                      *[fmt(record.get(f"p_{key}"), 4) for key in p_keys])
    console.print(table)
    if "buckets" in records[0]:
        console.print(bucket_table(records))
    for key, sig in records[0]["signature"].items():
        console.print(f"{labels[key]} signature: {sig}", markup=False)
    if p_keys:
        console.print(f"p: paired bootstrap vs {records[0]['hyp']} ({n_samples} resamples, seed "
                      f"{seed}); share of resamples where the system is not better in the "
                      f"observed direction", markup=False)


def bucket_table(records: list[dict]):
    """BLEU per source-length bucket; later systems also show Δ vs the first."""
    from rich.table import Table

    table = Table(title="BLEU by source length (words)")
    table.add_column("Bucket")
    table.add_column("Sentences", justify="right")
    for record in records:
        table.add_column(Path(record["hyp"]).name, justify="right", overflow="fold")
    deltas = bucket_deltas(records)
    for index, bucket in enumerate(records[0]["buckets"]):
        cells = [bucket["bucket"], str(bucket["sentences"]), fmt(bucket["bleu"])]
        for record, delta in zip(records[1:], deltas):
            change = "" if math.isnan(delta[index]) else f" ({delta[index]:+.2f})"
            cells.append(fmt(record["buckets"][index]["bleu"]) + change)
        table.add_row(*cells)
    return table


def bucket_deltas(records: list[dict]) -> list[list[float]]:
    """Δ-BLEU per bucket of each system after the first (NaN for an empty bucket)."""
    base = [b["bleu"] for b in records[0]["buckets"]]
    return [[math.nan if mine is None or ref is None else mine - ref
             for mine, ref in zip((b["bleu"] for b in record["buckets"]), base)]
            for record in records[1:]]


def plot_bucket_deltas(records: list[dict], path: str) -> None:
    """Grouped bar chart of Δ-BLEU per source-length bucket vs the first system (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    deltas = bucket_deltas(records)
    ticks = [f"{b['bucket']}\n(n={b['sentences']})" for b in records[0]["buckets"]]
    x = np.arange(len(ticks))
    width = 0.8 / len(deltas)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(ticks)), 4.0))
    for i, (record, values) in enumerate(zip(records[1:], deltas)):
        ax.bar(x + (i - (len(deltas) - 1) / 2) * width, values, width,
               label=Path(record["hyp"]).name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, ticks)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("Δ BLEU")
    ax.set_title(f"BLEU by source length, vs {Path(records[0]['hyp']).name}", fontsize="medium")
    ax.legend()
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=150)
    plt.close(fig)
