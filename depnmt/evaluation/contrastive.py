"""Contrastive evaluation: does a model prefer a correct translation to a minimally wrong one?

A contrastive set (Sennrich 2017, LingEval97; Müller et al. 2018, ContraPro) is a list of
items: a source sentence, its reference translation, one or more contrastive variants (the
reference with one error put in: a determiner of the wrong gender, a verb of the wrong number,
a negation dropped) and a category. A model scores every translation of an item by forced
decoding (:mod:`depnmt.decoding.forced`: ``log p(Y | x)`` summed over subwords and end of sentence,
or
with ``normalized`` that divided by the length penalty), and decides the item correctly when
the reference scores strictly higher than every variant. Accuracy is reported overall and per
category with a 95 % Wilson score interval (over the effective number of items where items
share a source sentence: :mod:`depnmt.evaluation.clustered`); with several models (e.g. seeds),
also their mean ± sd and a paired test of each model's decisions against the first model's
(McNemar's exact test, or a sign-flip permutation test over sentences where items share them).
Each item's *margin* — the reference's score minus the best variant's (:func:`item_margins`;
> 0 where the item is decided correctly) — is kept too: a measure that still tells models
apart where both decide nearly every item correctly.

Formats read (:func:`read_set`):

- ``tsv``: ``source TAB reference TAB contrastive [TAB category [TAB linear_distance TAB
  tree_distance]]``, one variant a line, each line an item (category ``all`` when the column
  is absent); an optional first line of those column names is skipped. The distances (whole
  numbers ≥ 1, as ``depnmt minimal-pairs`` writes them: :mod:`depnmt.evaluation.minimalpairs`) add
  tables per distance bucket (:mod:`depnmt.evaluation.contrastivestats`, which builds on this
  module).
- ``lingeval97``: LingEval97's ``lingeval97.json``, a list of ``{"source", "reference",
  "errors": [{"type", "contrastive", ...}]}``; each error is an item of category ``type``, as
  its ``evaluate.py`` counts them.
- ``contrapro``: ContraPro's ``contrapro.json`` with the text its ``json2text_and_context.pl``
  extracts (``contrapro.text.en``, ``contrapro.text.de``: per entry the source and reference
  line, then one line per error, its contrastive translation); each entry is an item with all
  its variants, of category ``src pronoun:ref pronoun`` in lower case, as its ``evaluate.py``
  decides them. Sentence-level: the context files are not read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.optionspec import Choice, File, check_options, option
from depnmt.core.textio import iter_lines
from depnmt.decoding.settings import scoring_batch_option
from depnmt.evaluation.clustered import SIGN_FLIPS, design_effect, paired_p, sentence_ids
from depnmt.evaluation.clustered import mcnemar_exact  # noqa: F401  (where it was)
from depnmt.evaluation.significance import mean_sd

FORMATS = ("tsv", "lingeval97", "contrapro")
TSV_HEADER = ("source", "reference", "contrastive", "category", "linear_distance",
              "tree_distance")
Z95 = 1.959963984540054
PAIRED_TESTS = {"mcnemar": "Exact McNemar test of each model's decisions against ",
                "sign-flip": f"Sign-flip permutation test over source sentences (a sentence's "
                             f"items together, {SIGN_FLIPS:,} draws) of each model's decisions "
                             f"against "}


@dataclass
class Item:
    """One decision: ``reference`` against every one of ``variants``, given ``source``;
    ``where`` names it in errors (file:line or file:entry)."""

    source: str
    reference: str
    variants: list[str]
    category: str
    where: str = ""
    linear: int | None = None       # tokens between the two words in conflict (tsv, optional)
    tree: int | None = None         # dependency arcs between them


FORMATS = ("auto", "tsv", "lingeval97", "contrapro")


@dataclass
class ContrastiveSettings:
    """The options of ``depnmt contrastive`` (:func:`read_set`, :func:`evaluate`; the models and
    the hardware options are translate's), each a field (:func:`~depnmt.core.optionspec.option`)."""

    ensemble: bool = option(False, "score with the -m models as one ensemble (as translate -m A "
                            "-m B decodes: they must share vocabularies, BPE and tokenizers) "
                            "instead of each alone")
    checkpoint: str | None = option(None, "checkpoint name in each MODEL/checkpoints  [default: "
                                    "best, else last]", str, flag=("-c", "--checkpoint"),
                                    metavar="NAME")
    fmt: str = option("auto", "auto: contrapro for a .json SET with --src/--tgt, lingeval97 for "
                      "another .json SET, else tsv", Choice(FORMATS), flag="--format")
    src_path: Path | None = option(None, "contrapro: the source text (contrapro.text.en)", File(),
                                   flag="--src")
    tgt_path: Path | None = option(None, "contrapro: the target text (contrapro.text.de)", File(),
                                   flag="--tgt")
    normalized: bool = option(False, "compare length-normalised scores (logprob / lp(tokens), "
                              "the model's length penalty) instead of log-probabilities")
    output_path: Path | None = option(None, "also write the accuracies, intervals, p-values and "
                                      "every decision as JSON (all or nothing)", File(),
                                      flag=("-o", "--output"))
    max_tokens: int | None = scoring_batch_option()
    compare_paths: tuple[Path, ...] = option((), "compare systems instead of scoring: two or more "
                                             "result files of -o on SET (each a system, its "
                                             "models the system's runs), the first the baseline",
                                             File(), flag="--compare", multiple=True,
                                             metavar="RESULT")

    def __post_init__(self):
        check_options(self)

    def set_format(self, set_path: Path) -> str:
        """The format SET is read in: ``fmt``, or for ``auto`` contrapro for a .json SET with
        --src/--tgt, lingeval97 for another .json SET, else tsv; a DepnmtError when --src or
        --tgt is given for another format."""
        fmt = self.fmt
        if fmt == "auto":
            fmt = "tsv" if set_path.suffix != ".json" else (
                "contrapro" if self.src_path or self.tgt_path else "lingeval97")
        if (self.src_path or self.tgt_path) and fmt != "contrapro":
            raise DepnmtError("--src and --tgt are for --format contrapro")
        return fmt

    def check_scoring(self, model_dirs: Sequence[Path]) -> None:
        """A DepnmtError when ``model_dirs`` (-m) and these options do not make a scoring:
        a checkpoint that is no name, a model given twice, an ensemble of one."""
        if self.checkpoint and "/" in self.checkpoint:
            raise DepnmtError(f"--checkpoint {self.checkpoint}: give a checkpoint name that "
                              f"each model folder has (best, last, stepN, an average's name)")
        seen: dict[Path, Path] = {}
        for model_dir in map(Path, model_dirs):     # also under two spellings (a link, ../x)
            where = model_dir.resolve()
            if where in seen:
                raise DepnmtError(f"a model is given twice (-m {seen[where]} and -m "
                                  f"{model_dir}, one folder): each run is a training of its own")
            seen[where] = model_dir
        if self.ensemble and len(model_dirs) < 2:
            raise DepnmtError("--ensemble scores with several models as one: give -m two or "
                              "more times")


def check_distinct_runs(checkpoints: Sequence[Sequence[Path]]) -> None:
    """Refuse two scorings (each a model, or an ensemble's models) of the same checkpoint
    files, e.g. every -m given one --checkpoint file: one training counted as two runs would
    shrink the sd and make the paired tests and ``--compare``'s p-values too small. The error
    names the checkpoint."""
    seen: set[tuple[Path, ...]] = set()
    for files in checkpoints:
        key = tuple(Path(f).resolve() for f in files)
        if key in seen:
            raise DepnmtError(f"two -m models would score with the same checkpoint "
                              f"{', '.join(map(str, files))}: give --checkpoint a name each "
                              f"model folder has (best, last, an average's name)")
        seen.add(key)


def read_set(path: Path, fmt: str, src: Path | None = None, tgt: Path | None = None
             ) -> list[Item]:
    """The items of a contrastive set in format ``fmt`` (``src``/``tgt``: ContraPro's text)."""
    if fmt == "tsv":
        return read_tsv(path)
    if fmt == "lingeval97":
        return read_lingeval97(path)
    if fmt == "contrapro":
        if src is None or tgt is None:
            raise DepnmtError("contrapro: give the text its json2text_and_context.pl extracts "
                              "with --src contrapro.text.en --tgt contrapro.text.de")
        return read_contrapro(path, src, tgt)
    raise DepnmtError(f"contrastive set format {fmt!r}: choose one of {', '.join(FORMATS)}")


def read_tsv(path: Path) -> list[Item]:
    items = []
    for n, line in enumerate(iter_lines(path), start=1):
        cols = line.split("\t")
        if n == 1 and tuple(cols) == TSV_HEADER[:len(cols)] and len(cols) >= 3:
            continue
        if len(cols) not in (3, 4, 6) or not all(c.strip() for c in cols):
            raise InputError(path, n, "expected source TAB reference TAB contrastive "
                                      "[TAB category [TAB linear_distance TAB tree_distance]], "
                                      "none of them empty")
        items.append(Item(cols[0], cols[1], [cols[2]], cols[3] if len(cols) >= 4 else "all",
                          f"{path}:{n}", *(distance(path, n, c) for c in cols[4:])))
    return items


def distance(path: Path, n: int, text: str) -> int:
    """A distance column of line ``n``: a whole number ≥ 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise InputError(path, n, f"distance {text!r}: expected a whole number ≥ 1")
    return int(text)


def load_json_list(path: Path) -> list:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DepnmtError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, list):
        raise DepnmtError(f"{path}: expected a JSON list of entries")
    return data


def text_field(path: Path, i: int, entry, key: str) -> str:
    """``entry[key]``, a non-empty string, else an error naming the entry."""
    value = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise DepnmtError(f"{path}: entry {i}: expected a non-empty string {key!r}")
    return value


def errors_of(path: Path, i: int, entry) -> list:
    errors = entry.get("errors") if isinstance(entry, dict) else None
    if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
        raise DepnmtError(f"{path}: entry {i}: expected a list of errors (objects)")
    return errors


def read_lingeval97(path: Path) -> list[Item]:
    items = []
    for i, entry in enumerate(load_json_list(path), start=1):    # 1-based, as a reader counts
        source = text_field(path, i, entry, "source")
        reference = text_field(path, i, entry, "reference")
        for error in errors_of(path, i, entry):
            items.append(Item(source, reference, [text_field(path, i, error, "contrastive")],
                              text_field(path, i, error, "type"), f"{path}: entry {i}"))
    return items


def read_contrapro(path: Path, src: Path, tgt: Path) -> list[Item]:
    entries = load_json_list(path)
    sources, targets = list(iter_lines(src)), list(iter_lines(tgt))
    wanted = sum(1 + len(errors_of(path, i, e)) for i, e in enumerate(entries, start=1))
    for name, lines in ((src, sources), (tgt, targets)):
        if len(lines) != wanted:
            raise DepnmtError(f"{name}: {len(lines)} lines, but {path}'s {len(entries)} entries "
                              f"and their errors make {wanted} (one line for each entry, then "
                              f"one for each of its errors, as json2text_and_context.pl writes)")
    items, at = [], 0
    for i, entry in enumerate(entries, start=1):
        pronouns = [text_field(path, i, entry, k).lower() for k in ("src pronoun", "ref pronoun")]
        k = len(entry["errors"])
        items.append(Item(sources[at], targets[at], targets[at + 1: at + 1 + k],
                          ":".join(pronouns), f"{src}:{at + 1}"))
        at += 1 + k
    return items


# -- decisions and statistics --------------------------------------------------------------

def score_items(items: Sequence[Item], scorer, normalized: bool = False) -> list[bool]:
    """Whether ``scorer`` (a :class:`~depnmt.decoding.forced.ForcedScorer`) gives each item's
    reference a higher score than every variant (its :func:`item_margins` > 0)."""
    return [margin > 0 for margin in item_margins(items, scorer, normalized)]


def item_margins(items: Sequence[Item], scorer, normalized: bool = False) -> list[float]:
    """Each item's *margin*: the score ``scorer`` (a
    :class:`~depnmt.decoding.forced.ForcedScorer`) gives its reference minus the highest it
    gives a variant — log p(reference | source) − max over variants of log p(variant |
    source), in nats (``normalized``: of the length-normalised scores). The item is decided
    correctly when it is > 0. Each (source, translation) pair is scored once."""
    pairs = scored_pairs(items)
    empty = next((it for it in items if not it.source.strip()), None)
    if empty is not None:
        raise DepnmtError(f"{empty.where}: empty source: there is nothing to score against")
    try:
        results = scorer.score_lines([s for s, _ in pairs], [t for _, t in pairs])
    except InputError as exc:     # a source the parser makes no tree of: pair number exc.line
        source = pairs[exc.line - 1][0]
        where = next(it.where for it in items if it.source == source)
        raise DepnmtError(f"{where}: {exc.message}") from None
    value = {pair: (r.score if normalized else r.logprob) for pair, r in zip(pairs, results)}
    return [value[it.source, it.reference] - max(value[it.source, v] for v in it.variants)
            for it in items]


def scored_pairs(items: Sequence[Item]) -> list[tuple[str, str]]:
    """The distinct (source, translation) pairs of ``items``, in order: what a model scores."""
    return list(dict.fromkeys((it.source, t) for it in items
                              for t in [it.reference, *it.variants]))


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``correct / total`` (95 % by default)."""
    if total == 0:
        return (math.nan, math.nan)
    p = correct / total
    denom = 1 + z * z / total
    center = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


