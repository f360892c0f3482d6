"""Corpus scoring with sacrebleu: BLEU, chrF, TER, paired bootstrap and source-length buckets.

Scores are exactly sacrebleu's: every metric extracts sacrebleu's per-sentence sufficient
statistics once per system and aggregates them the way ``Metric.corpus_score`` does, so a corpus
score here is bit-for-bit ``sacrebleu.metrics.BLEU(...).corpus_score(hyps, refs).score``. The same
statistics are reused for the bootstrap resamples and the length buckets.

References follow sacrebleu's convention: ``refs`` is a list of reference *streams*, each a list
of lines parallel to the hypotheses (``[ref_a_lines, ref_b_lines]`` for two references).

Paired bootstrap resampling (Koehn 2004)
    ``n_samples`` test sets are drawn with replacement from the sentence indices (seeded numpy
    generator); baseline and system are scored on the *same* resamples from their summed
    sentence statistics. With ``Δ = score(system) − score(baseline)`` on the full test set, the
    p-value is the share of resamples in which the system is *not* better than the baseline in
    the observed direction, smoothed as ``(c + 1) / (n_samples + 1)`` like sacrebleu (so it is
    never 0): ``c = #{resamples with Δ* ≤ 0}`` when ``Δ > 0`` and ``#{Δ* ≥ 0}`` when ``Δ < 0``.
    Identical scores (``Δ = 0``) give ``p = 1``. This is Koehn's "system 1 is better in X % of the
    samples" (``p ≈ 1 − X``), a one-sided test in the direction of the observed difference.
    (sacrebleu's ``PairedTest`` reads its seed from ``$SACREBLEU_SEED``, re-extracts every
    statistic and returns p ≈ 0.001 for two identical systems, hence this implementation.)

Source-length buckets
    A sentence's length is the number of whitespace-separated tokens of its *source* line; a
    Japanese or Chinese source without spaces between words is refused
    (:func:`check_bucket_source`): pass it tokenized. ``bounds = (0, 20, 30, 40, 50)``
    make the half-open buckets [0, 20), [20, 30), [30, 40), [40, 50), [50, ∞), labelled
    ``0-19``, ``20-29``, ``30-39``, ``40-49`` and ``50+``: 20 words fall in ``20-29``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.log import warn
from depnmt.core.optionspec import COUNT, SEED, Choice, File, IntRange, check_options, option
from depnmt.core.textio import read_lines

METRICS = ("bleu", "chrf", "ter")
BOOTSTRAP_METRICS = ("bleu", "chrf")  # TER's p-value is not reported (slow and rarely asked for)
TOKENIZERS = tuple(BLEU.TOKENIZERS)
DEFAULT_TOKENIZE = "13a"
DEFAULT_BUCKETS = (0, 20, 30, 40, 50)
DEFAULT_SEED = 12345
DEFAULT_SAMPLES = 1000


@dataclass
class ScoreSettings:
    """The options of ``depnmt score``, each a field (:func:`~depnmt.core.optionspec.option`)."""

    refs: tuple[str, ...] | None = option(
        None, "Reference file, one sentence per line; repeat for several references.",
        File(text=True), flag=("-r", "--ref"), multiple=True, required=True)
    tokenize: str | None = option(None, "BLEU tokenizer [default: sacrebleu's default for "
                                  "--lang, else 13a].", Choice(TOKENIZERS))
    lang: str | None = option(None, "Target language; picks sacrebleu's default BLEU tokenizer "
                              "(ja-mecab for ja, zh for zh) unless --tokenize is given.", str,
                              flag=("-l", "--lang"), metavar="LANG")
    metric_names: str = option(",".join(METRICS), "Comma-separated metrics to compute (TER is "
                               "the slow one).", str, flag="--metrics", show_default=True)
    chrf_word_order: int = option(0, "chrF word n-gram order (2 = chrF++).", IntRange(0, 9),
                                  show_default=True)
    n_samples: int = option(DEFAULT_SAMPLES, "Paired bootstrap resamples of each system vs the "
                            "first (0 disables).", COUNT, flag="--bootstrap", show_default=True)
    seed: int = option(DEFAULT_SEED, "Random seed of the bootstrap resampling.", SEED,
                       show_default=True)
    src: str | None = option(None, "Source file: also report BLEU by source length "
                             "(whitespace-separated words; Japanese or Chinese tokenized).",
                             File(text=True))
    buckets: str = option(",".join(map(str, DEFAULT_BUCKETS)), "Lower bounds of the "
                          "source-length buckets; half-open, so the default gives 0-19, 20-29, "
                          "30-39, 40-49 and 50+ words.", str, show_default=True)
    bucket_plot: str | None = option(None, "Write a PNG of Δ-BLEU per bucket of each system vs "
                                     "the first (needs --src).", File(text=True))
    as_json: bool = option(False, "One JSON object per hypothesis per line on stdout instead "
                           "of tables.", flag="--json")

    def __post_init__(self):
        check_options(self)
# Resamples are drawn in chunks so that a chunk's weight matrix stays below ~4M cells.
_CHUNK_CELLS = 4_000_000
# Han ideographs and kana (full and half width): the scripts Japanese and Chinese write without
# spaces between words
UNSPACED_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
# characters of those scripts per space-separated token above which text is taken as running
# text, not segmented into words (segmented Japanese: about 1.5; running text: about 30)
SEGMENTED_MAX = 4.0
BOM = "\ufeff"


# ------------------------------------------------------------------------------------ inputs

def read_scored(path: str | Path) -> list[str]:
    """The lines of a reference, hypothesis or source file to score (:func:`~depnmt.core.textio.
    read_lines`), without the byte order mark (U+FEFF) that some editors put at a file's start:
    it is no text, but sacreBLEU would count it as a part of the first word (a warning names
    the file)."""
    lines = read_lines(path)
    if lines and lines[0].startswith(BOM):
        warn(f"{path}: begins with a byte order mark (U+FEFF); it is left out of the text "
             f"scored")
        lines[0] = lines[0][len(BOM):]
    return lines


def unsegmented(lines: Sequence[str]) -> bool:
    """Whether ``lines`` are Japanese or Chinese written without spaces between words: at
    least half of their characters (spaces aside) are Han or kana (:data:`UNSPACED_SCRIPT`),
    and a space-separated token holding such characters holds more than
    :data:`SEGMENTED_MAX` of them on average."""
    script = sum(len(UNSPACED_SCRIPT.findall(line)) for line in lines)
    if not script or 2 * script < sum(len("".join(line.split())) for line in lines):
        return False
    tokens = sum(1 for line in lines for token in line.split() if UNSPACED_SCRIPT.search(token))
    return script > SEGMENTED_MAX * tokens


def check_bleu_tokenizer(metrics: dict[str, Metric], refs: Sequence[str], ref_name: str,
                         tokenize: str | None, lang: str | None) -> None:
    """An :class:`InputError` naming the reference file ``ref_name`` when BLEU would split
    Japanese or Chinese running text (:func:`unsegmented` ``refs``) with its default tokenizer
    (13a: neither ``tokenize`` given nor a ``lang`` sacreBLEU has another tokenizer for),
    which splits only at spaces and punctuation: the score would count whole clauses as
    words. A tokenizer given by name is used as given."""
    bleu = metrics.get("bleu")
    if bleu is None or tokenize is not None or bleu.tokenizer.signature() != DEFAULT_TOKENIZE:
        return
    if unsegmented(refs):
        raise InputError(ref_name, None, "the references are Japanese or Chinese without "
                                         "spaces between words, which BLEU's default tokenizer "
                                         "(13a) splits only at punctuation, so the score would "
                                         "be meaningless: give --lang ja or --lang zh "
                                         "(sacreBLEU's tokenizer for the language), or "
                                         "--tokenize (e.g. char)")


# --------------------------------------------------------------------------------------- metrics

def make_metrics(names: Sequence[str] = METRICS, tokenize: str | None = None,
                 lang: str | None = None, chrf_word_order: int = 0) -> dict[str, Metric]:
    """sacrebleu metric objects by name (``bleu``, ``chrf``, ``ter``).

    BLEU's tokenizer is ``tokenize`` if given, else sacrebleu's default for the target language
    ``lang`` (``ja-mecab`` for ja, ``zh`` for zh, ...), else ``13a``. chrF is chrF2 with character
    order 6 and word order ``chrf_word_order`` (2 = chrF++); TER uses sacrebleu's defaults.
    """
    unknown = [name for name in names if name not in METRICS]
    if not names:
        raise DepnmtError(f"no metric given (choose from {', '.join(METRICS)})")
    if unknown:
        raise DepnmtError(f"unknown metric {unknown[0]!r} (choose from {', '.join(METRICS)})")
    if tokenize is not None and tokenize not in TOKENIZERS:
        raise DepnmtError(f"unknown tokenizer {tokenize!r} (choose from {', '.join(TOKENIZERS)})")
    if tokenize is None and not lang:
        tokenize = DEFAULT_TOKENIZE
    factories = {
        "bleu": lambda: BLEU(tokenize=tokenize, trg_lang=lang or ""),
        "chrf": lambda: CHRF(word_order=chrf_word_order),
        "ter": lambda: TER(),
    }
    try:
        return {name: factories[name]() for name in names}
    except (RuntimeError, ImportError, OSError) as exc:
        reason = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        which = repr(tokenize) if tokenize else f"default for language {lang!r}"
        raise DepnmtError(f"sacrebleu cannot set up the BLEU tokenizer ({which}): {reason} "
                          f"(install 'sacrebleu[ja]' / 'sacrebleu[ko]', or pick another "
                          f"--tokenize, e.g. char)") from exc


def signature(metric: Metric) -> str:
    """sacrebleu signature of a metric that has scored something (``nrefs:1|...|tok:13a|...``)."""
    return metric.get_signature().format()


@dataclass
class SystemStats:
    """One system's per-sentence sufficient statistics and corpus score, for every metric."""

    stats: dict[str, list] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)


