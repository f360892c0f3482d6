"""The ``prepare`` stage: parallel text in, normalised + tokenized train/dev/test out.

For each split, every pair of lines is normalised and tokenized (see :mod:`depnmt.stages.tokenize`)
and
written to ``OUT/{split}.{lang}`` (tokens joined by single spaces) and ``OUT/{split}.raw.{lang}``
(the normalised untokenized text of the same pair, used as BLEU reference; for the ``keep``
tokenizer, which has no untokenized text, it is the detokenized tokens). ``OUT/manifest.json``
records inputs, options, tokenizer configs and per-split line counts.

Rules, in order:

* The two files of a split must have the same number of lines, or nothing is written.
* ``first``: only the first N pairs of the training files are used.
* Held-out splits: when dev (or test) files are not given, they are cut deterministically from
  the *end* of the (first N) training pairs: the last ``test_size`` pairs become test, the
  ``dev_size`` pairs before them become dev, the rest stays train.
* Filters (train only, unless ``filter_eval``) drop a pair from both sides together when either
  side has no tokens (``empty``), fewer than ``min_len`` tokens (``too_short``) or more than
  ``max_len`` tokens (``too_long``; 0 = no limit). Every dropped pair is counted in the manifest.
  Unfiltered splits keep every line, empty ones included, so they stay aligned with the input.
* ``langid_filter`` (``src`` or ``both``; filtered splits only) drops a pair whose source (or
  either side) py3langid does not identify as its language (``wrong_language``;
  :mod:`depnmt.stages.langid`), the GPS paper's WMT16 filter after Bugliarello and Okazaki (2020).
* ``max_pairs``: training stops at the first N pairs that pass the filters (Omote et al.'s
  Table 3: "the first 100,000 sentence pairs of 50 words or less"); ``first`` instead limits the
  pairs read, before filtering.
* Overlap (nothing is dropped for it): the manifest's ``overlap`` counts, for dev and test,
  the non-empty source lines that are also a source line of an earlier split as written
  (train; for test, dev too), and how many of them are the whole pair, with a warning when
  any is (:func:`split_overlap`): a test sentence the model was trained on scores memory.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from itertools import chain, islice
from pathlib import Path
from typing import Iterator

from depnmt.core.errors import DepnmtError, UsageError
from depnmt.core.log import info, track, warn
from depnmt.core.manifest import write_manifest
from depnmt.core.optionspec import (COUNT, POSITIVE, Choice, File, Folder, check_options,
                                    jobs_option, option)
from depnmt.core.stagedir import check_distinct, stage_output
from depnmt.core.textio import atomic_open, count_lines, iter_lines
from depnmt.core.workers import InProcess, Workers, blocks, worker_pool
from depnmt.stages.corpora import CORPORA
from depnmt.stages.tokenize import KINDS, Tokenizer, default_kind, make_tokenizer

SPLITS = ("train", "dev", "test")
SIDES = ("src", "tgt")
DROP_REASONS = ("empty", "too_short", "too_long", "wrong_language")
LANGID_SIDES = ("none", "src", "both")


@dataclass
class Settings:
    """The options of one ``prepare`` run (recorded as the manifest's ``options``; each field
    an option of ``depnmt prepare``, :func:`~depnmt.core.optionspec.option`). ``src_lang`` and
    ``tgt_lang`` are needed (the command fills them in from a named corpus)."""

    src_lang: str | None = option(None, "Source language code, e.g. en, de, ja (with --corpus: "
                                  "chooses the direction; default: the corpus's usual "
                                  "direction).", str, metavar="LANG")
    tgt_lang: str | None = option(None, "Target language code.", str, metavar="LANG")
    lowercase: bool = option(False, "Lowercase both sides (tokens and references).")
    first: int | None = option(None, "Use only the first N training pairs (e.g. ASPEC's first "
                               "1,500,000), before filtering and before holding out dev/test.",
                               POSITIVE, metavar="N")
    min_len: int = option(1, "Drop training pairs where either side has fewer than N tokens (1: "
                          "drop pairs with an empty side; 0: keep them).", COUNT,
                          show_default=True, metavar="N")
    max_len: int = option(0, "Drop training pairs where either side has more than N tokens (0: "
                          "no limit).", COUNT, show_default=True, metavar="N")
    filter_eval: bool = option(False, "Also apply --min-len/--max-len to dev and test. By "
                               "default they keep every line, so scores stay comparable with "
                               "other work.", flag="--filter-eval/--no-filter-eval",
                               show_default=True)
    dev_size: int = option(1000, "Without dev files: hold out N pairs for dev.", COUNT,
                           show_default=True, metavar="N")
    test_size: int = option(1000, "Without test files: hold out the last N pairs for test.",
                            COUNT, show_default=True, metavar="N")
    corpus: str | None = option(None, "A named corpus, found in $DEPNMT_DATA_DIR, a shared/data "
                                "folder nearby or downloaded: " + "; ".join(
                                    f"{c.name}: {c.description}" for c in CORPORA.values())
                                + ".", Choice(sorted(CORPORA)))
    langid_filter: str = option("none", "Drop training pairs whose source (src) or either side "
                                "(both) an offline language identifier (py3langid; pip install "
                                "'depnmt[langid]') does not place in --src-lang/--tgt-lang: the "
                                "GPS paper's WMT16 filter. Counted as wrong_language in the "
                                "manifest; dev/test only with --filter-eval.",
                                Choice(LANGID_SIDES), show_default=True)
    max_pairs: int | None = option(None, "Keep only the first N training pairs that pass the "
                                   "filters (Omote et al.'s ablation: the first 100,000 pairs of "
                                   "≤ 50 words); --first limits the pairs read, before "
                                   "filtering.", POSITIVE, metavar="N")
    held_out: dict[str, int] = field(default_factory=dict)  # filled in by plan_splits

    def __post_init__(self):
        check_options(self)

    def check(self) -> None:
        """A :class:`~depnmt.core.errors.UsageError` for settings that do not go together."""
        if self.max_len and self.min_len > self.max_len:
            raise UsageError(f"--min-len {self.min_len} is above --max-len {self.max_len}: "
                             f"every pair would be dropped")


@dataclass
class Sources:
    """Where one ``prepare`` run reads and writes, how it tokenizes and in how many processes:
    the other options of ``depnmt prepare`` (the manifest records the files as its ``inputs``
    and the tokenizers as ``tokenizers``; not ``jobs``)."""

    train_src: Path | None = option(None, "Training source file (plain text or .gz, one sentence "
                                    "per line).", File(exists=True))
    train_tgt: Path | None = option(None, "Training target file, line-aligned with --train-src.",
                                    File(exists=True))
    dev_src: Path | None = option(None, "Development source file (default: held out from the "
                                  "end of the training files, see --dev-size).", File(exists=True))
    dev_tgt: Path | None = option(None, "Development target file.", File(exists=True))
    test_src: Path | None = option(None, "Test source file (default: held out from the end of "
                                   "the training files, see --test-size).", File(exists=True))
    test_tgt: Path | None = option(None, "Test target file.", File(exists=True))
    tokenizer_src: str = option("auto", "moses: sacremoses (English, German, ...); sudachi: "
                                "Japanese segmentation as used by the GiNZA parser; keep: input "
                                "is already tokenized, split on spaces; auto: the corpus's "
                                "choice, else sudachi for ja and moses otherwise.",
                                Choice(("auto",) + KINDS), show_default=True)
    tokenizer_tgt: str = option("auto", "Same for the target side.", Choice(("auto",) + KINDS),
                                show_default=True)
    jobs: int = jobs_option("Tokenize and filter")
    out_dir: Path | None = option(None, "Output folder, written all or nothing: it appears (or "
                                  "replaces a previous `depnmt prepare` output) when the run "
                                  "completes; one run at a time.", Folder(),
                                  flag=("-o", "--output"), required=True, metavar="OUT_DIR")

    def __post_init__(self):
        check_options(self)

    def files(self) -> dict[str, tuple[Path, Path]]:
        """``{split: (src, tgt)}`` of the splits given; both sides or neither, and train
        with any other (a :class:`~depnmt.core.errors.UsageError` otherwise)."""
        files = {}
        for split in SPLITS:
            pair = (getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt"))
            given = [f"--{split}-{side}" for side, path in zip(SIDES, pair) if path]
            if len(given) == 1:
                missing = f"--{split}-{'tgt' if given[0].endswith('src') else 'src'}"
                raise UsageError(f"{given[0]} needs {missing} too (a split has two sides)")
            if given:
                files[split] = pair
        if files and "train" not in files:
            raise UsageError("--dev-*/--test-* files need --train-src and --train-tgt too")
        return files


@dataclass
class SplitSource:
    """Where one output split comes from: lines ``[start, stop)`` of two parallel files."""

    name: str
    src: Path
    tgt: Path
    start: int
    stop: int
    filtered: bool

    @property
    def size(self) -> int:
        return self.stop - self.start


# a language code as file names take it: ISO 639 letters, optionally a region or script
# subtag (en, de, ja, pt-BR, zh_Hant); nothing that could be a path
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*")


def check_language_code(lang: str, option: str) -> None:
    """``lang`` is a language code that output file names can carry (``{split}.{lang}``); a
    :class:`DepnmtError` naming ``option`` otherwise."""
    if not LANGUAGE_CODE.fullmatch(lang):
        raise DepnmtError(f"{option} {lang!r} is not a language code (letters, e.g. en, de, ja, "
                          f"optionally a subtag: pt-BR); it becomes part of file names")


def make_side_tokenizer(kind: str, lang: str, lowercase: bool,
                        corpus_default: str | None = None) -> Tokenizer:
    """The tokenizer for one side: ``kind`` ``auto`` means the corpus's default, else by language
    (``sudachi`` for Japanese, ``moses`` otherwise)."""
    if kind == "auto":
        kind = corpus_default or default_kind(lang)
    return make_tokenizer({"kind": kind, "lang": lang, "lowercase": lowercase})


def resolve_langs(corpus_langs: tuple[str, str], src: str | None,
                  tgt: str | None) -> tuple[str, str]:
    """Fill in missing languages of a named corpus: its default direction, or the other side."""
    if not src and not tgt:
        return corpus_langs
    other = {corpus_langs[0]: corpus_langs[1], corpus_langs[1]: corpus_langs[0]}
    return src or other.get(tgt, tgt), tgt or other.get(src, src)


def resolve_inputs(settings: Settings, sources: Sources
                   ) -> tuple[Settings, dict[str, tuple[Path, Path]], tuple[Tokenizer, Tokenizer],
                              dict[str, str]]:
    """What :func:`prepare` takes for ``settings`` and ``sources`` (``depnmt prepare``'s
    options): the settings with a named corpus's languages filled in, ``{split: (src, tgt)}``,
    the two tokenizers and the manifest's extra inputs (the corpus's name). A
    :class:`~depnmt.core.errors.UsageError` for options that do not go together."""
    from depnmt.stages.corpora import corpus_files, get_corpus
    settings.check()
    files = sources.files()
    inputs_extra, corpus_tokenizer = {}, None
    if settings.corpus:
        if files:
            raise UsageError("give either --corpus or --train-src/--train-tgt, not both")
        spec = get_corpus(settings.corpus)
        src_lang, tgt_lang = resolve_langs(spec.langs, settings.src_lang, settings.tgt_lang)
        settings = replace(settings, src_lang=src_lang, tgt_lang=tgt_lang)
        files = corpus_files(spec, src_lang, tgt_lang)
        inputs_extra, corpus_tokenizer = {"corpus": settings.corpus}, spec.tokenizer
    elif not files:
        raise UsageError("give a corpus: --corpus NAME, or --train-src F --train-tgt F")
    elif not (settings.src_lang and settings.tgt_lang):
        raise UsageError("--src-lang and --tgt-lang are required with your own files")
    tokenizers = tuple(make_side_tokenizer(kind, lang, settings.lowercase, corpus_tokenizer)
                       for kind, lang in ((sources.tokenizer_src, settings.src_lang),
                                          (sources.tokenizer_tgt, settings.tgt_lang)))
    return settings, files, tokenizers, inputs_extra


def check_parallel(src: Path, tgt: Path) -> int:
    """The common line count of two parallel files; a :class:`DepnmtError` naming both otherwise."""
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise DepnmtError(f"parallel files differ in length: {src} has {n_src} lines but {tgt} "
                          f"has {n_tgt}")
    return n_src


def plan_splits(files: dict[str, tuple[Path, Path]], settings: Settings) -> list[SplitSource]:
    """Decide which lines of which files make up train, dev and test (see the module docstring).

    ``files`` must contain ``train`` and may contain ``dev`` and ``test``; the missing ones are
    held out from the end of train and recorded in ``settings.held_out``.
    """
    train_src, train_tgt = files["train"]
    n_train = check_parallel(train_src, train_tgt)
    if settings.first is not None:
        if settings.first > n_train:
            warn(f"{train_src}: --first {settings.first}, but the training files have only "
                 f"{n_train} pairs; all of them are read")
        n_train = min(n_train, settings.first)
    held = {split: size for split, size in (("dev", settings.dev_size),
                                            ("test", settings.test_size)) if split not in files}
    if held and sum(held.values()) >= n_train:
        sizes = " + ".join(f"{size} {split}" for split, size in held.items())
        raise DepnmtError(f"{train_src}: {n_train} training pairs are too few to hold out {sizes} "
                          f"pairs; give dev/test files or smaller --dev-size/--test-size")
    settings.held_out = held
    stop = n_train - sum(held.values())
    sources = [SplitSource("train", train_src, train_tgt, 0, stop, filtered=True)]
    for split in ("dev", "test"):
        if split in files:
            src, tgt = files[split]
            sources.append(SplitSource(split, src, tgt, 0, check_parallel(src, tgt),
                                       filtered=settings.filter_eval))
        else:
            sources.append(SplitSource(split, train_src, train_tgt, stop, stop + held[split],
                                       filtered=settings.filter_eval))
            stop += held[split]
    return sources


def iter_pairs(source: SplitSource) -> Iterator[tuple[str, str]]:
    """The raw line pairs of ``source``."""
    pairs = zip(iter_lines(source.src), iter_lines(source.tgt))
    return islice(pairs, source.start, source.stop)


def drop_reason(src_tokens: list[str], tgt_tokens: list[str], min_len: int,
                max_len: int) -> str | None:
    """Why a tokenized pair is filtered out (one of :data:`DROP_REASONS`); ``None``: keep it."""
    shortest = min(len(src_tokens), len(tgt_tokens))
    if shortest == 0 and min_len > 0:
        return "empty"
    if shortest < min_len:
        return "too_short"
    if max_len and max(len(src_tokens), len(tgt_tokens)) > max_len:
        return "too_long"
    return None


def wrong_language(src_raw: str, tgt_raw: str, settings: Settings) -> bool:
    """Whether py3langid places the source (``langid_filter`` src) or either side (both) of a
    pair in another language than the split's."""
    from depnmt.stages.langid import identify
    if settings.langid_filter == "none":
        return False
    if identify(src_raw) != settings.src_lang:
        return True
    return settings.langid_filter == "both" and identify(tgt_raw) != settings.tgt_lang


