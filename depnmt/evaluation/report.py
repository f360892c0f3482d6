"""Results table of trained systems, each trained once or several times (runs = replicates).

A *system* is a name with one or more *runs* (a model directory and its test hypotheses; runs of
one system differ by seed). Per system: its scheme and parameters; the mean ± sd of BLEU and chrF
over its runs and every run's value; from ``metrics.jsonl``, the mean dev loss, updates and
epochs at the selected checkpoint (the last validation marked best by ``--early-stop-metric``),
training time and target tokens/s; for systems with DBSA's parse heads, their dev UAS at the
last validation. Per system and baseline: the mean difference of BLEU and chrF
with Welch's 95 % interval, the p-value of approximate randomization stratified over runs
(Clark et al. 2011, :mod:`depnmt.evaluation.significance`) and the paired bootstrap's (Koehn 2004,
:mod:`depnmt.evaluation.score`) on the pooled runs (each sentence's statistics summed over the runs;
with one
run, exactly ``depnmt score``'s test), the AR p-values Holm-adjusted over the systems compared
with the same baseline; below the tables, the run-to-run noise pooled over the systems and the
difference the run count can resolve. Written as Markdown, JSON and a PNG by ``depnmt report``.

Test likelihood (:mod:`depnmt.decoding.likelihood`): runs whose hypotheses have a
``HYP.ref-logprob``
beside them (the log-probability of every test reference under the run's selected checkpoint,
written by the comparison recipes) are also compared on their test NLL per word (and per
subword, between systems with the same segmentation), as on BLEU: mean ± sd over runs, Welch's
interval, approximate randomization stratified over runs on the additive sentence statistics
(−log p, words), Holm, the paired bootstrap and the results page's answer rule
(:func:`answer`). A system with a run without one is shown as such, never left out. The power
table (:func:`power_table`) gives, for every measure, the pooled run-to-run sd, the difference
the present runs resolve and the runs a side a difference asked for (``--delta``) would need.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.log import warn
from depnmt.core.optionspec import COUNT, SEED, Choice, File, Folder, check_options, option
from depnmt.core.textio import atomic_open
from depnmt.data.record import sha256
from depnmt.decoding import likelihood as lk
from depnmt.evaluation import score as sc
from depnmt.evaluation import significance as sig
from depnmt.evaluation.runs import (System, mean_of, replicate_problem, replicate_seeds,
                                    trainer_pid, training_summary, trees_trained_on)
from depnmt.storage.modeldir import read_config

METRICS = ("bleu", "chrf")
MEASURES = (*METRICS, "nll")        # nll: test NLL per word (depnmt.decoding.likelihood)


def check_deltas(values: Sequence[str | tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    """``--delta MEASURE=VALUE`` values as ``(measure, value)`` pairs: a difference of one of
    :data:`MEASURES` to plan the runs for (a pair stays as it is); a ValueError for a value
    of another form, a difference that is not positive, or a measure given twice."""
    pairs, seen = [], {}
    for value in values:
        measure, amount = value if isinstance(value, tuple) else delta(value)
        if measure in seen:
            raise ValueError(f"{measure} given twice ({seen[measure]:g} and {amount:g})")
        seen[measure] = amount
        pairs.append((measure, amount))
    return tuple(pairs)


def delta(value: str) -> tuple[str, float]:
    """``bleu=0.5`` -> ``("bleu", 0.5)``; a ValueError saying what is wrong otherwise."""
    measure, sep, number = str(value).partition("=")
    measure = measure.strip().lower()
    if not sep or measure not in MEASURES:
        raise ValueError(f"{value!r}: expected MEASURE=VALUE, MEASURE one of "
                         f"{', '.join(MEASURES)} (e.g. bleu=0.5)")
    try:
        amount = float(number)
    except ValueError:
        amount = math.nan
    if not math.isfinite(amount) or amount <= 0:
        raise ValueError(f"{value!r}: the difference must be a positive number")
    return measure, amount


@dataclass
class ReportSettings:
    """The options of ``depnmt report``, each a field (:func:`~depnmt.core.optionspec.option`)."""

    refs: tuple[str, ...] | None = option(None, "reference file (repeatable)",
                                          File(exists=True, text=True), flag=("-r", "--ref"),
                                          multiple=True, required=True)
    systems: tuple[tuple[str, Path, Path], ...] | None = option(
        None, "a run of a system: its name, model directory and test hypotheses (repeat for "
        "each system; repeat a NAME for its other runs, e.g. seeds, each with hypotheses of its "
        "own: a file or a copy given twice is refused)",
        (str, Folder(exists=True), File(exists=True)), flag=("-s", "--system"), multiple=True,
        nargs=3, metavar="NAME MODEL_DIR HYP")
    folders: tuple[Path, ...] | None = option(
        None, "a results folder of the comparison recipes (models/NAME, hyps/NAME.LANG); each "
        "is one run of every system finished in it (repeat for the seeds)", Folder(exists=True),
        flag=("-f", "--runs-dir"), multiple=True)
    baselines: tuple[str, ...] | None = option(
        None, "system NAME to test the others against with paired bootstrap (repeatable; "
        "default: the first system); tokens/s ratios are to the first baseline", str,
        flag=("-b", "--baseline"), multiple=True)
    ref_from_tokens: bool = option(
        False, "the references are tokenized text (a corpus distributed tokenized, e.g. "
        "small_parallel_enja's test.en): each line becomes the reference prepare wrote for it, "
        "by the runs' target tokenizer")
    tokenize: str | None = option(None, "BLEU tokenizer [default: sacrebleu's default for "
                                  "--lang, else 13a]", Choice(sc.TOKENIZERS))
    lang: str | None = option(None, "target language", str, flag=("-l", "--lang"),
                              metavar="LANG")
    n_samples: int = option(sc.DEFAULT_SAMPLES, "paired bootstrap resamples (0 disables the "
                            "p-values)", COUNT, flag="--bootstrap")
    shuffles: int = option(sig.DEFAULT_SHUFFLES, "approximate randomization shuffles (0 "
                           "disables its p-values)", COUNT)
    seed: int = option(sc.DEFAULT_SEED, "bootstrap and shuffling seed", SEED)
    deltas: tuple[tuple[str, float], ...] | None = option(
        None, "a difference to plan for (repeatable; MEASURE is bleu, chrf or nll, the test "
        "NLL per word; e.g. --delta bleu=0.5 --delta nll=0.01): the power table gives the runs "
        "a side it needs to be found with power 0.8 at two-sided α 0.05, from the pooled "
        "run-to-run sd", str, flag="--delta", multiple=True, metavar="MEASURE=VALUE",
        check=check_deltas)
    prefix: Path | None = option(
        None, "also write OUT.md, OUT.json and OUT.png (every run as a point, means and 95 % "
        "intervals); all three are written in full before any is put in place, OUT.json last",
        File(or_folder=True), flag=("-o", "--output"), metavar="OUT")

    def __post_init__(self):
        check_options(self)
POWER = 0.8                         # of the runs a --delta needs (significance.runs_to_resolve)
SIGNIFICANCE = 0.05                 # of the answer rule (answer)
NO_LIKELIHOOD = "no test likelihood archived"
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
    from depnmt.stages.tokenize import make_tokenizer
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
        check_not_training(name, members)
        check_distinct_models(name, members)
        check_distinct_hypotheses(name, members)
        check_replicates(name, members)
        for run in members:
            check_same_training(run)
    return groups


def check_replicates(name: str, members: Sequence[System]) -> None:
    """Refuse runs of system ``name`` that are no replicates of one system (their
    ``config.json``: :func:`~depnmt.evaluation.runs.replicate_problem`): trained on different
    trees, or two of them with the same seeds on the same trees; the error names them."""
    configs = [read_config(run.model_dir) for run in members]
    problem = replicate_problem([(str(run.model_dir), trees_trained_on(c), replicate_seeds(c))
                                 for run, c in zip(members, configs)])
    if problem:
        raise DepnmtError(f"system {name!r} {problem}")


def check_same_training(run: System) -> None:
    """Refuse a run whose hypotheses were made by an earlier training in its model folder, or
    whose hypotheses or test likelihood are not the files the recipe made: the comparison
    recipes record in ``HYP.settings`` (:attr:`System.settings`) the training they translated
    (``model``: the first 16 hex digits of the SHA-256 of ``manifest.json``) and the digests
    of the hypotheses and the test likelihood they wrote (``hypotheses``, ``likelihood``);
    a folder trained again since holds another ``manifest.json`` (its BLEU and test NLL would
    be the earlier model's beside the later one's log), and a file made again by hand would
    be reported as made with the recorded checkpoint, beam and test set. Runs without the
    record (or a key of it) are not checked on that key."""
    from depnmt.core.textio import read_json
    if not run.settings.is_file():
        return
    options = read_json(run.settings, f"{run.settings}: no such file").get("options")
    options = options if isinstance(options, dict) else {}
    manifest = Path(run.model_dir) / "manifest.json"
    for key, path in (("model", manifest), ("hypotheses", Path(run.hyp)),
                      ("likelihood", run.likelihood)):
        made = options.get(key)
        if made in (None, "", "none") or not path.is_file():
            continue
        now = sha256(path)[:len(made)]
        if now != made:
            raise InputError(run.settings, None, mismatch(run, key, path, made, now))


def mismatch(run: System, key: str, path: Path, made: str, now: str) -> str:
    """What :func:`check_same_training` says when ``path``, recorded as ``key``, changed."""
    if key == "model":
        return (f"its hypotheses {run.hyp} (and test likelihood) were made by the training "
                f"whose manifest.json was {made}, but {path} is now {now}: {run.model_dir} "
                f"was trained again since; translate the test set with it again")
    return (f"records {path} as sha256 {made}…, but it is {now}… now: it was made again or "
            f"changed after the recipe wrote it, so what this record says made it may not "
            f"have; let the recipe make it again (remove the hypotheses, {path.name} and "
            f"this record)")


def check_not_training(name: str, members: Sequence[System]) -> None:
    """Refuse a run of system ``name`` whose model folder a process is training (``-s`` names
    it; ``-f`` skips such runs with a warning): its log, and so its selected checkpoint and
    dev loss, are still changing, and its hypotheses are of an earlier checkpoint."""
    for run in members:
        pid = trainer_pid(Path(run.model_dir))
        if pid is not None:
            raise DepnmtError(f"system {name!r}: {run.model_dir} is being trained (process "
                              f"{pid}): report it when its training has ended")


def check_distinct_models(name: str, members: Sequence[System]) -> None:
    """Refuse two runs of system ``name`` from the same model folder (after resolving links):
    one training counted as two runs, e.g. two decodings of one model, would make its
    run-to-run sd a decoding difference and every interval over runs wrong. The error names
    both."""
    seen: dict[Path, Path] = {}
    for run in members:
        where = Path(run.model_dir).resolve()
        if where in seen:
            raise DepnmtError(f"system {name!r} lists model folder {run.model_dir} for two runs "
                              f"(hypotheses {seen[where]} and {run.hyp}): each run is a training "
                              f"of its own, in a model folder of its own")
        seen[where] = run.hyp


def check_distinct_hypotheses(name: str, members: Sequence[System]) -> None:
    """Refuse two runs of system ``name`` whose hypotheses are the same file (the same path
    after resolving links) or the same bytes (a copy): one run counted twice would shrink the
    sd and every interval. The error names both paths."""
    seen: dict[Path, Path] = {}
    for run in members:
        where = Path(run.hyp).resolve()
        if where in seen:
            raise DepnmtError(f"system {name!r} lists the same hypothesis file twice: "
                              f"{seen[where]} and {run.hyp}")
        seen[where] = run.hyp
    by_content: dict[str, Path] = {}
    for run in members:
        digest = sha256(Path(run.hyp))
        if digest in by_content:
            raise DepnmtError(f"system {name!r}: {by_content[digest]} and {run.hyp} hold the "
                              f"same hypotheses byte for byte (one run copied?); each run "
                              f"needs its own translation")
        by_content[digest] = run.hyp


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
    record["likelihood_runs"] = sum(r.get("nll") is not None for r in runs)
    for key in ("nll", "nll_subword"):  # test likelihood: where every run has it
        record[f"{key}_mean"], record[f"{key}_sd"] = (
            sig.mean_sd([r[key] for r in runs]) if record["likelihood_runs"] == len(runs)
            else (None, None))
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


def run_likelihood(run: System, sentences: int) -> np.ndarray | None:
    """The sentence statistics of ``run``'s test likelihood file (``[sentences, 3]``,
    :func:`depnmt.decoding.likelihood.read_likelihood`), None when the run has none."""
    return lk.read_likelihood(run.likelihood, sentences) if run.likelihood.is_file() else None


def likelihood_fields(run: System, stats: np.ndarray | None) -> dict:
    """A run record's test likelihood: its file and test NLL per word and per subword (None
    each without one)."""
    if stats is None:
        return {"test_likelihood": None, "nll": None, "nll_subword": None}
    return {"test_likelihood": str(run.likelihood), **lk.run_nll(stats)}


def likelihood_comparison(metric, base: dict, other: dict, stats: dict, p_ar: float | None,
                          n_samples: int, seed: int) -> dict | None:
    """:func:`comparison` of ``other`` against ``base`` on the test NLL per word, with
    ``subword``: the difference of the mean NLL per subword and its Welch interval where the two
    systems' segmentations are the same (the same tokens on every sentence of every run; else
    None). The p-values hold for both units: with the same tokens and words on each sentence,
    one is the other scaled. None unless both systems have a test likelihood for every run."""
    a, b = (stats[r["system"]].get("nll") for r in (base, other))
    if a is None or b is None:
        return None
    out = comparison(metric, "nll", base, other, stats, p_ar, n_samples, seed)
    same = all(np.array_equal(run[:, lk.TOKENS], a[0, :, lk.TOKENS]) for run in (*a, *b))
    out["subword"] = asdict(sig.mean_difference([r["nll_subword"] for r in base["runs"]],
                                                [r["nll_subword"] for r in other["runs"]])
                            ) if same else None
    return out


def ar_pvalues(metrics: dict, pairs: Sequence[tuple[str, str]], stats: dict, shuffles: int,
               seed: int) -> dict[tuple[str, str, str], float]:
    """Stratified approximate randomization of every ``(base, other)`` system pair of the same
    number of runs, on every metric of ``metrics`` both have statistics of (test NLL: where
    each has a likelihood for every run), keyed ``(base, other, metric key)``; run together, so
    that each shuffle is drawn once
    (:func:`~depnmt.evaluation.significance.approximate_randomization_tests`).
    """
    if shuffles <= 0:
        return {}
    keys = [(base, other, key) for base, other in pairs for key in metrics
            if key in stats[base] and key in stats[other]
            and stats[base][key].shape == stats[other][key].shape]
    tests = [(metrics[key], stats[base][key], stats[other][key]) for base, other, key in keys]
    return dict(zip(keys, sig.approximate_randomization_tests(tests, shuffles, seed)))


def scored_system(name: str, members: Sequence[System], metrics: dict,
                  refs: Sequence[Sequence[str]], ref_names: Sequence[str]
                  ) -> tuple[dict, dict[str, np.ndarray], list]:
    """One system's record (:func:`system_record`), its sentence statistics per measure
    (``[runs, sentences, …]``; ``nll`` only when every run has a test likelihood) and its
    runs' ``(likelihood file, statistics)`` read."""
    run_records, per_metric, likelihoods = [], {key: [] for key in METRICS}, []
    for run in members:
        hyps = sc.read_scored(run.hyp)
        sc.check_parallel(hyps, refs, str(run.hyp), list(ref_names))
        current = sc.system_stats(metrics, hyps, refs)
        for key in METRICS:
            per_metric[key].append(current.stats[key])
        likelihoods.append(run_likelihood(run, len(hyps)))
        run_records.append({"model_dir": str(run.model_dir), "hyp": str(run.hyp),
                            **training_summary(run.model_dir), **current.scores,
                            **likelihood_fields(run, likelihoods[-1])})
    stats = {key: np.asarray(v, dtype=np.float64) for key, v in per_metric.items()}
    if all(x is not None for x in likelihoods):
        stats["nll"] = np.stack(likelihoods)
    read = [(run.likelihood, x) for run, x in zip(members, likelihoods) if x is not None]
    return system_record(name, run_records), stats, read