@dataclass
class Accuracy:
    """``correct`` of ``total`` items; ``design_effect`` (≥ 1) of their grouping into sentences
    (:func:`~depnmt.evaluation.clustered.design_effect`), which the interval accounts for."""

    correct: int
    total: int
    design_effect: float = 1.0

    @property
    def value(self) -> float:
        return self.correct / self.total if self.total else math.nan

    def interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval over the effective number of items, ``total /
        design_effect`` (the plain Wilson interval where every item is its own sentence)."""
        return wilson(self.correct / self.design_effect, self.total / self.design_effect)

    def to_dict(self) -> dict:
        low, high = self.interval()
        return {"correct": self.correct, "total": self.total, "accuracy": self.value,
                "ci95": [low, high], "design_effect": round(self.design_effect, 4)}

    def cell(self) -> str:
        """``accuracy % [95 % interval]``, as the tables write it."""
        low, high = self.interval()
        return f"{100 * self.value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def item_sentences(items: Sequence[Item]) -> list[int]:
    """Each item's source sentence as an index (items of one source share it;
    :func:`~depnmt.evaluation.clustered.sentence_ids`): the unit of the intervals and tests,
    since a sentence's items are not independent of each other."""
    return sentence_ids([it.source for it in items])


def accuracy_of(decisions: Sequence[bool], sentence: Sequence[int],
                mask: Sequence[bool] | None = None) -> Accuracy:
    """The :class:`Accuracy` of the ``decisions`` in ``mask`` (all: None), their design effect
    over the items' ``sentence`` ids."""
    keep = [i for i in range(len(decisions)) if mask is None or mask[i]]
    picked = [decisions[i] for i in keep]
    return Accuracy(sum(picked), len(picked),
                    design_effect(picked, [sentence[i] for i in keep]))