def output_names(split: str, src_lang: str, tgt_lang: str) -> list[str]:
    """The four files written for ``split``: tokenized src, tgt, then raw src, tgt."""
    return [f"{split}.{src_lang}", f"{split}.{tgt_lang}",
            f"{split}.raw.{src_lang}", f"{split}.raw.{tgt_lang}"]


def tokenized_pairs(state: tuple[tuple[Tokenizer, Tokenizer], Settings],
                    block: tuple[bool, list[tuple[str, str]]]) -> list[tuple[str | None, tuple]]:
    """Tokenize a block of raw pairs (``(filtered, pairs)``) and decide which are dropped:
    per pair ``(drop reason or None, (src, tgt, src raw, tgt raw), an empty side?)``. What
    ``--jobs N`` runs in its worker processes (``state``: the tokenizers and settings)."""
    (tok_src, tok_tgt), settings = state
    filtered, pairs = block
    out = []
    for src_line, tgt_line in pairs:
        src_raw, src_toks = tok_src.process(src_line)
        tgt_raw, tgt_toks = tok_tgt.process(tgt_line)
        reason = filtered and drop_reason(src_toks, tgt_toks, settings.min_len, settings.max_len)
        if filtered and not reason and wrong_language(src_raw, tgt_raw, settings):
            reason = "wrong_language"
        out.append((reason or None, (" ".join(src_toks), " ".join(tgt_toks), src_raw, tgt_raw),
                    not (src_toks and tgt_toks)))
    return out


