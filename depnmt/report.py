"""Results table of trained systems: the small-scale analogue of the papers' Tables 2.

One row per system (a model directory and its test hypotheses): its scheme, parameters,
training time, updates and target tokens/s (from ``metrics.jsonl``), BLEU and chrF (sacreBLEU),
and paired-bootstrap p-values (Koehn 2004, :mod:`depnmt.score`) against each baseline system,
e.g. ``abs`` and ``rel``. Written as Markdown, JSON and a PNG bar chart by ``depnmt report``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import score as sc
from .errors import DepnmtError
from .modeldir import read_config, read_metrics
from .textio import atomic_open, read_lines


@dataclass
class System:
    """A trained system: its name in the table, model directory and hypothesis file."""

    name: str
    model_dir: Path
    hyp: Path


def training_summary(model_dir: Path) -> dict:
    """What ``depnmt train`` logged: scheme, parameters, updates, seconds, mean target tokens/s
    over the logged windows, best dev BLEU and the last dev UAS values (DBSA)."""
    config = read_config(model_dir)
    records = read_metrics(model_dir)
    start = next((r for r in records if r["event"] == "start"), {})
    train = [r for r in records if r["event"] == "train"]
    valid = [r for r in records if r["event"] == "valid"]
    ends = [r for r in records if r["event"] == "end"]
    summary = {
        "scheme": "+".join(config["model"]["scheme"]),
        "parameters": start.get("parameters"),
        "updates": max((r["step"] for r in records), default=0),
        "train_seconds": sum(r["elapsed"] for r in ends) if ends else
        (records[-1]["time"] if records else None),
        "tgt_tokens_per_s": (sum(r["tgt_tokens_per_s"] for r in train) / len(train)
                             if train else None),
        "dev_bleu": max((r["dev_bleu"] for r in valid if "dev_bleu" in r), default=None),
        "finished": bool(ends),
    }
    if valid:
        summary.update({k: v for k, v in valid[-1].items() if k.startswith("dev_uas")})
    return summary


def results(systems: Sequence[System], refs: Sequence[Sequence[str]], ref_names: Sequence[str],
            baselines: Sequence[str], tokenize: str | None = None, lang: str | None = None,
            n_samples: int = sc.DEFAULT_SAMPLES, seed: int = sc.DEFAULT_SEED) -> list[dict]:
    """One record per system: training summary, ``bleu``, ``chrf``, ``p_bleu_vs_<b>`` and
    ``p_chrf_vs_<b>`` for every baseline ``b`` other than itself, ``tok_s_ratio`` to the first
    baseline."""
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise DepnmtError(f"system names must be unique: {names}")
    missing = [b for b in baselines if b not in names]
    if missing:
        raise DepnmtError(f"baseline {missing[0]!r} is not one of the systems ({', '.join(names)})")
    metrics = sc.make_metrics(["bleu", "chrf"], tokenize=tokenize, lang=lang)
    stats = {}
    records = []
    for system in systems:
        hyps = read_lines(system.hyp)
        sc.check_parallel(hyps, refs, str(system.hyp), list(ref_names))
        stats[system.name] = sc.system_stats(metrics, hyps, refs)
        records.append({"system": system.name, "model_dir": str(system.model_dir),
                        "hyp": str(system.hyp), **training_summary(system.model_dir),
                        **stats[system.name].scores})
    samples: dict[tuple[str, str], object] = {}
    for record in records:
        for base in baselines:
            if base == record["system"] or n_samples <= 0:
                continue
            for key, metric in metrics.items():
                if (base, key) not in samples:
                    samples[base, key] = sc.bootstrap_scores(metric, stats[base].stats[key],
                                                             n_samples, seed)
                record[f"p_{key}_vs_{base}"] = sc.compare(
                    metric, stats[base], stats[record["system"]], key, n_samples, seed,
                    samples[base, key])
    first = next(r for r in records if r["system"] == baselines[0]) if baselines else None
    for record in records:
        base_speed = first and first["tgt_tokens_per_s"]
        record["tok_s_ratio"] = (record["tgt_tokens_per_s"] / base_speed
                                 if base_speed and record["tgt_tokens_per_s"] else None)
    return records


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def markdown(records: Sequence[dict], baselines: Sequence[str]) -> str:
    """The table; p-values are for BLEU (chrF's are in the JSON)."""
    head = ["system", "scheme", "params (M)", "updates", "train min", "tgt tok/s",
            f"× {baselines[0]}" if baselines else "× base", "BLEU", "chrF"]
    head += [f"p vs {b}" for b in baselines]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for r in records:
        minutes = r["train_seconds"] / 60 if r["train_seconds"] is not None else None
        params = r["parameters"] / 1e6 if r["parameters"] else None
        cells = [r["system"], r["scheme"], _num(params, ".2f"), str(r["updates"]),
                 _num(minutes, ".1f"), _num(r["tgt_tokens_per_s"], ".0f"),
                 _num(r["tok_s_ratio"], ".2f"), f"{r['bleu']:.2f}", f"{r['chrf']:.2f}"]
        cells += [_num(r.get(f"p_bleu_vs_{b}"), ".3f") for b in baselines]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(records: Sequence[dict], path: Path) -> None:
    """Bars of BLEU and chrF per system."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["system"] for r in records]
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 0.7 * len(names) + 3), 3.6))
    for ax, key, label in ((axes[0], "bleu", "BLEU"), (axes[1], "chrf", "chrF")):
        values = [r[key] for r in records]
        ax.bar(range(len(names)), values, color="#4477aa")
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel(label)
        low, high = min(values), max(values)
        ax.set_ylim(max(0.0, low - 2 * (high - low) - 1), high + (high - low) * 0.3 + 0.5)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    plt.close(fig)