def holm_over_families(records: list[dict], baselines: Sequence[str]) -> None:
    """``p_ar_holm`` of every comparison: Holm's adjustment over the family of all systems
    compared with one baseline, per measure."""
    for base in baselines:
        family = [r["vs"][base] for r in records if base in r["vs"]]
        for key in MEASURES:
            tested = [c[key] for c in family if c[key] is not None]
            for c, adjusted in zip(tested, sig.holm([c["p_ar"] for c in tested])):
                c["p_ar_holm"] = adjusted


def results(runs: Sequence[System], refs: Sequence[Sequence[str]], ref_names: Sequence[str],
            baselines: Sequence[str], tokenize: str | None = None, lang: str | None = None,
            n_samples: int = sc.DEFAULT_SAMPLES, seed: int = sc.DEFAULT_SEED,
            shuffles: int = sig.DEFAULT_SHUFFLES) -> list[dict]:
    """One record per system (:func:`system_record`), with ``vs[<baseline>][<metric>]`` for every
    baseline other than itself (:func:`comparison`; ``vs[<baseline>]["nll"]``: the test NLL's,
    :func:`likelihood_comparison`, None unless both systems have a test likelihood for every
    run) and ``tok_s_ratio`` to the first baseline. Every run's record has its test NLL per
    word and per subword (``nll``, ``nll_subword``; None without a likelihood file)."""
    groups = group_runs(runs)
    missing = [b for b in baselines if b not in groups]
    if missing:
        raise DepnmtError(f"baseline {missing[0]!r} is not one of the systems ({', '.join(groups)})")
    metrics = sc.make_metrics(list(METRICS), tokenize=tokenize, lang=lang)
    sc.check_bleu_tokenizer(metrics, refs[0], ref_names[0], tokenize, lang)
    measures = {**metrics, "nll": lk.PerUnitNLL()}
    stats: dict[str, dict[str, np.ndarray]] = {}
    records, read = [], []
    for name, members in groups.items():
        record, stats[name], found = scored_system(name, members, metrics, refs, ref_names)
        records.append(record)
        read += found
    lk.check_same_words(read)
    by_name = {r["system"]: r for r in records}
    pairs = [(base, r["system"]) for r in records for base in baselines if base != r["system"]]
    p_ar = ar_pvalues(measures, pairs, stats, shuffles, seed)
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
            record["vs"][base]["nll"] = likelihood_comparison(
                measures["nll"], by_name[base], record, stats,
                p_ar.get((base, record["system"], "nll")), n_samples, seed)
    holm_over_families(records, baselines)
    base_speed = by_name[baselines[0]]["tgt_tokens_per_s_mean"] if baselines else None
    signatures = {key: sc.signature(metric) for key, metric in metrics.items()}
    tests = {"shuffles": shuffles, "bootstrap": n_samples, "seed": seed}   # the p-values'
    for record in records:
        record["signatures"] = signatures            # e.g. BLEU's tok:ja-mecab-… for Japanese
        record["tests"] = tests
        speed = record["tgt_tokens_per_s_mean"]
        record["tok_s_ratio"] = speed / base_speed if base_speed and speed else None
    return records


