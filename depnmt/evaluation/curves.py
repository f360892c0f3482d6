"""Training curves of several runs (``depnmt plot``): dev loss and dev BLEU against updates and
against training time, read from each model directory's ``metrics.jsonl``.

A run's curve is its ``valid`` records: ``step`` (updates), ``time`` (seconds of training so
far, validation included, summed over resumed runs) and ``dev_nll`` (the dev loss: negative
log-likelihood per target token, no label smoothing) / ``dev_bleu`` (sacreBLEU of greedy or
``--valid-beam`` output). A run resumed from an earlier checkpoint repeats the updates after
it; the later records replace the earlier ones from the first repeated step on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.errors import DepnmtError, UsageError
from depnmt.core.optionspec import File, Folder, check_options, option
from depnmt.evaluation.figures import pyplot, save_png
from depnmt.storage.modeldir import read_metrics

# (record key, axis label) of the rows and the columns of the figure
METRICS = (("dev_nll", "dev loss (NLL per target token)"), ("dev_bleu", "dev BLEU"))
X_AXES = (("step", "updates", 1.0), ("time", "training time (minutes)", 1 / 60))


@dataclass
class PlotSettings:
    """The options of ``depnmt plot`` (:func:`load_run`, :func:`write_curves`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    models: tuple[Path, ...] = option((), "model directory of `depnmt train` (repeatable: one "
                                      "curve per run)", Folder(exists=True),
                                      flag=("-m", "--model"), multiple=True, required=True)
    labels: tuple[str, ...] = option((), "legend label of each --model in order  [default: the "
                                     "model folder's name]", str, flag="--label", multiple=True)
    output: Path | None = option(None, "the PNG to write", File(), flag=("-o", "--output"),
                                 required=True)

    def __post_init__(self):
        check_options(self)
        if self.labels and len(self.labels) != len(self.models):
            raise UsageError(f"{len(self.labels)} --label for {len(self.models)} --model; "
                             f"give one per model or none")

    def label(self, index: int) -> str | None:
        """The legend label of the ``index``-th model (None: its folder's name)."""
        return self.labels[index] if self.labels else None


@dataclass
class Run:
    """One training run: its label in the legend and its validation records by step."""

    label: str
    valid: list[dict]


def validation_records(records: Sequence[dict]) -> list[dict]:
    """The ``valid`` records in step order; a step that does not follow the previous one (a
    resumed run repeating updates) drops the earlier records from that step on."""
    out: list[dict] = []
    for record in records:
        if record.get("event") != "valid":
            continue
        while out and out[-1]["step"] >= record["step"]:
            out.pop()
        out.append(record)
    return out


def load_run(model_dir: Path, label: str | None = None) -> Run:
    """The run of ``model_dir`` (labelled by the folder's name unless ``label`` is given); an
    error when it has no validation yet."""
    valid = validation_records(read_metrics(model_dir))
    if not valid:
        raise DepnmtError(f"{model_dir / 'metrics.jsonl'}: no validation records yet (training "
                          f"logs one every --valid-every updates or epoch)")
    return Run(label or model_dir.resolve().name, valid)


def curves_figure(runs: Sequence[Run]) -> Any:
    """A 2 × 2 figure: dev loss (top) and dev BLEU (bottom) against updates (left) and training
    minutes (right), one line per run with the same colour in every panel."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10.0, 7.0), squeeze=False)
    for row, (key, ylabel) in enumerate(METRICS):
        for col, (xkey, xlabel, scale) in enumerate(X_AXES):
            ax = axes[row][col]
            for i, run in enumerate(runs):
                points = [(r[xkey] * scale, r[key]) for r in run.valid if key in r]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", markersize=3, color=f"C{i % 10}",
                            label=run.label)
            if not ax.get_lines():
                ax.text(0.5, 0.5, f"no {key} logged", ha="center", va="center",
                        transform=ax.transAxes, color="grey")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(runs), 6), fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def write_curves(runs: Sequence[Run], path: Path) -> None:
    """:func:`curves_figure` of ``runs`` as a PNG."""
    save_png(curves_figure(runs), path)