def process_split(source: SplitSource, out_dir: Path, pool: InProcess | Workers,
                  settings: Settings) -> dict:
    """Tokenize, filter and write one split (blocks of pairs tokenized by ``pool``); return
    its counts for the manifest."""
    names = output_names(source.name, settings.src_lang, settings.tgt_lang)
    dropped = dict.fromkeys(DROP_REASONS, 0)
    kept = empty_kept = read = 0
    limit = settings.max_pairs if source.name == "train" else None
    done = pool.map(tokenized_pairs, ((source.filtered, block)
                                      for block in blocks(iter_pairs(source))))
    with ExitStack() as stack:
        outs = [stack.enter_context(atomic_open(out_dir / name)) for name in names]
        stack.callback(done.close)              # stops the workers' blocks still in flight
        pairs = track(chain.from_iterable(done), f"{source.name}: tokenizing", total=source.size)
        for reason, texts, empty_side in pairs:
            if limit is not None and kept >= limit:
                break
            read += 1
            if reason:
                dropped[reason] += 1
                continue
            kept += 1
            empty_kept += empty_side
            for out, text in zip(outs, texts):
                out.write(text + "\n")
    report_split(source, read, kept, dropped, empty_kept)
    if limit is not None and kept < limit:
        warn(f"{source.name}: only {kept} pairs passed the filters, fewer than --max-pairs "
             f"{limit} (read more with a larger --first, or a larger input)")
    return {"read": read, "kept": kept, "dropped": dropped}