def noise(records: Sequence[dict], target: float = 0.5,
          deltas: dict[str, float] | None = None) -> dict | None:
    """Run-to-run noise over the systems with ≥ 2 runs, per measure of :data:`MEASURES`: the
    pooled sd, its degrees of freedom and the systems pooled, ``runs`` (the most common run
    count), the difference that many runs a side can resolve at 95 % and, for BLEU and chrF,
    the runs a side an observed ``target`` points would need to be significant; for a measure
    of ``deltas`` (``{measure: difference}``) the runs a side that difference needs at power
    :data:`POWER` (:func:`depnmt.evaluation.significance.runs_to_resolve`). The test NLL pools the
    systems with a likelihood for every run (None for it when there is none). None when no
    system has two runs."""
    replicated = [r for r in records if r["n_runs"] > 1]
    if not replicated:
        return None
    counts = [r["n_runs"] for r in replicated]
    runs = max(set(counts), key=lambda n: (counts.count(n), n))
    out: dict = {"systems": len(replicated), "runs": runs, "target": target}
    for key in MEASURES:
        groups = [[run[key] for run in r["runs"]] for r in replicated
                  if all(run.get(key) is not None for run in r["runs"])]
        sd, df = sig.pooled_sd(groups)
        if sd is None:
            out[key] = None
            continue
        out[key] = {"sd": sd, "df": df, "systems": len(groups),
                    "resolvable": sig.resolvable_difference(sd, runs)}
        if key in METRICS:
            out[key]["runs_for_target"] = sig.runs_to_resolve(sd, target)
        if deltas and key in deltas:
            out[key]["delta"] = deltas[key]
            out[key]["runs_for_delta"] = sig.runs_to_resolve(sd, deltas[key], power=POWER)
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


