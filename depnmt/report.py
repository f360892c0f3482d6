"""Results table of trained systems, each trained once or several times (runs = replicates).

A *system* is a name with one or more *runs* (a model directory and its test hypotheses; runs of
one system differ by seed). Per system: its scheme and parameters; the mean ± sd of BLEU and chrF
over its runs and every run's value; from ``metrics.jsonl``, the mean dev loss, updates and
epochs at the selected checkpoint (the last validation marked best by ``--early-stop-metric``),
training time and target tokens/s; for systems with DBSA's parse heads, their dev UAS at the
last validation. Per system and baseline: the mean difference of BLEU and chrF
with Welch's 95 % interval, the p-value of approximate randomization stratified over runs
(Clark et al. 2011, :mod:`depnmt.significance`) and the paired bootstrap's (Koehn 2004,
:mod:`depnmt.score`) on the pooled runs (each sentence's statistics summed over the runs; with one
run, exactly ``depnmt score``'s test), the AR p-values Holm-adjusted over the systems compared
with the same baseline; below the tables, the run-to-run noise pooled over the systems and the
difference the run count can resolve. Written as Markdown, JSON and a PNG by ``depnmt report``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import score as sc
from . import significance as sig
from .errors import DepnmtError
from .log import warn
from .modeldir import read_config
from .runs import System, mean_of, training_summary
from .textio import atomic_open, read_lines

METRICS = ("bleu", "chrf")
# DBSA's parse heads against the dev set's trees (train's metrics; depnmt.model.schemes.dbsa):
# the source words, all target words, the target words whose head is not in the future
UAS = {"dev_uas_enc": "dev UAS enc", "dev_uas_dec": "dev UAS dec",
       "dev_uas_dec_visible": "dev UAS dec (visible heads)"}


def references_from_tokens(runs: Sequence[System], refs: Sequence[Sequence[str]],
                           names: Sequence[str]) -> list[list[str]]:
    """Tokenized reference lines ``refs`` (of the files ``names``), each turned into the
    reference ``prepare`` writes for it (``{split}.raw.{lang}``) by the runs' target tokenizer
    (``config.json``): for a corpus distributed tokenized, such as small_parallel_enja, whose
    own file then serves as the reference. The runs must share one target tokenizer."""
    from .tokenize import make_tokenizer
    configs = {json.dumps(read_config(r.model_dir)["tokenizers"]["tgt"], sort_keys=True): r
               for r in runs}
    if len(configs) > 1:
        first, other = list(configs.values())[:2]
        raise DepnmtError(f"--ref-from-tokens: {first.model_dir} and {other.model_dir} "
                          f"tokenize their targets differently; report them separately")
    tokenizer = make_tokenizer(json.loads(next(iter(configs))))
    out = []
    for lines, name in zip(refs, names):
        made = []
        for i, line in enumerate(lines, 1):
            try:
                made.append(tokenizer.process(line)[0])
            except DepnmtError as err:
                raise DepnmtError(f"{name}:{i}: {err}") from None
        out.append(made)
    return out


def group_runs(runs: Sequence[System]) -> dict[str, list[System]]:
    """Runs by system name, in order of first appearance."""
    groups: dict[str, list[System]] = {}
    for run in runs:
        groups.setdefault(run.name, []).append(run)
    for name, members in groups.items():
        hyps = [str(m.hyp) for m in members]
        if len(set(hyps)) != len(hyps):
            raise DepnmtError(f"system {name!r} lists the same hypothesis file twice")
    return groups


def system_record(name: str, runs: Sequence[dict]) -> dict:
    """Aggregate one system's run records (each with scores and a training summary)."""
    schemes = {r["scheme"] for r in runs}
    if len(schemes) > 1:
        raise DepnmtError(f"system {name!r} mixes runs of different schemes: "
                          f"{', '.join(sorted(schemes))}")
    record: dict = {"system": name, "scheme": runs[0]["scheme"], "n_runs": len(runs),
                    "parameters": runs[0]["parameters"]}
    for key in METRICS:
        record[f"{key}_mean"], record[f"{key}_sd"] = sig.mean_sd([r[key] for r in runs])
    for key in ("selected_dev_nll", "selected_step", "selected_epoch", "train_seconds",
                "tgt_tokens_per_s", "load"):
        record[f"{key}_mean"] = mean_of([r[key] for r in runs])
    for key in UAS:                     # DBSA: where every run logged it
        if all(key in r for r in runs):
            record[f"{key}_mean"], record[f"{key}_sd"] = sig.mean_sd([r[key] for r in runs])
    record["runs"] = list(runs)
    return record