def report_split(source: SplitSource, read: int, kept: int, dropped: dict[str, int],
                 empty_kept: int) -> None:
    """One info line per split, and warnings for surprising outcomes."""
    drops = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in dropped.items() if n)
    info(f"{source.name}: {kept} of {read} pairs kept"
         + (f" (dropped: {drops})" if drops else ""))
    if empty_kept:
        warn(f"{source.name}: {empty_kept} kept pairs have an empty side (from {source.src} / "
             f"{source.tgt}); they are kept so the lines stay aligned with the input")
    if kept == 0 and read:
        warn(f"{source.name}: every pair was filtered out; check --min-len/--max-len"
             + (" and --langid-filter" if dropped["wrong_language"] else ""))


OVERLAP_AGAINST = {"dev": ("train",), "test": ("train", "dev")}   # split: earlier splits


def split_overlap(out_dir: Path, src_lang: str, tgt_lang: str) -> dict[str, dict]:
    """How much of dev and test the splits before them hold, as written into ``out_dir``
    (tokenized, after the filters): ``{split: {earlier: {"sentences": n, "source": n, "pair":
    n}}}`` for each earlier split of :data:`OVERLAP_AGAINST`: of the split's ``sentences``
    non-empty source lines, ``source`` are a source line of ``earlier`` too, ``pair`` are with
    their target line one pair of it. Each earlier split is read once, line by line; only dev's
    and test's pairs are held in memory."""
    def pairs(split: str) -> Iterator[tuple[str, str]]:
        return zip(*(iter_lines(out_dir / name)
                     for name in output_names(split, src_lang, tgt_lang)[:2]))

    held = {split: [pair for pair in pairs(split) if pair[0]] for split in OVERLAP_AGAINST}
    sources = {src for kept in held.values() for src, _ in kept}
    wanted = {pair for kept in held.values() for pair in kept}
    overlap: dict[str, dict] = {split: {} for split in OVERLAP_AGAINST}
    for earlier in dict.fromkeys(e for against in OVERLAP_AGAINST.values() for e in against):
        found_sources, found_pairs = set(), set()      # at most dev's and test's sizes
        for pair in pairs(earlier):
            if pair[0] in sources:
                found_sources.add(pair[0])
                if pair in wanted:
                    found_pairs.add(pair)
        for split, against in OVERLAP_AGAINST.items():
            if earlier in against:
                overlap[split][earlier] = {
                    "sentences": len(held[split]),
                    "source": sum(src in found_sources for src, _ in held[split]),
                    "pair": sum(pair in found_pairs for pair in held[split])}
    return overlap