MEASURE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "nll": "test NLL/word"}
DIGITS = {"bleu": 2, "chrf": 2, "nll": 4}       # decimals shown (NLL's sd is ~0.01 nats/word)


def power_table(n: dict | None, deltas: dict[str, float]) -> list[str]:
    """:func:`noise` (computed with ``deltas``) per measure, as Markdown lines after a blank
    one: the pooled sd, its df and systems, the difference the present runs resolve, and for
    each measure of ``deltas`` the runs a side it needs at power :data:`POWER`."""
    if n is None:
        return ["", "Power: no system has two runs, so the run-to-run sd (and the runs a "
                    "difference needs) is unknown."]
    head = ["measure", "pooled sd", "df", "systems", f"± resolved by {n['runs']} runs a side"]
    if deltas:
        head += ["Δ asked", f"runs a side for Δ (power {POWER:g})"]
    rows = []
    for key in MEASURES:
        m, d = n[key], DIGITS[key]
        cells = ([f"{m['sd']:.{d}f}", str(m["df"]), str(m["systems"]), f"±{m['resolvable']:.{d}f}"]
                 if m else [NO_LIKELIHOOD + " for a system with ≥ 2 runs", "-", "-", "-"])
        if deltas:
            need = m.get("runs_for_delta") if m else None
            cells += ["-", "-"] if key not in deltas else [
                f"{deltas[key]:g}", "-" if not m else str(need) if need else "> 1,000"]
        rows.append([MEASURE_NAMES[key], *cells])
    return ["", *_table(head, rows, 1), "",
            "Power: the run-to-run sd pooled over the systems with ≥ 2 runs (test NLL: those "
            "with a test likelihood for every run); ± resolved: the half-width of the 95 % "
            "interval of a difference with that many runs a side, t(0.975, 2N − 2) · sd · "
            "√(2/N); runs a side for Δ (`--delta MEASURE=VALUE`): the fewest n with "
            f"(t(0.975, 2n − 2) + t({POWER:g}, 2n − 2)) · sd · √(2/n) ≤ Δ, the two-sample "
            "sample-size formula with t quantiles (Cohen 1988): a true difference Δ is then "
            f"found at two-sided α {SIGNIFICANCE:g} with probability {POWER:g}."]


