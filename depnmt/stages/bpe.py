"""The ``bpe`` stage: subword-nmt BPE (or word-level vocabularies).

Learning follows subword-nmt's README "best practice" for joint BPE: codes are learned on the
training text of both sides (``--joint``) or of each side (``--separate``); each side's training
text segmented with those codes gives a *filter vocabulary* (``subword-nmt get-vocab``), and
``apply_bpe.BPE(codes, vocab={subwords seen ≥ --vocab-threshold times})`` then undoes merges
that produce rarer subwords. Word mode does no segmentation at all.

Files of a bpe folder (``depnmt bpe -o OUT``)::

    {split}.{lang}         one line per input line, subwords joined by " " ("@@" continuation)
    vocab.src.txt  vocab.tgt.txt   NMT vocabularies (:class:`~depnmt.core.vocab.Vocab`), identical
                                   with --joint so embeddings can be shared
    manifest.json          stage "bpe"
    + the segmenter files below

Segmenter files, written by :meth:`Segmenter.save` into the bpe folder and, by ``train``, into
the model folder (so that ``translate`` needs nothing else)::

    bpe.json               {"format": 1, "separator": "@@", "escape": "‡",
                            "sides": {"src": CONFIG, "tgt": CONFIG}}
                           CONFIG = {"mode": "word"} or {"mode": "bpe", "codes": "codes.joint",
                           "merges": 10000, "filter_vocab": "bpevocab.src" | null,
                           "vocab_threshold": 50}
    codes.joint | codes.src codes.tgt   subword-nmt codes ("#version: 0.2", one merge a line)
    bpevocab.src  bpevocab.tgt          filter vocabularies, ``subword count`` lines (the
                                        ``--vocabulary`` file of ``subword-nmt apply-bpe``)

So ``subword-nmt apply-bpe -c codes.joint --vocabulary bpevocab.src --vocabulary-threshold 50``
reproduces ``Segmenter.segment`` except for the two cases below.

The subword→word alignment is *not* stored in a file: it is exactly recoverable from the
subwords themselves, because subword-nmt appends "@@" to every piece of a word except the
last, so a word ends at each piece without "@@" (:mod:`depnmt.core.subwords`). Two cases would break
that, and :class:`Segmenter` handles both:

* A token that itself ends with "@@" (e.g. "C@@") would look like a continuation. Such tokens
  are escaped by appending "‡" before segmentation (and a token ending in "@@‡…" gets one more
  "‡", so the escape is reversible); :func:`~depnmt.core.subwords.merge_subwords` removes it. The
  escaped forms are
  what the subword files and vocabularies contain.
* Empty tokens cannot be written on a space-separated line; like subword-nmt, ``segment``
  drops them (a line split on " " never contains any).

Tokens longer than :data:`MAX_CHUNK_CHARS` characters are segmented in chunks of that size (the
chunks are joined by "@@" as usual): subword-nmt's ``encode`` is quadratic in the token length.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from functools import lru_cache
from itertools import islice
from pathlib import Path

from subword_nmt import apply_bpe

from depnmt.core.errors import DepnmtError, InputError, UsageError
from depnmt.core.log import info, progress_bar, warn
from depnmt.core.manifest import load_manifest, write_manifest
from depnmt.core.optionspec import (COUNT, POSITIVE, Choice, Folder, check_options, field_param,
                                    jobs_option, option)
from depnmt.core.stagedir import check_distinct, stage_output

# merge_subwords is re-exported: scripts written by `depnmt export` import it from here
from depnmt.core.subwords import ESCAPE, SEPARATOR, escape_token, merge_subwords, unescape_word  # noqa: F401
from depnmt.core.textio import (TextBlock, atomic_open, count_lines, iter_lines, read_json,
                                write_lines)
from depnmt.core.vocab import Vocab
from depnmt.core.workers import InProcess, Workers, file_blocks, report, worker_pool
from depnmt.stages.bpelearn import codes_text, learn_merges
from depnmt.stages.prepare import check_language_code
from depnmt.storage.modeldir import BPE_CONFIG

MAX_CHUNK_CHARS = 500
PRESEGMENT_MIN_COUNT = 2   # training tokens segmented once for all workers (presegment)
PRESEGMENT_CHUNK = 2000    # tokens a task of presegment
CONFIG_FILE = BPE_CONFIG
CONFIG_FORMAT = 1
SIDES = ("src", "tgt")
SPLITS = ("train", "dev", "test")
CODES_HEADER = "#version: 0.2\n"

def split_tokens(line: str) -> list[str]:
    """The tokens of a tokenized line (split on single spaces, as all stages do)."""
    return [t for t in line.split(" ") if t]


# -- learning ------------------------------------------------------------------------------

def count_tokens(path: Path, total: int | None = None,
                 pool: InProcess | Workers | None = None) -> Counter:
    """Counts of the (escaped) tokens of a tokenized file, block by block in ``pool`` (None:
    here); the tokens in the order they first occur, whatever the pool."""
    counts: Counter = Counter()
    with progress_bar() as bar:
        task = bar.add_task(f"counting {path.name}", total=total)
        for block_counts, n in (pool or InProcess(None)).map(count_block, file_blocks(path)):
            counts.update(block_counts)
            bar.advance(task, n)
    return counts


def count_block(_state, block: TextBlock) -> tuple[Counter, int]:
    """The (escaped) token counts of a block of tokenized lines, in the order the tokens first
    occur, and its number of lines."""
    lines = block.lines()
    raw = Counter(" ".join(lines).split(" "))      # a line's tokens, then the next line's
    raw.pop("", None)
    return Counter({escape_token(t): n for t, n in raw.items()}), len(lines)


def learn_codes(counts: Counter, merges: int, min_pair_freq: int = 2,
                description: str = "learning BPE",
                on_merge: Callable[[], None] | None = None) -> str:
    """subword-nmt codes (file text) for at most ``merges`` merges learned from token counts.

    The merges are subword-nmt's (:mod:`depnmt.stages.bpelearn` learns them as ``subword-nmt
    learn-bpe --dict-input`` does, faster). Learning stops early when no pair occurs
    ``min_pair_freq`` times. Tokens containing "\\r" are left out: subword-nmt strips "\\r"
    at the ends of codes lines, so such merges would not survive a round trip through the
    codes file. A progress bar (``description``) follows the merges; ``on_merge`` instead
    (a worker process's report to the stage's bar) is called once per step.
    """
    usable = {tok: n for tok, n in counts.items() if "\r" not in tok}
    if on_merge is not None:
        return codes_text(learn_merges(usable, merges, min_pair_freq, on_merge=on_merge))
    with progress_bar() as bar:
        task = bar.add_task(description, total=merges)
        learned = learn_merges(usable, merges, min_pair_freq,
                               on_merge=lambda: bar.advance(task))
    return codes_text(learned)


def count_merges(codes: str, source: str | Path = "<codes>") -> int:
    """Number of merges in codes text; raises :class:`InputError` on malformed lines."""
    n = 0
    for lineno, line in enumerate(codes.split("\n"), start=1):
        if not line or (lineno == 1 and line.startswith("#version:")):
            continue
        if len(line.split(" ")) != 2:
            raise InputError(source, lineno, "expected a BPE merge `left right`")
        n += 1
    return n


# -- filter vocabularies (subword-nmt get-vocab format) ------------------------------------

def write_counts(path: Path, counts: dict[str, int]) -> None:
    """Write ``subword count`` lines, most frequent first (``subword-nmt get-vocab`` format)."""
    items = sorted(counts.items(), key=lambda tc: (-tc[1], tc[0]))
    write_lines(path, (f"{tok} {n}" for tok, n in items))


def read_counts(path: Path) -> dict[str, int]:
    """Read a file written by :func:`write_counts`."""
    counts = {}
    for lineno, line in enumerate(iter_lines(path), start=1):
        tok, _, n = line.rpartition(" ")
        if not tok or not n.isdigit():
            raise InputError(path, lineno, "expected `subword count`")
        counts[tok] = int(n)
    return counts


# -- the segmenter -------------------------------------------------------------------------

class Segmenter:
    """Turns tokens into subwords (BPE) or leaves them as words (word mode).

    ``codes`` is the text of a subword-nmt codes file (``None``: word mode); ``filter_counts``
    with ``vocab_threshold`` > 0 restricts subwords to those seen that often in training.
    It keeps the subwords of every token it has segmented (segmentation is per token), so its
    memory grows with the distinct tokens it has seen, as subword-nmt's own cache does.
    """

    def __init__(self, codes: str | None = None, *, joint: bool = False,
                 filter_counts: dict[str, int] | None = None, vocab_threshold: int = 0,
                 source: str | Path = "<codes>"):
        self.codes, self.joint = codes, joint
        self.filter_counts = filter_counts if vocab_threshold > 0 else None
        self.vocab_threshold = vocab_threshold if self.filter_counts is not None else 0
        self.merges = count_merges(codes, source) if codes is not None else 0
        # a token's subwords (segment) and the same joined by " " (segment_lines)
        self._pieces = _Segmented(lambda token: tuple(self._segment_token(escape_token(token))))
        self._joined = _Segmented(lambda token: " ".join(self._segment_token(
            escape_token(token))))              # not through _pieces: one table a path
        self._bpe = None if codes is None else subword_nmt_bpe(codes, self.merges,
                                                               self._filter_set())

    def __reduce__(self):
        """Pickled as what builds it and the tokens it has segmented (``bpe --jobs`` sends it
        to worker processes, with the tokens :func:`presegment` segmented)."""
        return _segmenter, (self.codes, self.joint, self.filter_counts, self.vocab_threshold,
                            dict(self._joined))

    def _filter_set(self) -> set[str] | None:
        if self.filter_counts is None:
            return None
        return {t for t, n in self.filter_counts.items() if n >= self.vocab_threshold}

    @property
    def is_word_level(self) -> bool:
        return self._bpe is None

    def with_filter(self, train_counts: Counter, vocab_threshold: int) -> "Segmenter":
        """This segmenter plus subword-nmt's vocabulary filter, built from training-token counts."""
        if self.is_word_level or vocab_threshold <= 0:
            return self
        return Segmenter(self.codes, joint=self.joint, vocab_threshold=vocab_threshold,
                         filter_counts=self.segment_counts(train_counts))

    # -- segmentation --
    def segment(self, tokens: list[str]) -> list[str]:
        """Subwords of ``tokens`` (escaped words in word mode); empty tokens are dropped."""
        out: list[str] = []
        pieces = self._pieces
        for token in tokens:
            if token:
                out += pieces[token]
        return out

    def segment_lines(self, lines: list[str]) -> list[str]:
        """``" ".join(self.segment(split_tokens(line)))`` for every line (faster)."""
        joined = self._joined
        return [" ".join([joined[t] for t in line.split(" ") if t]) for line in lines]

    def joined(self, token: str) -> str:
        """The subwords of one token (not escaped), joined by " ", as :meth:`segment_lines`
        writes them (kept for the next time)."""
        return self._joined[token]

    def keep(self, segmented: Iterable[tuple[str, str]]) -> None:
        """Take these ``(token, subwords joined by " ")`` (another copy of this segmenter
        made them) as if :meth:`joined` had made them."""
        self._joined.update(segmented)

    def lines_mark(self) -> int:
        """A mark for :meth:`new_since`: how many distinct tokens :meth:`segment_lines` has
        segmented so far."""
        return len(self._joined)

    def new_since(self, mark: int) -> list[tuple[str, str]]:
        """The tokens :meth:`segment_lines` segmented for the first time since
        :meth:`lines_mark` gave ``mark``, in the order it met them, each with its subwords
        joined by " "."""
        table = self._joined              # insertions only: the newest entries are last
        return list(islice(reversed(table.items()), len(table) - mark))[::-1]

    def _segment_token(self, token: str) -> list[str]:
        if self._bpe is None:
            return [token]
        chunks = [token[i:i + MAX_CHUNK_CHARS] for i in range(0, len(token), MAX_CHUNK_CHARS)]
        pieces: list[str] = []
        for chunk in chunks[:-1]:
            *head, last = self._bpe.segment_tokens([chunk])
            pieces += head + [last + SEPARATOR]
        return pieces + self._bpe.segment_tokens([chunks[-1]])

    def segment_counts(self, counts: Counter) -> Counter:
        """Subword counts of a text given by its (escaped) token counts."""
        out: Counter = Counter()
        for token, n in counts.items():
            for piece in self._segment_token(token):
                out[piece] += n
        return out

    # -- files --
    def segmenter_config(self, side: str) -> dict:
        """This side's entry of ``bpe.json`` (file names relative to the folder)."""
        if self.is_word_level:
            return {"mode": "word"}
        return {"mode": "bpe", "codes": codes_name(self.joint, side), "merges": self.merges,
                "filter_vocab": f"bpevocab.{side}" if self.filter_counts is not None else None,
                "vocab_threshold": self.vocab_threshold}

    def save(self, directory: str | Path, side: str) -> list[str]:
        """Write this side's segmenter files into ``directory``; return their names."""
        directory = Path(directory)
        cfg = self.segmenter_config(side)
        written = []
        if cfg.get("codes"):
            with atomic_open(directory / cfg["codes"]) as fh:
                fh.write(self.codes)
            written.append(cfg["codes"])
        if cfg.get("filter_vocab"):
            write_counts(directory / cfg["filter_vocab"], self.filter_counts)
            written.append(cfg["filter_vocab"])
        config = read_config(directory) if (directory / CONFIG_FILE).exists() else {"sides": {}}
        config.update(format=CONFIG_FORMAT, separator=SEPARATOR, escape=ESCAPE)
        config["sides"][side] = cfg
        with atomic_open(directory / CONFIG_FILE) as fh:
            json.dump(config, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        return written + [CONFIG_FILE]

    @classmethod
    def from_dir(cls, directory: str | Path, side: str) -> "Segmenter":
        """The segmenter of ``side`` saved in a bpe folder or a model folder."""
        directory = Path(directory)
        cfg = read_config(directory)["sides"].get(side)
        if cfg is None:
            raise DepnmtError(f"{directory / CONFIG_FILE}: has no segmenter for side '{side}'")
        if cfg.get("mode") == "word":
            return cls()
        if not cfg.get("codes"):
            raise DepnmtError(f"{directory / CONFIG_FILE}: side '{side}' names no codes file")
        codes_path = directory / cfg["codes"]
        codes = "\n".join(iter_lines(codes_path)) + "\n"
        filter_name = cfg.get("filter_vocab")
        return cls(codes, joint=cfg["codes"] == codes_name(True, side), source=codes_path,
                   filter_counts=read_counts(directory / filter_name) if filter_name else None,
                   vocab_threshold=cfg.get("vocab_threshold") or 0)


class _Segmented(dict):
    """A token's segmentation, computed by ``segment(token)`` the first time it is asked for."""

    def __init__(self, segment):
        super().__init__()
        self.segment = segment

    def __missing__(self, token: str) -> str:
        value = self[token] = self.segment(token)
        return value


def _segmenter(codes: str | None, joint: bool, filter_counts: dict[str, int] | None,
               vocab_threshold: int, segmented: dict[str, str] | None = None) -> Segmenter:
    """A :class:`Segmenter` built again from its parts (unpickling)."""
    segmenter = Segmenter(codes, joint=joint, filter_counts=filter_counts,
                          vocab_threshold=vocab_threshold)
    segmenter.keep((segmented or {}).items())
    return segmenter


@lru_cache(maxsize=2)
def _bpe_without_filter(codes: str, merges: int) -> apply_bpe.BPE:
    return apply_bpe.BPE(io.StringIO(codes), merges=merges, separator=SEPARATOR)


def subword_nmt_bpe(codes: str, merges: int, vocab: set[str] | None) -> apply_bpe.BPE:
    """subword-nmt's segmenter for these codes (and filter vocabulary); one is built for the
    two sides of joint codes without a filter (building it is most of a worker's start)."""
    if vocab is None:
        return _bpe_without_filter(codes, merges)
    return apply_bpe.BPE(io.StringIO(codes), merges=merges, separator=SEPARATOR, vocab=vocab)


def codes_name(joint: bool, side: str) -> str:
    """File name of the codes used by ``side``."""
    return "codes.joint" if joint else f"codes.{side}"


def read_config(directory: Path) -> dict:
    """The ``bpe.json`` of a bpe or model folder, checked for its format."""
    path = directory / CONFIG_FILE
    config = read_json(path, f"{directory}: no {CONFIG_FILE} found; expected a folder written "
                             f"by `depnmt bpe` or `depnmt train`")
    if config.get("format") != CONFIG_FORMAT or config.get("separator") != SEPARATOR \
            or config.get("escape") != ESCAPE or not isinstance(config.get("sides"), dict):
        raise DepnmtError(f"{path}: not a segmenter config this version of depnmt understands")
    return config


# -- the stage -----------------------------------------------------------------------------

@dataclass
class BpeOptions:
    """Options of ``depnmt bpe`` (see ``depnmt bpe --help``)."""

    mode: str = "bpe"
    merges: int = 10000
    joint: bool = True
    vocab_threshold: int = 0
    min_freq: dict[str, int] | None = None  # per side; default 1 (bpe) or 2 (word)
    max_vocab: int | None = None
    merge_min_freq: int = 2

    def side_min_freq(self, side: str) -> int:
        default = 1 if self.mode == "bpe" else 2
        return (self.min_freq or {}).get(side) or default

    def check(self) -> None:
        """Reject option combinations that cannot work, before any work is done."""
        if self.joint and self.side_min_freq("src") != self.side_min_freq("tgt"):
            raise DepnmtError("--src-min-freq and --tgt-min-freq must agree with --joint "
                              "(there is one vocabulary); use --separate")

    def manifest_options(self) -> dict:
        bpe = self.mode == "bpe"
        return {"mode": self.mode, "merges": self.merges if bpe else None, "joint": self.joint,
                "vocab_threshold": self.vocab_threshold if bpe else None,
                "merge_min_freq": self.merge_min_freq if bpe else None,
                "min_freq": {s: self.side_min_freq(s) for s in SIDES},
                "max_vocab": self.max_vocab}


# the options of `depnmt bpe` that only learning subwords uses, and those of bpe mode only
LEARNING = ("mode", "merges", "joint", "vocab_threshold", "min_freq", "src_min_freq",
            "tgt_min_freq", "max_vocab", "merge_min_freq")
BPE_ONLY = ("merges", "vocab_threshold", "merge_min_freq")


@dataclass
class BpeSettings:
    """The options of ``depnmt bpe``, each a field (:func:`~depnmt.core.optionspec.option`); what
    the stage does with them: :meth:`options` (learning subwords, :func:`run_bpe`) or
    ``source`` (:func:`depnmt.stages.bpefrom.run_bpe_from`)."""

    prepare_dir: Path | None = option(
        None, "Folder written by `depnmt prepare` (tokenized {train,dev,test}.LANG).", Folder(),
        flag=("-i", "--input"), required=True, metavar="PREPARE_DIR")
    out_dir: Path | None = option(
        None, "Folder to write subword text, vocabularies, codes and manifest.json into, all "
        "or nothing: it appears (or replaces a previous `depnmt bpe` output) when the run "
        "completes; one run at a time.", Folder(), flag=("-o", "--output"), required=True,
        metavar="OUT_DIR")
    mode: str = option("bpe", "bpe: split words into subwords with subword-nmt; word: keep "
                       "whole words (rare ones become <unk> in training, see --min-freq).",
                       Choice(("bpe", "word")), show_default=True)
    merges: int = option(10000, "Number of BPE merge operations to learn (bpe mode).", POSITIVE,
                         show_default=True, metavar="N")
    joint: bool | None = option(
        None, "Learn one set of codes and one vocabulary on both languages (lets train share "
        "embeddings), or one per language. Default: --joint in bpe mode, --separate in word "
        "mode.", bool, flag="--joint/--separate")
    vocab_threshold: int = option(
        0, "subword-nmt's vocabulary filter (bpe mode): undo merges that produce a subword "
        "seen fewer than N times in that language's training text (0: off). subword-nmt "
        "suggests 50 for corpora of millions of sentences; on Multi30k (29k) that splits most "
        "words into single letters.", COUNT, show_default=True, metavar="N")
    min_freq: int | None = option(
        None, "Leave tokens seen fewer than N times in training out of the vocabulary (they "
        "become <unk>). Default: 1 in bpe mode, 2 in word mode.", POSITIVE, metavar="N")
    src_min_freq: int | None = option(
        None, "--min-freq for the source language only (with --separate).", POSITIVE,
        metavar="N")
    tgt_min_freq: int | None = option(
        None, "--min-freq for the target language only (with --separate).", POSITIVE,
        metavar="N")
    max_vocab: int | None = option(
        None, "Keep at most the N most frequent tokens per vocabulary (besides specials).",
        POSITIVE, metavar="N")
    merge_min_freq: int = option(2, "Stop learning merges when no pair occurs N times (bpe "
                                 "mode).", POSITIVE, show_default=True, metavar="N")
    source: Path | None = option(
        None, "Learn nothing: segment with the codes, filter vocabularies and vocabularies of "
        "an earlier bpe folder or a trained model's folder, copied byte for byte (to fine-tune "
        "that model with `train --init-from` on this data). Says how many training subwords "
        "the copied vocabulary lacks (<unk>).", Folder(exists=True), flag="--subwords-from",
        metavar="DIR")
    jobs: int = jobs_option("Count the training words, learn --separate codes (each side in a "
                            "process of its own; joint codes take one process) and apply the "
                            "codes")

    def __post_init__(self):
        check_options(self)

    def check(self, given: Iterable[str] = ()) -> None:
        """A :class:`~depnmt.core.errors.UsageError` when one of ``given`` (the names of the options
        the user gave) is a learning option (:data:`LEARNING`) and ``source`` is set; a
        warning for each bpe-mode option given in word mode."""
        given = set(given)
        if self.source is not None:
            learning = [name for name in LEARNING if name in given]
            if learning:
                flags = field_param(next(f for f in fields(self) if f.name == learning[0])).flags
                flag = "/".join(f for f in flags if f.startswith("--"))
                raise UsageError(f"{flag} does not go with --subwords-from (the subwords and "
                                 f"vocabularies are {self.source}'s)")
        elif self.mode == "word":
            for name in BPE_ONLY:
                if name in given:
                    warn(f"--{name.replace('_', '-')} has no effect with --mode word")

    def options(self) -> BpeOptions:
        """What :func:`run_bpe` learns and applies (the defaults of ``joint`` and the
        per-side minimum frequencies resolved)."""
        per_side = {"src": self.src_min_freq or self.min_freq,
                    "tgt": self.tgt_min_freq or self.min_freq}
        return BpeOptions(mode=self.mode, merges=self.merges,
                          joint=(self.mode == "bpe") if self.joint is None else self.joint,
                          vocab_threshold=self.vocab_threshold, min_freq=per_side,
                          max_vocab=self.max_vocab, merge_min_freq=self.merge_min_freq)


def prepared_inputs(prepare_dir: Path) -> tuple[dict, dict[str, str], list[str]]:
    """The prepare manifest, ``{side: lang}`` and the splits present (train first)."""
    manifest = load_manifest(prepare_dir, "prepare")
    langs = {}
    for side in SIDES:
        lang = manifest.get(f"{side}_lang") or manifest.get("options", {}).get(f"{side}_lang")
        if not lang:
            raise DepnmtError(f"{prepare_dir}/manifest.json: no {side}_lang recorded")
        check_language_code(str(lang), f"{prepare_dir}/manifest.json: {side}_lang")
        langs[side] = lang
    if langs["src"] == langs["tgt"]:
        raise DepnmtError(f"{prepare_dir}: source and target are both '{langs['src']}'; their "
                          f"files would have the same names")
    splits = []
    for split in SPLITS:
        present = [(prepare_dir / f"{split}.{lang}").exists() for lang in langs.values()]
        if any(present) and not all(present):
            raise DepnmtError(f"{prepare_dir}: {split} has only one side; re-run `depnmt prepare`")
        if all(present):
            splits.append(split)
    if "train" not in splits:
        raise DepnmtError(f"{prepare_dir}: no train.{langs['src']} / train.{langs['tgt']}")
    return manifest, langs, splits


def line_total(manifest: dict, name: str, path: Path) -> int:
    """Line count of a prepare output (from its manifest when recorded)."""
    return manifest.get("outputs", {}).get(name, {}).get("lines") or count_lines(path)


def build_segmenters(train_counts: dict[str, Counter], opts: BpeOptions,
                     pool: InProcess | Workers, relay: "ProgressRelay") -> dict[str, Segmenter]:
    """One segmenter per side: learn codes (joint or per side), then add the vocabulary filter.
    Separate codes are learned by ``pool``: with two or more worker processes both sides at
    once (``relay`` carries their progress to the stage's bars), the same codes either way."""
    if opts.mode == "word":
        return {side: Segmenter() for side in SIDES}
    if opts.joint:
        codes = learn_timed(train_counts["src"] + train_counts["tgt"], opts, "joint")
        plain = {side: Segmenter(codes, joint=True) for side in SIDES}
    else:
        plain = {side: Segmenter(codes) for side, codes in
                 zip(SIDES, learn_sides(pool, relay, train_counts, opts))}
    return {side: plain[side].with_filter(train_counts[side], opts.vocab_threshold)
            for side in SIDES}


def learn_timed(counts: Counter, opts: BpeOptions, label: str) -> str:
    """:func:`learn_codes` with a progress bar and a summary line."""
    start = time.monotonic()
    codes = learn_codes(counts, opts.merges, opts.merge_min_freq,
                        f"learning {opts.merges} {label} merges")
    learned_summary(codes, opts, label, time.monotonic() - start)
    return codes


def learned_summary(codes: str, opts: BpeOptions, label: str, seconds: float) -> None:
    """The line saying how many merges were learned, and how long it took (a warning when
    fewer than ``--merges``)."""
    learned = count_merges(codes)
    if learned < opts.merges:
        warn(f"{label} codes: only {learned} of {opts.merges} merges learned (no pair occurs "
             f"{opts.merge_min_freq}+ times in the training text)")
    info(f"{label} codes: {learned} merges learned in {seconds:.1f}s")


class ProgressRelay:
    """The stage's ``on_progress`` (:func:`~depnmt.core.workers.worker_pool`): a worker's
    :func:`~depnmt.core.workers.report` under a key advances the bar task registered for it."""

    def __init__(self):
        self.tasks: dict = {}

    def __call__(self, key, n: int) -> None:
        target = self.tasks.get(key)
        if target is not None:
            bar, task = target
            bar.advance(task, n)


LEARN_REPORT_EVERY = 100    # merges between two progress reports of a learning worker


def learn_side(_state, task: tuple[str, Counter, int, int]) -> tuple[str, float]:
    """Learn one side's codes (``(side, counts, merges, min_pair_freq)``): the codes text and
    the seconds it took. What :func:`learn_sides` runs, in a worker process under ``--jobs``,
    reporting its progress every :data:`LEARN_REPORT_EVERY` merges."""
    side, counts, merges, min_pair_freq = task
    start, done = time.monotonic(), [0]

    def on_merge() -> None:
        done[0] += 1
        if done[0] == LEARN_REPORT_EVERY:
            report(("learn", side), done[0])
            done[0] = 0

    codes = learn_codes(counts, merges, min_pair_freq, on_merge=on_merge)
    report(("learn", side), done[0])
    return codes, time.monotonic() - start


def learn_sides(pool: InProcess | Workers, relay: ProgressRelay,
                train_counts: dict[str, Counter], opts: BpeOptions) -> list[str]:
    """Each side's codes, learned from its own counts (``--separate``): one after the other in
    this process, or by two worker processes at once (the codes are the same)."""
    if isinstance(pool, InProcess):
        return [learn_timed(train_counts[side], opts, side) for side in SIDES]
    tasks = [(side, train_counts[side], opts.merges, opts.merge_min_freq) for side in SIDES]
    with progress_bar() as bar:
        relay.tasks = {("learn", side): (bar, bar.add_task(
            f"learning {opts.merges} {side} merges", total=opts.merges)) for side in SIDES}
        try:
            learned = list(pool.map(learn_side, tasks))
            for side, (codes, _) in zip(SIDES, learned):   # a last report may come too late
                bar.update(relay.tasks[("learn", side)][1], completed=count_merges(codes))
        finally:
            relay.tasks = {}
    for side, (codes, seconds) in zip(SIDES, learned):
        learned_summary(codes, opts, side, seconds)
    return [codes for codes, _ in learned]


def segment_block(segmenters: dict[str, Segmenter], block: tuple[str, TextBlock]
                  ) -> tuple[str, list[tuple[str, str]], int]:
    """The subword lines of a block of tokenized lines of one side (``(side, block)``) as the
    text to write, the (escaped) tokens that this process segmented for the first time, each
    with its subwords joined by " " (:meth:`Segmenter.new_since`), and the number of lines.
    What ``--jobs N`` runs in its worker processes."""
    side, text = block
    segmenter = segmenters[side]
    mark = segmenter.lines_mark()
    lines = segmenter.segment_lines(text.lines())
    new = [(escape_token(token), joined) for token, joined in segmenter.new_since(mark)]
    return "".join(f"{line}\n" for line in lines), new, len(lines)


def segment_file(pool: InProcess | Workers, side: str, src: Path, out: Path, total: int,
                 token_counts: Counter | None = None, segmenter: Segmenter | None = None
                 ) -> Counter | None:
    """Segment every line of ``src`` (``side``'s segmenter, by ``pool``) into ``out``. With
    ``token_counts`` (the file's escaped token counts, :func:`count_tokens`) and the side's
    ``segmenter``, return the file's subword counts.

    The subword counts are the token counts times each token's subwords, added up as the
    blocks come back: each block reports the tokens new to the process that segmented it, with
    their subwords, and a token is counted the first time it is reported; the tokens no block
    reported (those the segmenters had before, e.g. from :func:`presegment`) are counted at
    the end from ``segmenter``'s table. The keys' order is therefore not the text's (the
    vocabularies sort them).
    """
    counts: Counter | None = None if token_counts is None else Counter()
    uncounted = None if token_counts is None else dict(token_counts)
    with atomic_open(out) as fh, progress_bar() as bar:
        task = bar.add_task(f"segmenting {src.name}", total=total)
        for text, new, n in pool.map(segment_block, ((side, block) for block in
                                                     file_blocks(src))):
            fh.write(text)
            if uncounted is not None:
                for token, joined in new:
                    times = uncounted.pop(token, 0)
                    if times:
                        for piece in joined.split(" "):
                            counts[piece] += times
                    elif token not in token_counts:
                        raise DepnmtError(f"{src}: the token {token!r} was not there when the "
                                          f"file was counted; the file changed while bpe ran?")
            bar.advance(task, n)
    if uncounted:
        if segmenter is None:
            raise ValueError("segment_file: token counts without the segmenter")
        for token, times in uncounted.items():
            for piece in segmenter.joined(unescape_word(token)).split(" "):
                counts[piece] += times
    return counts


def segment_tokens(segmenters: dict[str, Segmenter], task: tuple[str, list[str]]
                   ) -> list[str]:
    """The subwords of each token of ``(side, tokens)``, joined by " " (what
    :func:`presegment` runs in the worker processes)."""
    side, tokens = task
    joined = segmenters[side].joined
    return [joined(token) for token in tokens]


def presegment(pool: InProcess | Workers, segmenters: dict[str, Segmenter],
               train_counts: dict[str, Counter]) -> None:
    """Segment the training tokens seen :data:`PRESEGMENT_MIN_COUNT` or more times, once,
    shared among the pool's processes, into ``segmenters``, and give those to the pool as its
    state: otherwise every worker would segment every frequent token itself. Rarer tokens are
    segmented by the process whose block has them."""
    tasks = []
    for side, counts in train_counts.items():
        tokens = [unescape_word(t) for t, n in counts.items() if n >= PRESEGMENT_MIN_COUNT]
        tasks += [(side, tokens[i:i + PRESEGMENT_CHUNK])
                  for i in range(0, len(tokens), PRESEGMENT_CHUNK)]
    for (side, chunk), joined in zip(tasks, pool.map(segment_tokens, tasks)):
        segmenters[side].keep(zip(chunk, joined))
    pool.set_state(segmenters)


def build_vocabs(train_counts: dict[str, Counter], opts: BpeOptions) -> dict[str, Vocab]:
    """NMT vocabularies of the segmented training data; one shared vocabulary when joint."""
    if opts.joint:
        joint = Vocab.build(train_counts["src"] + train_counts["tgt"], opts.side_min_freq("src"),
                            opts.max_vocab)
        return {side: joint for side in SIDES}
    return {side: Vocab.build(train_counts[side], opts.side_min_freq(side), opts.max_vocab)
            for side in SIDES}


def run_bpe(prepare_dir: Path, out_dir: Path, opts: BpeOptions, jobs: int = 1) -> dict:
    """Run the bpe stage from a prepare folder into ``out_dir`` (all or nothing, one writer:
    :func:`~depnmt.core.stagedir.stage_output`); return the manifest. ``jobs`` > 1 counts the
    training tokens, learns separate codes (both sides at once) and applies the codes in
    that many processes (:mod:`depnmt.core.workers`), with the same output; it is not recorded."""
    check_distinct(out_dir, {"prepare folder": prepare_dir})
    opts.check()
    prep, langs, splits = prepared_inputs(prepare_dir)
    train_counts, relay = {}, ProgressRelay()
    # one pool: counting, learning separate codes, then (new state) segmenting
    with worker_pool(jobs, on_progress=relay) as pool:
        for side, lang in langs.items():
            path = prepare_dir / f"train.{lang}"
            train_counts[side] = count_tokens(path, line_total(prep, path.name, path), pool)
            if not train_counts[side]:
                raise DepnmtError(f"{path}: no tokens to learn from")
        with stage_output(out_dir, "bpe", owns=stage_owns(langs)) as tmp:
            return write_bpe(prepare_dir, tmp, opts, (prep, langs, splits), train_counts, pool,
                             relay)


def stage_owns(langs: dict[str, str]):
    """Which names of an existing bpe folder that its manifest does not list a new bpe run may
    replace: the files any bpe run writes, and the training-data cache that ``train`` adds
    (:mod:`depnmt.data.cache`; made from the files being replaced)."""
    names = {f"{split}.{lang}" for split in SPLITS for lang in langs.values()} | {CONFIG_FILE}
    names |= {"cache"}
    names |= {f"{kind}.{side}" for kind in ("codes", "bpevocab") for side in SIDES}
    names |= {"codes.joint"} | {f"vocab.{side}.txt" for side in SIDES}
    return names.__contains__


def segment_splits(pool: InProcess | Workers, segmenters: dict[str, Segmenter],
                   prepare_dir: Path, out_dir: Path,
                   prepared: tuple[dict, dict[str, str], list[str]],
                   train_counts: dict[str, Counter] | None = None
                   ) -> tuple[list[str], dict[str, Counter]]:
    """Segment every split of both sides of a prepare folder into ``out_dir`` with ``pool``
    (whose state is ``segmenters``); return the names written and, given the training
    text's token counts, its subword counts per side (:func:`segment_file`)."""
    prep, langs, splits = prepared
    outputs, subword_counts = [], {}
    for side, lang in langs.items():
        for split in splits:
            name = f"{split}.{lang}"
            src = prepare_dir / name
            counting = split == "train" and train_counts is not None
            counts = segment_file(pool, side, src, out_dir / name, line_total(prep, name, src),
                                  *((train_counts[side], segmenters[side]) if counting else ()))
            if counting:
                subword_counts[side] = counts
            outputs.append(name)
    return outputs, subword_counts


def write_bpe(prepare_dir: Path, out_dir: Path, opts: BpeOptions,
              prepared: tuple[dict, dict[str, str], list[str]],
              train_counts: dict[str, Counter], pool: InProcess | Workers,
              relay: ProgressRelay) -> dict:
    """Learn the segmenters, write the bpe folder's files into ``out_dir`` (manifest last);
    return the manifest. ``prepared``: what :func:`prepared_inputs` returned; ``pool``
    learns separate codes and segments the files (:mod:`depnmt.core.workers`; it is given the
    segmenters as its state); ``relay`` passes its workers' progress to the bars."""
    prep, langs, splits = prepared
    segmenters = build_segmenters(train_counts, opts, pool, relay)
    pool.set_state(segmenters)
    presegment(pool, segmenters, train_counts)
    outputs, subword_counts = segment_splits(pool, segmenters, prepare_dir, out_dir, prepared,
                                             train_counts)
    vocabs = build_vocabs(subword_counts, opts)
    for side in SIDES:
        vocabs[side].save(out_dir / f"vocab.{side}.txt")
        info(f"vocab.{side}.txt: {len(vocabs[side])} entries")
        outputs += [f"vocab.{side}.txt"] + segmenters[side].save(out_dir, side)
    codes = {s: segmenters[s].segmenter_config(s).get("codes") for s in SIDES}
    return write_manifest(
        out_dir, "bpe", inputs={"prepare": str(prepare_dir.resolve())},
        options=opts.manifest_options(), outputs=sorted(set(outputs)),
        extra={"src_lang": langs["src"], "tgt_lang": langs["tgt"],
               "prepare_dir": str(prepare_dir.resolve()), "codes": codes, "splits": splits,
               "vocab_sizes": {s: len(vocabs[s]) for s in SIDES}})