def report_overlap(overlap: dict[str, dict]) -> None:
    """A warning for each split whose sources an earlier split holds (:func:`split_overlap`)."""
    why = {"train": "the model is trained on them", "dev": "they choose its checkpoint"}
    for split, against in overlap.items():
        for earlier, counts in against.items():
            if counts["source"]:
                warn(f"{split}: {counts['source']} of its {counts['sentences']} sentences have "
                     f"their source in {earlier} too ({counts['pair']} the whole pair): "
                     f"{why[earlier]}, so scores on them may measure memory; counted in the "
                     f"manifest (overlap)")


def prepare(out_dir: str | Path, files: dict[str, tuple[Path, Path]], settings: Settings,
            tokenizers: tuple[Tokenizer, Tokenizer], inputs_extra: dict | None = None,
            jobs: int = 1) -> dict:
    """Run the whole stage into ``out_dir`` (all or nothing, one writer:
    :func:`~depnmt.core.stagedir.stage_output`) and return the manifest that was written.
    ``jobs`` > 1 tokenizes in that many processes (:mod:`depnmt.core.workers`; the tokenizers
    travel there as their ``config()``), with the same output; it is not recorded."""
    out_dir = Path(out_dir)
    for option, lang in (("--src-lang", settings.src_lang), ("--tgt-lang", settings.tgt_lang)):
        check_language_code(lang, option)
    check_distinct(out_dir, {f"--{split}-{side} file": path for split, pair in files.items()
                             for side, path in zip(("src", "tgt"), pair)})
    if settings.src_lang == settings.tgt_lang:
        raise DepnmtError(f"source and target language are both '{settings.src_lang}'; output "
                          f"file names would collide")
    if settings.langid_filter not in LANGID_SIDES:
        raise DepnmtError(f"unknown --langid-filter '{settings.langid_filter}' (choose from "
                          f"{', '.join(LANGID_SIDES)})")
    extra = {}
    if settings.langid_filter != "none":
        from depnmt.stages import langid
        for lang in (settings.src_lang, settings.tgt_lang)[:1 + (settings.langid_filter == "both")]:
            langid.check_language(lang)
        extra["langid"] = langid.version()
    sources = plan_splits(files, settings)
    outputs = [name for split in SPLITS
               for name in output_names(split, settings.src_lang, settings.tgt_lang)]
    with stage_output(out_dir, "prepare", owns=set(outputs).__contains__) as tmp, \
            worker_pool(jobs, (tokenizers, settings)) as pool:
        counts = {s.name: process_split(s, tmp, pool, settings) for s in sources}
        overlap = split_overlap(tmp, settings.src_lang, settings.tgt_lang)
        report_overlap(overlap)
        inputs = {f"{split}.{side}": str(Path(path).resolve()) for split, pair in files.items()
                  for side, path in zip(("src", "tgt"), pair)}
        return write_manifest(tmp, "prepare", inputs={**(inputs_extra or {}), **inputs},
                              options=asdict(settings), outputs=outputs,
                              extra={"src_lang": settings.src_lang,
                                     "tgt_lang": settings.tgt_lang,
                                     "tokenizers": {"src": tokenizers[0].config(),
                                                    "tgt": tokenizers[1].config()},
                                     "counts": counts, "overlap": overlap, **extra})