def answer(comparison: dict, resolvable: float | None, runs: int | None,
           lower_is_better: bool = False, digits: int = 2) -> str:
    """Whether a system beats its baseline, by the results page's rule, from a comparison
    (``difference``, Welch's ``low``/``high``, Holm-adjusted AR ``p_ar_holm``): **yes** when the
    difference goes the better way (up; down for ``lower_is_better``, e.g. NLL), its interval
    excludes 0 and p < :data:`SIGNIFICANCE`; **likely** when only AR says so; **no** when
    significant the other way; else **not shown**, with the difference that ``runs`` runs a
    side resolve (``resolvable``, shown with ``digits`` decimals)."""
    sign = -1 if lower_is_better else 1
    gain, p = sign * comparison["difference"], comparison.get("p_ar_holm")
    bound = comparison["high" if lower_is_better else "low"]
    significant = p is not None and p < SIGNIFICANCE
    if gain > 0 and significant and bound is not None and sign * bound > 0:
        return "**yes**"
    if gain > 0 and significant:
        return "**likely**, not established (the interval includes 0)"
    if significant:
        return "**no**: significantly the other way"
    return "**not shown**" + (f" (only differences beyond ±{resolvable:.{digits}f} are resolved "
                              f"by {runs} runs a side)" if resolvable is not None else "")