def check_parallel(hyps: Sequence[str], refs: Sequence[Sequence[str]], hyp_name: str = "hypothesis",
                   ref_names: Sequence[str] | None = None) -> None:
    """Raise :class:`DepnmtError` if ``hyps`` is empty or a stream in ``refs`` differs in length."""
    if not hyps:
        raise DepnmtError(f"{hyp_name}: no lines to score")
    names = ref_names or [f"reference {i + 1}" for i in range(len(refs))]
    for ref, ref_name in zip(refs, names):
        if len(ref) != len(hyps):
            raise DepnmtError(f"{hyp_name} has {len(hyps)} lines but {ref_name} has {len(ref)} "
                              f"lines; they must be parallel")


def check_scorable(hyps: Sequence[str], refs: Sequence[Sequence[str]], hyp_name: str) -> None:
    """API-side input check: at least one reference stream, all parallel to ``hyps``."""
    if not refs:
        raise DepnmtError("no reference given")
    check_parallel(hyps, refs, hyp_name)


def system_stats(metrics: dict[str, Metric], hyps: Sequence[str], refs: Sequence[Sequence[str]]
                 ) -> SystemStats:
    """Extract sentence statistics once per metric and aggregate them like ``corpus_score``."""
    result = SystemStats()
    for key, metric in metrics.items():
        stats = metric._extract_corpus_statistics(hyps, refs)
        result.stats[key] = stats
        result.scores[key] = metric._aggregate_and_compute(stats).score
    return result


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], tokenize: str | None = "13a",
                  metrics: Sequence[str] = METRICS, lang: str | None = None,
                  chrf_word_order: int = 0) -> dict:
    """Corpus BLEU / chrF / TER of ``hyps`` against reference streams ``refs``.

    Returns ``{"bleu": float, "chrf": float, "ter": float, "signature": {"bleu": str, ...}}``
    restricted to ``metrics`` (pass ``metrics=("bleu",)`` for a cheap validation score; TER is the
    slow one). ``tokenize=None`` with ``lang`` picks sacrebleu's default tokenizer for ``lang``;
    without ``lang``, Japanese or Chinese running text is refused (:func:`check_bleu_tokenizer`).
    """
    check_scorable(hyps, refs, "hypothesis")
    objs = make_metrics(metrics, tokenize=tokenize, lang=lang, chrf_word_order=chrf_word_order)
    check_bleu_tokenizer(objs, refs[0], "reference 1", tokenize, lang)
    result: dict = dict(system_stats(objs, hyps, refs).scores)
    result["signature"] = {key: signature(metric) for key, metric in objs.items()}
    return result


