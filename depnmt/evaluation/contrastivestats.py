"""Where a contrastive set's decisions differ: accuracy per distance bucket, and systems compared
over their runs.

Distances (a set made by ``depnmt minimal-pairs``, :mod:`depnmt.evaluation.minimalpairs`, records
two per
item: the *linear* distance in tokens and the *tree* distance in dependency arcs between the
two words its edit puts in conflict) are grouped into :data:`BUCKETS` ``1``, ``2–3``, ``4–6``
and ``7+``. :func:`distance_tables` gives, per category and bucket, every model's accuracy with
its 95 % Wilson interval (:meth:`depnmt.evaluation.contrastive.Accuracy.interval`), as the
per-category table does.

Systems compared (:func:`compare`): each system is the result file of one ``depnmt contrastive
-o`` run, its models the system's runs (seeds); all on the same set. A system's accuracy is
pooled over its runs (the decisions of every run on every item together). Each other system is
tested against the first (the baseline) on all items, on each category and on each linear-
distance bucket of a category with more than one bucket, by approximate randomization
stratified over runs (:func:`depnmt.evaluation.significance.approximate_randomization_tests`: per
source sentence, the runs' decisions on its items are shuffled together between the two systems
and among the runs, Clark et al. 2011), two-sided. The sentence, not the item, is the unit: a
set made from references varies one sentence in several places, and those decisions are not
independent (shuffled item by item, a sentence's correlated items would make p too small). With
one run a side and one item per sentence it is a paired permutation test over items, the
randomization counterpart of McNemar's test. Every test of the table is one family: its
p-values are adjusted by Holm's step-down method (:func:`depnmt.evaluation.significance.holm`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.log import warn
from depnmt.decoding.likelihood import Score
from depnmt.evaluation.contrastive import Accuracy, Evaluation, Item, accuracy_of, item_sentences
from depnmt.evaluation.significance import (DEFAULT_SEED, DEFAULT_SHUFFLES,
                                            approximate_randomization_tests, holm, mean_sd)

BUCKETS = ((1, 1, "1"), (2, 3, "2–3"), (4, 6, "4–6"), (7, math.inf, "7+"))
KINDS = ("linear", "tree")


def bucket(distance: int) -> str:
    """The name of the :data:`BUCKETS` bucket of ``distance`` (≥ 1)."""
    return next(name for low, high, name in BUCKETS if low <= distance <= high)


def has_distances(items: Sequence[Item]) -> bool:
    return any(it.linear is not None for it in items)


def distance_groups(items: Sequence[Item], kind: str) -> list[tuple[str, str, list[bool]]]:
    """``(category, bucket, mask)`` for every category and ``kind`` distance bucket that has
    items (``mask[i]``: item ``i`` is in it), in category then bucket order."""
    groups = []
    for category in sorted({it.category for it in items if it.linear is not None}):
        for _, _, name in BUCKETS:
            mask = [it.category == category and getattr(it, kind) is not None
                    and bucket(getattr(it, kind)) == name for it in items]
            if any(mask):
                groups.append((category, name, mask))
    return groups


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def distance_tables(evaluation: Evaluation) -> str:
    """A table per distance kind: a row per category and bucket, a column per model (accuracy
    %, 95 % Wilson interval), and with several models their mean ± sd. Empty when no item has
    distances."""
    if not has_distances(evaluation.items):
        return ""
    models = list(evaluation.decisions)
    text = ""
    for kind in KINDS:
        rows = []
        for category, name, mask in distance_groups(evaluation.items, kind):
            accs = [accuracy_of(evaluation.decisions[m], evaluation.sentences, mask)
                    for m in models]
            row = [category, name, str(accs[0].total), *(a.cell() for a in accs)]
            if len(models) > 1:
                mean, sd = mean_sd([100 * a.value for a in accs])
                row.append(f"{mean:.1f} ± {sd:.1f}")
            rows.append(row)
        head = ["category", f"{kind} distance", "items", *models]
        text += f"\nBy {kind} distance ({'tokens' if kind == 'linear' else 'dependency arcs'} " \
                f"between the two words in conflict):\n\n" + markdown_table(
                    head + (["mean ± sd"] if len(models) > 1 else []), rows)
    return text


def distance_dict(evaluation: Evaluation, model: str) -> dict:
    """``{kind: {category: {bucket: accuracy dict}}}`` of one model (JSON output)."""
    out: dict = {}
    for kind in KINDS:
        for category, name, mask in distance_groups(evaluation.items, kind):
            acc = accuracy_of(evaluation.decisions[model], evaluation.sentences, mask)
            out.setdefault(kind, {}).setdefault(category, {})[name] = acc.to_dict()
    return out


def evaluation_dict(evaluation: Evaluation) -> dict:
    """:meth:`Evaluation.to_dict` with each model's ``by_distance`` when items have
    distances (``contrastive -o``'s JSON)."""
    out = evaluation.to_dict()
    if has_distances(evaluation.items):
        for model, record in out["models"].items():
            record["by_distance"] = distance_dict(evaluation, model)
    return out


def evaluation_markdown(evaluation: Evaluation) -> str:
    """:meth:`Evaluation.markdown` followed by the distance tables (empty without
    distances)."""
    return evaluation.markdown() + distance_tables(evaluation)


# -- systems compared over their runs ----------------------------------------------------------

class PooledAccuracy:
    """Accuracy (%) as a metric of summed statistics ``[correct, items]``, the interface of
    sacreBLEU's metrics that the approximate randomization uses."""

    def _compute_score_from_stats(self, stats: Sequence[float]) -> Score:
        return Score(100 * stats[0] / stats[1])


class MeanMargin:
    """The mean margin (nats) as a metric of summed statistics ``[sum of margins, items]``
    (:class:`PooledAccuracy`'s interface)."""

    def _compute_score_from_stats(self, stats: Sequence[float]) -> Score:
        return Score(stats[0] / stats[1])


@dataclass
class System:
    """One result file of ``contrastive -o``: its runs' decisions, ``[runs][items]``, and
    their margins where it records them (:func:`~depnmt.evaluation.contrastive.item_margins`;
    None for a file written before they were)."""

    name: str
    runs: list[list[bool]]
    normalized: bool | None = None          # the scores it compared (None: not recorded)
    checkpoints: list[tuple[str, ...]] | None = None    # each run's files (None: not recorded)
    margins: list[list[float]] | None = None             # [runs][items] (None: not recorded)

    def pooled(self, mask: Sequence[bool]) -> Accuracy:
        picked = [d for run in self.runs for d, m in zip(run, mask) if m]
        return Accuracy(sum(picked), len(picked))

    def mean_margin(self, mask: Sequence[bool]) -> float:
        """The mean margin (nats) over the runs' items in ``mask``."""
        picked = [x for run in self.margins or [] for x, m in zip(run, mask) if m]
        return sum(picked) / len(picked) if picked else math.nan

    def stats(self, mask: Sequence[bool], sentence: Sequence[int],
              measure: str = "accuracy") -> np.ndarray:
        """``[runs, sentences, 2]``: ``[correct, items]`` (``measure`` "margin": ``[sum of
        margins, items]``) per run and source sentence, over the items in ``mask``
        (``sentence[i]``: item ``i``'s sentence,
        :func:`~depnmt.evaluation.contrastive.item_sentences`; the sentences in order of their
        first item in the mask)."""
        keep = np.flatnonzero(np.asarray(mask, dtype=bool))
        _, first, cluster = np.unique(np.asarray(sentence)[keep], return_index=True,
                                      return_inverse=True)
        order = np.argsort(np.argsort(first))            # cluster index -> order of first item
        cluster = order[cluster]
        values = self.margins if measure == "margin" else self.runs
        per_item = np.asarray(values, dtype=np.float64)[:, keep]
        out = np.zeros((per_item.shape[0], len(first), 2))
        for r, row in enumerate(per_item):
            out[r, :, 0] = np.bincount(cluster, weights=row, minlength=len(first))
        out[:, :, 1] = np.bincount(cluster, minlength=len(first))
        return out


def set_digest(path: Path) -> str:
    """The SHA-256 of a set file (a result file records it: ``set_sha256``)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def items_digest(items: Sequence[Item]) -> str:
    """The SHA-256 of the items as read (source, reference, variants and category of each, in
    order): what a result file scored, whatever files it was read from (a ContraPro set's
    ``--src``/``--tgt`` texts too, which ``set_sha256`` does not cover). A result file records
    it: ``items_sha256``."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps([item.source, item.reference, item.variants, item.category],
                                 ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()


def read_system(path: Path, items: int, digest: str | None, scored: str | None = None
                ) -> System:
    """The runs of the result file ``path``, checked against the set (``items`` items, the set
    file's ``digest`` and, where given, the :func:`items_digest` of its items as read now,
    ``scored``): a :class:`DepnmtError` naming the file when it is of another set or scored
    other items (a ContraPro set read with other ``--src``/``--tgt`` texts)."""
    from depnmt.core.textio import read_json
    data = read_json(path, f"{path}: no such result file (write one with contrastive -o)")
    recorded = data.get("set_sha256")
    if digest is not None and recorded is not None and recorded != digest:
        raise InputError(path, None, f"a result of another set ({data.get('set')}, which "
                                     f"differs from the one given): compare results of one set")
    recorded = data.get("items_sha256")
    if scored is not None and recorded is not None and recorded != scored:
        raise InputError(path, None, "its items differ from those of the set as read now "
                                     "(a ContraPro set read with other --src/--tgt texts?): "
                                     "compare results of the same items")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise InputError(path, None, "no models: not a result file of contrastive -o")
    runs = []
    for name, record in models.items():
        decisions = record.get("decisions") if isinstance(record, dict) else None
        if not isinstance(decisions, list) or any(d not in (0, 1) for d in decisions):
            raise InputError(path, None, f"model {name}: expected its decisions, a list of 0/1")
        if len(decisions) != items:
            raise InputError(path, None, f"model {name}: {len(decisions)} decisions, but the "
                                         f"set has {items} items: a result of another set")
        runs.append([bool(d) for d in decisions])
    check_replicates(path, data)
    return System(str(path), runs, data.get("normalized"), run_checkpoints(path, data),
                  run_margins(path, models, runs))


def run_margins(path: Path, models: dict, runs: list[list[bool]]) -> list[list[float]] | None:
    """Each run's ``margins`` (None when the file records none for some model: written before
    they were); a list that does not fit the model's decisions (its length, or a sign that
    contradicts a decision) is an error naming the file."""
    out = []
    for (name, record), decisions in zip(models.items(), runs):
        margins = record.get("margins")
        if margins is None:
            return None
        if not isinstance(margins, list) or len(margins) != len(decisions) or not all(
                isinstance(x, (int, float)) and math.isfinite(x) and (x > 0) == d
                for x, d in zip(margins, decisions)):
            raise InputError(path, None, f"model {name}: its margins do not fit its decisions "
                                         f"(one number per item, > 0 where it decided right)")
        out.append([float(x) for x in margins])
    return out


def trained_record(model_dirs: Sequence[Path]) -> list[dict]:
    """What a result file records of how a run's models were trained (``trained``: an
    ensemble has several): per model folder the trees (:func:`~depnmt.evaluation.runs.
    trees_trained_on`) and its training and control seeds (:func:`~depnmt.evaluation.runs.
    replicate_seeds`), which :func:`check_replicates` compares."""
    from depnmt.evaluation.runs import replicate_seeds, trees_trained_on
    from depnmt.storage.modeldir import read_config
    configs = [read_config(Path(d)) for d in model_dirs]
    return [{"trees": trees_trained_on(c), "seeds": replicate_seeds(c)} for c in configs]


def check_replicates(path: Path, data: dict) -> None:
    """The runs (models) of a result file are replicates of one system, as ``report`` requires
    of its runs (:func:`~depnmt.evaluation.runs.replicate_problem`, on what the file records
    as ``trained``), else an error naming the file. Files that record no ``trained`` are not
    checked."""
    from depnmt.evaluation.runs import replicate_problem
    recorded = data.get("trained")
    if not isinstance(recorded, dict) or set(recorded) != set(data["models"]) or not all(
            isinstance(m, list) and all(isinstance(x, dict) for x in m)
            for m in recorded.values()):
        return
    runs = []
    for name, models in recorded.items():        # an ensemble's members joined
        trees = [x.get("trees") for x in models]
        seeds = [x.get("seeds") for x in models]
        known = all(isinstance(s, list) and len(s) == 2 for s in seeds)
        runs.append((name, None if None in trees else " + ".join(map(str, trees)),
                     tuple(tuple(s) for s in seeds) if known else None))
    problem = replicate_problem(runs)
    if problem:
        raise InputError(path, None, f"the system {problem}")


def run_checkpoints(path: Path, data: dict) -> list[tuple[str, ...]] | None:
    """The checkpoint files each run of a result file was scored with (``checkpoints``, in the
    order of its ``models``; None when it records none, as files written before it did), each
    run's as normalised paths; two runs of one checkpoint (one training counted as two runs,
    which would make the stratified test's p too small) are an error naming the file."""
    recorded = data.get("checkpoints")
    if not isinstance(recorded, dict) or set(recorded) != set(data["models"]) or not all(
            isinstance(files, list) and all(isinstance(f, str) for f in files)
            for files in recorded.values()):
        return None
    runs, seen = [], {}
    for name in data["models"]:
        files = tuple(os.path.normpath(f) for f in recorded[name])
        if files in seen:
            raise InputError(path, None, f"models {seen[files]} and {name} were scored with the "
                                         f"same checkpoint {', '.join(files)}: one training "
                                         f"counted as two runs")
        seen[files] = name
        runs.append(files)
    return runs


def checkpoint_kinds(systems: Sequence[System]) -> None:
    """Warn when the systems' runs were scored with checkpoints of different names (best.pt,
    last.pt, an average's): the differences are then also those of checkpoint selection."""
    kinds = {s.name: sorted({Path(f).name for run in s.checkpoints for f in run})
             for s in systems if s.checkpoints}
    if len({tuple(k) for k in kinds.values()}) > 1 or any(len(k) > 1 for k in kinds.values()):
        warn("the systems were scored with checkpoints of different names ("
             + "; ".join(f"{name}: {', '.join(k)}" for name, k in kinds.items())
             + "): their differences are also those of checkpoint selection")


def comparison_groups(items: Sequence[Item]) -> list[tuple[str, list[bool]]]:
    """``(label, mask)`` of the rows of a comparison: all items, each category, and the linear-
    distance buckets of each category that has more than one."""
    groups = [("**all**", [True] * len(items))]
    groups += [(c, [it.category == c for it in items])
               for c in sorted({it.category for it in items})]
    by_category: dict[str, list] = {}
    for category, name, mask in distance_groups(items, "linear"):
        by_category.setdefault(category, []).append((f"{category}, linear {name}", mask))
    for rows in by_category.values():
        if len(rows) > 1:
            groups += rows
    return groups


def compare(items: Sequence[Item], systems: Sequence[System], shuffles: int = DEFAULT_SHUFFLES,
            seed: int = DEFAULT_SEED) -> list[dict]:
    """Every other system against ``systems[0]`` on every :func:`comparison_groups` row: a dict
    per test (``measure`` "accuracy": ``system``, ``group``, ``items``, pooled ``accuracy`` and
    ``baseline`` (%), ``difference``, ``p``, Holm-adjusted ``p_holm``); where every system
    records its margins, the same rows again for the mean margin (``measure`` "margin",
    ``margin`` and ``baseline`` in nats). Holm's adjustment is over each measure's tests. The
    systems need as many runs each."""
    check_comparable(systems)
    base = systems[0]
    measures = ["accuracy"] + (["margin"] if all(s.margins for s in systems) else [])
    rows = []
    sentence = item_sentences(items)
    for measure in measures:
        tests, mine = [], []
        metric = PooledAccuracy() if measure == "accuracy" else MeanMargin()
        for other in systems[1:]:
            for label, mask in comparison_groups(items):
                mine.append({"measure": measure, "system": other.name, "group": label,
                             "items": sum(mask), **measure_values(measure, other, base, mask)})
                tests.append((metric, base.stats(mask, sentence, measure),
                              other.stats(mask, sentence, measure)))
        found = approximate_randomization_tests(tests, shuffles, seed)
        for row, p, adjusted in zip(mine, found, holm(found)):
            row.update(p=p, p_holm=adjusted)
        rows += mine
    return rows


def measure_values(measure: str, other: System, base: System, mask: Sequence[bool]) -> dict:
    """A comparison row's values of ``measure`` on the items in ``mask``: ``other``'s and the
    baseline's pooled accuracy (%) or mean margin (nats), and their difference."""
    if measure == "accuracy":
        mine, theirs = 100 * other.pooled(mask).value, 100 * base.pooled(mask).value
    else:
        mine, theirs = other.mean_margin(mask), base.mean_margin(mask)
    return {measure: mine, "baseline": theirs, "difference": mine - theirs}


def check_comparable(systems: Sequence[System]) -> None:
    """The systems were scored alike (``--normalized`` or not) and have as many runs each,
    else a DepnmtError; a warning when their checkpoints' names differ
    (:func:`checkpoint_kinds`)."""
    base = systems[0]
    for other in systems[1:]:
        if None not in (base.normalized, other.normalized) \
                and base.normalized != other.normalized:
            raise DepnmtError(f"{other.name} compared length-normalised scores and "
                              f"{base.name} log-probabilities, or the other way round: "
                              f"compare results of one kind of score (--normalized)")
        if len(other.runs) != len(base.runs):
            raise DepnmtError(f"{other.name} has {len(other.runs)} runs and {base.name} "
                              f"{len(base.runs)}: the stratified test shuffles runs between "
                              f"systems; compare systems of as many runs")
    shared_runs(systems)
    checkpoint_kinds(systems)


def shared_runs(systems: Sequence[System]) -> None:
    """A DepnmtError when two systems' result files have a run scored with the same checkpoint
    files (a run compared with itself: the systems differ by less than their files claim)."""
    seen: dict[tuple[str, ...], str] = {}
    for system in systems:
        for files in set(system.checkpoints or ()):
            if files in seen:
                raise DepnmtError(f"{seen[files]} and {system.name} both have a run scored with "
                                  f"{', '.join(files)}: one training in two systems; compare "
                                  f"systems of different runs")
            seen[files] = system.name


def comparison_markdown(rows: Sequence[dict], baseline: str, runs: int) -> str:
    """The tables of :func:`compare` (accuracy; the mean margin where the systems record
    it), then how they were tested."""
    accuracy = [r for r in rows if r.get("measure", "accuracy") == "accuracy"]
    margin = [r for r in rows if r.get("measure") == "margin"]
    head = ["system", "group", "items", "accuracy %", "baseline %", "difference", "p",
            "p (Holm)"]
    text = (f"Baseline: {baseline}. Accuracy pooled over each system's {runs} run(s); p: "
            f"approximate randomization over source sentences (a sentence's items shuffled "
            f"together), stratified over runs, two-sided; Holm over the {len(accuracy)} tests."
            f"\n\n" + markdown_table(head, [
                [r["system"], r["group"], str(r["items"]), f"{r['accuracy']:.1f}",
                 f"{r['baseline']:.1f}", f"{r['difference']:+.1f}", f"{r['p']:.3g}",
                 f"{r['p_holm']:.3g}"] for r in accuracy]))
    if margin:
        head = ["system", "group", "items", "margin", "baseline", "difference", "p",
                "p (Holm)"]
        text += ("\nMean margin (nats): log p(reference) − log p(best variant) per item, "
                 "pooled over the runs; larger is a clearer preference for the reference. "
                 f"Tested as above; Holm over its {len(margin)} tests.\n\n"
                 + markdown_table(head, [
                     [r["system"], r["group"], str(r["items"]), f"{r['margin']:.3f}",
                      f"{r['baseline']:.3f}", f"{r['difference']:+.3f}", f"{r['p']:.3g}",
                      f"{r['p_holm']:.3g}"] for r in margin]))
    return text