def likelihood_tables(records: Sequence[dict], spread: dict | None) -> list[str]:
    """The systems' test NLL (mean ± sd over runs, each run's) and every system against every
    baseline on it (Δ with Welch's interval, p-values, :func:`answer`), as Markdown lines after
    a blank one; a system or comparison without a likelihood for every run says so. None when
    no run has a test likelihood. ``spread``: :func:`noise`, for the answers' resolution."""
    if not any(r["likelihood_runs"] for r in records):
        return []
    rows = [[r["system"], str(r["n_runs"]), *_likelihood_cells(r)] for r in records]
    lines = ["", *_table(["system", "runs", "test NLL/word", "test NLL/subword",
                          "NLL/word of each run"], rows, 2), "",
             "Test NLL: −log p(reference | source) under each run's selected checkpoint (forced "
             "decoding, `depnmt rescore`; the file HYP.ref-logprob beside the run's hypotheses), "
             "summed over the test set and divided by the references' words (comparable across "
             "segmentations) or by their target subwords and end-of-sentence tokens (only "
             "comparable between systems with the same segmentation); mean ± sd over runs; "
             "lower is better."]
    by_name = {r["system"]: r for r in records}
    nll = spread.get("nll") if spread else None
    rows = []
    for r in records:
        for base, by_metric in r["vs"].items():
            c = by_metric["nll"]
            if c is None:
                lacking = [name for name in (r["system"], base)
                           if by_name[name]["likelihood_runs"] < by_name[name]["n_runs"]]
                rows.append([r["system"], base, f"{NO_LIKELIHOOD} ({', '.join(lacking)})",
                             *["-"] * 5])
                continue
            rows.append([r["system"], base, _difference(c, 4), _num(c["p_ar"], ".4f"),
                         _num(c.get("p_ar_holm"), ".4f"), _num(c["p_bootstrap"], ".4f"),
                         _difference(c["subword"], 4) if c["subword"] else "segmentations differ",
                         answer(c, nll and nll["resolvable"], spread and spread["runs"],
                                lower_is_better=True, digits=4)])
    if rows:
        lines += ["", *_table(["system", "vs", "Δ NLL/word [95 % CI]", "p AR", "Holm", "p boot",
                               "Δ NLL/subword [95 % CI]", "lower NLL?"], rows, 2), "",
                  "Δ: the system's mean test NLL minus the baseline's (negative: the system gives "
                  "the references a higher probability), Welch's 95 % interval over runs; p AR, "
                  "Holm and p boot as for BLEU, on every sentence's (−log p, words) summed over "
                  "the runs (the same p-values hold per subword); lower NLL?: **yes** — negative, "
                  f"the interval excludes 0 and the Holm-adjusted AR p < {SIGNIFICANCE:g}; "
                  "**likely** — AR alone; **no** — significantly higher; otherwise **not shown**."]
    return lines