# ----------------------------------------------------------------------------- paired bootstrap

def resample_weights(n_items: int, n_samples: int, seed: int) -> Iterator[np.ndarray]:
    """Bootstrap resamples as count matrices, in chunks of shape ``(chunk, n_items)``.

    Row ``r`` says how often each sentence was drawn in resample ``r``; the same ``seed`` yields
    the same resamples, which is what pairs the baseline with every system.
    """
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_samples, _CHUNK_CELLS // max(n_items, 1)))
    for start in range(0, n_samples, chunk):
        rows = min(chunk, n_samples - start)
        draws = rng.integers(0, n_items, size=(rows, n_items))
        flat = (draws + (np.arange(rows) * n_items)[:, None]).ravel()
        yield np.bincount(flat, minlength=rows * n_items).reshape(rows, n_items).astype(np.float64)


def bootstrap_scores(metric: Metric, stats: list, n_samples: int, seed: int) -> np.ndarray:
    """The metric on each of ``n_samples`` resamples, from summed sentence statistics."""
    matrix = np.asarray(stats, dtype=np.float64)
    chunks = resample_weights(len(matrix), n_samples, seed)
    sums = np.vstack([weights @ matrix for weights in chunks])
    return np.array([metric._compute_score_from_stats(row.tolist()).score for row in sums])