def comparison(metric, key: str, base: dict, other: dict, stats: dict, p_ar: float | None,
               n_samples: int, seed: int) -> dict:
    """``other`` against ``base`` on metric ``key``: mean difference with its 95 % interval,
    the p-value ``p_ar`` of stratified approximate randomization (:func:`ar_pvalues`; None:
    not tested) and the paired bootstrap's."""
    interval = sig.mean_difference([r[key] for r in base["runs"]], [r[key] for r in other["runs"]])
    out = asdict(interval)
    out["p_ar"] = p_ar
    if n_samples > 0:
        a, b = stats[base["system"]][key], stats[other["system"]][key]
        pooled = [sc.SystemStats({key: s.sum(axis=0).tolist()}, {key: sig.pooled_score(metric, s)})
                  for s in (a, b)]
        out["p_bootstrap"] = sc.compare(metric, pooled[0], pooled[1], key, n_samples, seed)
    else:
        out["p_bootstrap"] = None
    return out


def ar_pvalues(metrics: dict, pairs: Sequence[tuple[str, str]], stats: dict, shuffles: int,
               seed: int) -> dict[tuple[str, str, str], float]:
    """Stratified approximate randomization of every ``(base, other)`` system pair of the same
    number of runs, on every metric, keyed ``(base, other, metric key)``; run together, so
    that each shuffle is drawn once (:func:`~depnmt.significance.approximate_randomization_tests`).
    """
    if shuffles <= 0:
        return {}
    keys = [(base, other, key) for base, other in pairs for key in METRICS
            if stats[base][key].shape == stats[other][key].shape]
    tests = [(metrics[key], stats[base][key], stats[other][key]) for base, other, key in keys]
    return dict(zip(keys, sig.approximate_randomization_tests(tests, shuffles, seed)))


def results(runs: Sequence[System], refs: Sequence[Sequence[str]], ref_names: Sequence[str],
            baselines: Sequence[str], tokenize: str | None = None, lang: str | None = None,
            n_samples: int = sc.DEFAULT_SAMPLES, seed: int = sc.DEFAULT_SEED,
            shuffles: int = sig.DEFAULT_SHUFFLES) -> list[dict]:
    """One record per system (:func:`system_record`), with ``vs[<baseline>][<metric>]`` for every
    baseline other than itself (:func:`comparison`) and ``tok_s_ratio`` to the first baseline."""
    groups = group_runs(runs)
    missing = [b for b in baselines if b not in groups]
    if missing:
        raise DepnmtError(f"baseline {missing[0]!r} is not one of the systems ({', '.join(groups)})")
    metrics = sc.make_metrics(list(METRICS), tokenize=tokenize, lang=lang)
    stats: dict[str, dict[str, np.ndarray]] = {}
    records = []
    for name, members in groups.items():
        run_records, per_metric = [], {key: [] for key in METRICS}
        for run in members:
            hyps = read_lines(run.hyp)
            sc.check_parallel(hyps, refs, str(run.hyp), list(ref_names))
            current = sc.system_stats(metrics, hyps, refs)
            for key in METRICS:
                per_metric[key].append(current.stats[key])
            run_records.append({"model_dir": str(run.model_dir), "hyp": str(run.hyp),
                                **training_summary(run.model_dir), **current.scores})
        stats[name] = {key: np.asarray(v, dtype=np.float64) for key, v in per_metric.items()}
        records.append(system_record(name, run_records))
    by_name = {r["system"]: r for r in records}
    pairs = [(base, r["system"]) for r in records for base in baselines if base != r["system"]]
    p_ar = ar_pvalues(metrics, pairs, stats, shuffles, seed)
    for record in records:
        record["vs"] = {}
        for base in baselines:
            if base == record["system"]:
                continue
            if by_name[base]["n_runs"] != record["n_runs"] and shuffles > 0:
                warn(f"{record['system']} has {record['n_runs']} runs and {base} "
                     f"{by_name[base]['n_runs']}: no approximate randomization (it needs the "
                     f"same number of runs)")
            record["vs"][base] = {
                key: comparison(metrics[key], key, by_name[base], record, stats,
                                p_ar.get((base, record["system"], key)), n_samples, seed)
                for key in METRICS}
    for base in baselines:                      # every system against one baseline: a family
        family = [r["vs"][base] for r in records if base in r["vs"]]
        for key in METRICS:
            for c, adjusted in zip(family, sig.holm([c[key]["p_ar"] for c in family])):
                c[key]["p_ar_holm"] = adjusted
    base_speed = by_name[baselines[0]]["tgt_tokens_per_s_mean"] if baselines else None
    signatures = {key: sc.signature(metric) for key, metric in metrics.items()}
    for record in records:
        record["signatures"] = signatures            # e.g. BLEU's tok:ja-mecab-… for Japanese
        speed = record["tgt_tokens_per_s_mean"]
        record["tok_s_ratio"] = speed / base_speed if base_speed and speed else None
    return records