@dataclass
class Evaluation:
    """Every model's decisions on one contrastive set."""

    items: list[Item]
    decisions: dict[str, list[bool]] = field(default_factory=dict)   # model name -> per item
    margins: dict[str, list[float]] = field(default_factory=dict)    # (:func:`item_margins`)

    def categories(self) -> list[str]:
        return sorted({it.category for it in self.items})

    @cached_property
    def sentences(self) -> list[int]:
        """Each item's sentence (:func:`item_sentences`)."""
        return item_sentences(self.items)

    def accuracy(self, model: str, category: str | None = None) -> Accuracy:
        mask = None if category is None else [it.category == category for it in self.items]
        return accuracy_of(self.decisions[model], self.sentences, mask)

    def paired(self, model: str) -> tuple[str, float]:
        """``model``'s decisions against the first model's
        (:func:`~depnmt.evaluation.clustered.paired_p`): the test's name and p."""
        first = self.decisions[next(iter(self.decisions))]
        return paired_p(first, self.decisions[model], self.sentences)

    def to_dict(self) -> dict:
        models = list(self.decisions)
        out = {"items": len(self.items), "categories": self.categories(), "models": {}}
        for m in models:
            out["models"][m] = {
                "all": self.accuracy(m).to_dict(),
                "by_category": {c: self.accuracy(m, c).to_dict() for c in self.categories()},
                "decisions": [int(d) for d in self.decisions[m]]}
            if m in self.margins:
                out["models"][m]["margins"] = list(self.margins[m])
            if m != models[0]:
                test, p = self.paired(m)
                out["models"][m].update({"test_vs_first": test, "p_vs_first": p},
                                        **({"mcnemar_p_vs_first": p} if test == "mcnemar"
                                           else {}))
        return out

    def markdown(self) -> str:
        """A table: a row per category and one for all, a column per model (accuracy %, 95 %
        interval), and with several models their mean ± sd; then the McNemar p-values."""
        models = list(self.decisions)
        head = ["category", "items", *models]
        if len(models) > 1:
            head.append("mean ± sd")
        rows = []
        for category in [*self.categories(), None]:
            accs = [self.accuracy(m, category) for m in models]
            cells = [category or "**all**", str(accs[0].total)]
            cells += [a.cell() for a in accs]
            if len(models) > 1:
                mean, sd = mean_sd([100 * a.value for a in accs])
                cells.append(f"{mean:.1f} ± {sd:.1f}" if sd is not None else f"{mean:.1f}")
            rows.append(cells)
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        text = "\n".join(lines) + "\n"
        if len(models) > 1:
            tests = {m: self.paired(m) for m in models[1:]}
            kind = next(iter(tests.values()))[0]
            text += "\n" + (PAIRED_TESTS[kind] + models[0] + ": " + "; ".join(
                f"{m} p = {p:.3g}" for m, (_, p) in tests.items()) + "\n")
        if len(set(self.sentences)) < len(self.items):
            text += ("\nIntervals: Wilson's over the effective number of items (items / the "
                     "design effect of their grouping into source sentences).\n")
        return text


def evaluate(items: Sequence[Item], scorers: Iterable[tuple[str, object]],
             normalized: bool = False) -> Evaluation:
    """Every (name, :class:`~depnmt.decoding.forced.ForcedScorer`)'s decisions on ``items``."""
    if not items:
        raise DepnmtError("the contrastive set has no items")
    evaluation = Evaluation(list(items))
    for name, scorer in scorers:
        margins = item_margins(evaluation.items, scorer, normalized)
        evaluation.margins[name] = margins
        evaluation.decisions[name] = [margin > 0 for margin in margins]
    return evaluation