def bootstrap_p_value(observed: float, deltas: np.ndarray) -> float:
    """One-sided p-value of an observed difference given resampled differences (module doc)."""
    if observed == 0:
        return 1.0
    not_better = int(np.sum(deltas * np.sign(observed) <= 0))
    return (not_better + 1) / (len(deltas) + 1)


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], refs: Sequence[Sequence[str]],
                     tokenize: str | None = "13a", metrics: Sequence[str] = BOOTSTRAP_METRICS,
                     n_samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
                     lang: str | None = None, chrf_word_order: int = 0) -> dict[str, float]:
    """Koehn (2004) paired bootstrap of ``system`` against ``baseline``: ``{metric: p_value}``."""
    check_scorable(baseline, refs, "baseline")
    check_scorable(system, refs, "system")
    objs = make_metrics(metrics, tokenize=tokenize, lang=lang, chrf_word_order=chrf_word_order)
    base = system_stats(objs, baseline, refs)
    other = system_stats(objs, system, refs)
    return {key: compare(metric, base, other, key, n_samples, seed)
            for key, metric in objs.items()}


def compare(metric: Metric, base: SystemStats, other: SystemStats, key: str, n_samples: int,
            seed: int, base_samples: np.ndarray | None = None) -> float:
    """p-value of ``other`` vs ``base`` on metric ``key`` (``base_samples`` caches the baseline).

    The test only looks at the direction of the observed difference, so it also holds for TER
    (where lower is better).
    """
    if base_samples is None:
        base_samples = bootstrap_scores(metric, base.stats[key], n_samples, seed)
    deltas = bootstrap_scores(metric, other.stats[key], n_samples, seed) - base_samples
    return bootstrap_p_value(other.scores[key] - base.scores[key], deltas)


# -------------------------------------------------------------------------- source-length buckets