def _likelihood_cells(record: dict) -> list[str]:
    """A system's cells of the test NLL table: mean ± sd per word and per subword and each run's
    per word, or that some of its runs have no test likelihood."""
    have, runs = record["likelihood_runs"], record["n_runs"]
    if have < runs:
        return [NO_LIKELIHOOD + (f" for {runs - have} of {runs} runs" if have else ""), "-", "-"]
    return [_mean_sd(record, "nll", ".4f"), _mean_sd(record, "nll_subword", ".4f"),
            ", ".join(f"{run['nll']:.4f}" for run in record["runs"])]


def _difference(c: dict, digits: int = 2) -> str:
    """A difference of means and its 95 % interval when there is one: ``+1.20 [+0.10, +2.30]``."""
    ci = f" [{c['low']:+.{digits}f}, {c['high']:+.{digits}f}]" if c["low"] is not None else ""
    return f"{c['difference']:+.{digits}f}{ci}"


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _mean_sd(record: dict, key: str, fmt: str = ".2f") -> str:
    mean, sd = record[f"{key}_mean"], record[f"{key}_sd"]
    return f"{mean:{fmt}}" + (f" ± {sd:{fmt}}" if sd is not None else "")


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


def change_notes(records: Sequence[dict]) -> list[str]:
    """A note for each run resumed on other data on purpose (``train
    --resume-on-changed-data``: its log's ``data_changed`` records) and for each resumed with
    other settings (``settings_changed``: ``--warmup``, ``--max-steps``, ...), as Markdown
    lines after a blank one; none when every run trained on one set of data with one set of
    settings."""
    lines = []
    for key, title in (("data_changed", "Runs whose training data changed while they trained "
                                        "(resumed with `--resume-on-changed-data`):"),
                       ("settings_changed", "Runs whose settings changed while they trained "
                                            "(resumed with other flags; each: the value it "
                                            "trained with, not the new one):")):
        notes = [f"- {r['system']}, {run['model_dir']}: at update {change['step']}: "
                 + "; ".join(change["changed"])
                 for r in records for run in r["runs"] for change in run.get(key, [])]
        lines += ["", title, *notes] if notes else []
    return lines