def noise(records: Sequence[dict], target: float = 0.5) -> dict | None:
    """Run-to-run noise over the systems with ≥ 2 runs, per metric: the pooled sd and its
    degrees of freedom, ``runs`` (the most common run count), the difference that many runs a
    side can resolve at 95 % and the runs a side ``target`` points would need
    (:mod:`depnmt.significance`). None when no system has two runs."""
    replicated = [r for r in records if r["n_runs"] > 1]
    if not replicated:
        return None
    counts = [r["n_runs"] for r in replicated]
    runs = max(set(counts), key=lambda n: (counts.count(n), n))
    out: dict = {"systems": len(replicated), "runs": runs, "target": target}
    for key in METRICS:
        sd, df = sig.pooled_sd([[run[key] for run in r["runs"]] for r in replicated])
        out[key] = {"sd": sd, "df": df, "resolvable": sig.resolvable_difference(sd, runs),
                    "runs_for_target": sig.runs_to_resolve(sd, target)}
    return out


def noise_sentence(n: dict) -> str:
    """:func:`noise` in one paragraph of the table's notes."""
    b, c = n["bleu"], n["chrf"]
    need = b["runs_for_target"]
    return (f"Run-to-run noise, pooled over the {n['systems']} systems with ≥ 2 runs: sd "
            f"{b['sd']:.2f} BLEU (df {b['df']}), {c['sd']:.2f} chrF. With {n['runs']} runs a side, "
            f"a difference is significant at 95 % only beyond about ±{b['resolvable']:.2f} BLEU / "
            f"±{c['resolvable']:.2f} chrF (pooled two-sample t interval); an observed difference "
            f"of {n['target']:g} BLEU would need "
            + (f"{need} runs a side." if need else "more than 1,000 runs a side."))


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _mean_sd(record: dict, key: str) -> str:
    mean, sd = record[f"{key}_mean"], record[f"{key}_sd"]
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def _table(head: list[str], rows: list[list[str]], text_columns: int) -> list[str]:
    lines = ["| " + " | ".join(head) + " |",
             "|" + "---|" * text_columns + "---:|" * (len(head) - text_columns)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def uas_table(records: Sequence[dict]) -> list[str]:
    """The dev UAS of the systems with DBSA's parse heads (mean ± sd over runs, each run's),
    as Markdown lines after a blank one; none when no system has them."""
    def cell(r: dict, key: str) -> str:
        if f"{key}_mean" not in r:
            return "-"
        each = ", ".join(f"{run[key]:.2f}" for run in r["runs"])
        return _mean_sd(r, key) + (f" ({each})" if r["n_runs"] > 1 else "")

    keys = [k for k in UAS if any(f"{k}_mean" in r for r in records)]
    rows = [[r["system"], str(r["n_runs"]), *(cell(r, k) for k in keys)]
            for r in records if any(f"{k}_mean" in r for k in keys)]
    if not rows:
        return []
    return ["", *_table(["system", "runs", *(UAS[k] for k in keys)], rows, 2), "",
            "Dev UAS: the argmax heads of DBSA's parse heads against the dev set's trees (those "
            "given to `train`), in %, at each run's last validation: mean ± sd (each run); "
            "enc: source words; dec: all target words; visible heads: the target words whose "
            "head is not in the future."]


def markdown(records: Sequence[dict], baselines: Sequence[str]) -> str:
    """Two tables: the systems (mean ± sd over runs, every run's BLEU, the selected
    checkpoints), then every system against every baseline (Δ mean [95 % interval], p-values);
    below them the noise and, for DBSA systems, the dev UAS (:func:`uas_table`)."""
    head = ["system", "scheme", "runs", "params (M)", "updates*", "epochs*", "dev loss*",
            "train min", "load", "tgt tok/s", f"× {baselines[0]}" if baselines else "× base",
            "BLEU", "chrF", "BLEU of each run"]
    rows = []
    for r in records:
        minutes = r["train_seconds_mean"] / 60 if r["train_seconds_mean"] is not None else None
        params = r["parameters"] / 1e6 if r["parameters"] else None
        rows.append([r["system"], r["scheme"], str(r["n_runs"]), _num(params, ".2f"),
                     _num(r["selected_step_mean"], ".0f"), _num(r["selected_epoch_mean"], ".1f"),
                     _num(r["selected_dev_nll_mean"], ".3f"), _num(minutes, ".1f"),
                     _num(r["load_mean"], ".1f"),
                     _num(r["tgt_tokens_per_s_mean"], ".0f"), _num(r["tok_s_ratio"], ".2f"),
                     _mean_sd(r, "bleu"), _mean_sd(r, "chrf"),
                     ", ".join(f"{run['bleu']:.2f}" for run in r["runs"])])
    lines = _table(head, rows, 2)
    lines += ["", "BLEU and chrF: mean ± sd over the runs. *: means over the runs of the selected "
              "checkpoint (the last validation marked best; dev loss is its dev NLL). load: the "
              "machine's 1-minute load average while training, mean over the logged updates "
              "(- for runs logged before train recorded it).", ""]
    head = ["system", "vs", "Δ BLEU [95 % CI]", "p AR", "Holm", "p boot", "Δ chrF [95 % CI]",
            "p AR", "Holm", "p boot"]
    rows = []
    for r in records:
        for base, by_metric in r["vs"].items():
            cells = [r["system"], base]
            for key in METRICS:
                c = by_metric[key]
                ci = f" [{c['low']:+.2f}, {c['high']:+.2f}]" if c["low"] is not None else ""
                cells += [f"{c['difference']:+.2f}{ci}", _num(c["p_ar"], ".4f"),
                          _num(c.get("p_ar_holm"), ".4f"), _num(c["p_bootstrap"], ".4f")]
            rows.append(cells)
    if rows:
        lines += _table(head, rows, 2)
        lines += ["", "Δ: difference of the mean scores, Welch's 95 % interval over runs; p AR: "
                  "approximate randomization stratified over runs (Clark et al. 2011, MultEval; "
                  "two-sided); Holm: p AR adjusted for testing every system against the same "
                  "baseline (Holm 1979); p boot: paired bootstrap on the pooled runs (Koehn "
                  "2004; one-sided)."]
    spread = noise(records)
    if spread:
        lines += ["", noise_sentence(spread)]
    lines += uas_table(records)
    if records and records[0].get("signatures"):
        names = {"bleu": "BLEU", "chrf": "chrF"}
        lines += ["", "sacreBLEU signatures: " + "; ".join(
            f"{names[key]} `{text}`" for key, text in records[0]["signatures"].items())]
    return "\n".join(lines) + "\n"


def plot(records: Sequence[dict]) -> bytes:
    """BLEU and chrF per system, as PNG bytes: every run as a point, the mean as a bar and its
    95 % t-interval (two or more runs) as an error bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["system"] for r in records]
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 0.7 * len(names) + 3), 3.6))
    for ax, key, label in ((axes[0], "bleu", "BLEU"), (axes[1], "chrf", "chrF")):
        for i, r in enumerate(records):
            values = [run[key] for run in r["runs"]]
            offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
            ax.scatter([i + o for o in offsets], values, s=14, color="#4477aa", zorder=3)
            mean, (low, high) = r[f"{key}_mean"], sig.mean_interval(values)
            ax.hlines(mean, i - 0.3, i + 0.3, color="#222222", zorder=4)
            if low is not None:
                ax.errorbar(i, mean, yerr=[[mean - low], [high - mean]], color="#222222",
                            capsize=4, zorder=4)
            ax.text(i + 0.32, mean, f"{mean:.1f}", va="center", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.set_xlim(-0.6, len(names) - 0.2)
    fig.suptitle("runs (points), mean and 95 % interval", fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    return png.getvalue()


def write_together(files: dict[Path, bytes]) -> None:
    """Write ``{path: bytes}``: each file is written and flushed to a temporary file beside it
    before any is renamed into place (a full disk, a refused write or a kill during the writes
    leaves none of them changed), then renamed in reverse order (the first appears last)."""
    with ExitStack() as stack:
        for path, data in files.items():
            fh = stack.enter_context(atomic_open(path, "wb"))
            fh.write(data)
            fh.flush()