def parse_buckets(text: str) -> tuple[int, ...]:
    """``"0,20,30,40,50"`` -> ``(0, 20, 30, 40, 50)``: lower bounds, from 0, strictly increasing."""
    try:
        bounds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DepnmtError(f"--buckets {text!r}: expected comma-separated integers, e.g. "
                          f"0,20,30,40,50") from None
    if bounds[0] != 0 or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise DepnmtError(f"--buckets {text!r}: bounds must start at 0 and strictly increase")
    return bounds


def bucket_labels(bounds: Sequence[int]) -> list[str]:
    """Inclusive word ranges of the half-open buckets: ``0-19``, ..., ``50+``."""
    labels = [f"{lo}-{hi - 1}" if hi - 1 > lo else str(lo) for lo, hi in zip(bounds, bounds[1:])]
    return labels + [f"{bounds[-1]}+"]


def check_bucket_source(src_lines: Sequence[str], src_name: str) -> None:
    """An :class:`InputError` naming the source file ``src_name`` when its lines are Japanese
    or Chinese without spaces between words (:func:`unsegmented`): the buckets count a line's
    whitespace-separated words, which would be whole clauses there, so nearly every sentence
    would fall into the first bucket."""
    if unsegmented(src_lines):
        raise InputError(src_name, None, "the source is Japanese or Chinese without spaces "
                                         "between words, so its sentences' lengths in words "
                                         "cannot be counted: give the tokenized source (e.g. "
                                         "the prepare folder's test.LANG) as --src")


def assign_buckets(src_lines: Sequence[str], bounds: Sequence[int] = DEFAULT_BUCKETS) -> np.ndarray:
    """Bucket index of each source line by its number of whitespace-separated words."""
    lengths = np.array([len(line.split()) for line in src_lines], dtype=np.int64)
    return np.searchsorted(np.asarray(bounds), lengths, side="right") - 1


def bucket_bleu(bleu: Metric, stats: list, buckets: np.ndarray, bounds: Sequence[int]
                ) -> list[dict]:
    """``{"bucket": label, "sentences": n, "bleu": corpus BLEU or None if empty}`` per bucket."""
    rows = []
    for index, label in enumerate(bucket_labels(bounds)):
        members = [stats[i] for i in np.flatnonzero(buckets == index)]
        score = bleu._aggregate_and_compute(members).score if members else None
        rows.append({"bucket": label, "sentences": len(members), "bleu": score})
    return rows


# ------------------------------------------------------------------------------ several systems

def evaluate(systems: Iterable[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
             metrics: dict[str, Metric], n_samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
             buckets: np.ndarray | None = None, bounds: Sequence[int] = DEFAULT_BUCKETS
             ) -> list[dict]:
    """Score ``(name, hypothesis lines)`` pairs; the first is the paired bootstrap's baseline.

    One record per system: ``hyp``, a score per metric, ``signature`` (metric -> sacrebleu
    signature), ``p_<metric>`` for BLEU/chrF of every system but the first (when
    ``n_samples > 0``) and, when ``buckets`` (from :func:`assign_buckets`) is given, ``buckets``
    (see :func:`bucket_bleu`).
    """
    records: list[dict] = []
    base: SystemStats | None = None
    base_samples: dict[str, np.ndarray] = {}  # the baseline's resampled scores, computed once
    for name, hyps in systems:
        current = system_stats(metrics, hyps, refs)
        record: dict = {"hyp": name, **current.scores,
                        "signature": {key: signature(metric) for key, metric in metrics.items()}}
        if base is None:
            base = current
        elif n_samples > 0:
            for key in (k for k in BOOTSTRAP_METRICS if k in metrics):
                if key not in base_samples:
                    base_samples[key] = bootstrap_scores(metrics[key], base.stats[key], n_samples,
                                                         seed)
                record[f"p_{key}"] = compare(metrics[key], base, current, key, n_samples, seed,
                                             base_samples[key])
        if buckets is not None and "bleu" in metrics:
            record["buckets"] = bucket_bleu(metrics["bleu"], current.stats["bleu"], buckets, bounds)
        records.append(record)
    return records