def markdown(records: Sequence[dict], baselines: Sequence[str],
             deltas: dict[str, float] | None = None) -> str:
    """Two tables: the systems (mean ± sd over runs, every run's BLEU, the selected
    checkpoints), then every system against every baseline (Δ mean [95 % interval], p-values);
    below them the noise, the test likelihood's tables where a run has one
    (:func:`likelihood_tables`), the power table (:func:`power_table`; where a run has a test
    likelihood or ``deltas`` (``{measure: difference}``) are asked) and, for DBSA systems, the
    dev UAS (:func:`uas_table`)."""
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
                cells += [_difference(c), _num(c["p_ar"], ".4f"),
                          _num(c.get("p_ar_holm"), ".4f"), _num(c["p_bootstrap"], ".4f")]
            rows.append(cells)
    if rows:
        lines += _table(head, rows, 2)
        lines += ["", "Δ: difference of the mean scores, Welch's 95 % interval over runs; p AR: "
                  "approximate randomization stratified over runs (Clark et al. 2011, MultEval; "
                  "two-sided); Holm: p AR adjusted for testing every system against the same "
                  "baseline (Holm 1979); p boot: paired bootstrap on the pooled runs (Koehn "
                  "2004; one-sided)."]
    spread = noise(records, deltas=deltas)
    if spread:
        lines += ["", noise_sentence(spread)]
    lines += likelihood_tables(records, spread)
    if deltas or any(r["likelihood_runs"] for r in records):
        lines += power_table(spread, deltas or {})
    lines += uas_table(records)
    lines += change_notes(records)
    lines += footnotes(records, compared=bool(rows))
    return "\n".join(lines) + "\n"


def footnotes(records: Sequence[dict], compared: bool) -> list[str]:
    """What the numbers of :func:`markdown` need to be made again: the p-values' shuffles,
    bootstrap resamples and seed (when systems were ``compared``), and sacreBLEU's
    signatures; Markdown lines, each after a blank one."""
    lines: list[str] = []
    if records and records[0].get("tests") and compared:
        t = records[0]["tests"]
        lines += ["", f"p-values: {t['shuffles']:,} shuffles, {t['bootstrap']:,} bootstrap "
                  f"resamples, seed {t['seed']} (`--shuffles`, `--bootstrap`, `--seed`: the "
                  f"same give the same p-values)."]
    if records and records[0].get("signatures"):
        names = {"bleu": "BLEU", "chrf": "chrF"}
        lines += ["", "sacreBLEU signatures: " + "; ".join(
            f"{names[key]} `{text}`" for key, text in records[0]["signatures"].items())]
    return lines


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
