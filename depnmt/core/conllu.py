"""CoNLL-U trees: the :class:`Sentence` record, a validating reader and an atomic writer.

What depnmt writes (standard CoNLL-U: 10 tab-separated columns, blocks ended by a blank line):

* one block per line of the tokenized text, in the same order;
* a ``# text = ...`` comment holding the tokens joined by single spaces (the tokenized line);
* ID, FORM, UPOS (``_`` when unknown), HEAD, DEPREL; LEMMA, XPOS, FEATS and DEPS are ``_``;
* MISC ``SentIdx=k`` on every word when the parser reported sentences (see
  :mod:`depnmt.stages.parse.projection`): which of the parser's sentences (0-based) the word came
  from.

**Empty lines.** CoNLL-U has no empty sentence, but a text line may be empty. It is written as a
block holding only the comment ``# text =`` (empty value) and the blank line that ends the block.
:func:`read_conllu` reads such a block back as an empty :class:`Sentence`, so the one-block-per-line
correspondence survives a round trip; standard readers (stanza, the ``conllu`` package, UDPipe)
accept the file and simply see no sentence there. A comment-only block without a ``# text``
comment (e.g. a file header) is skipped; one with a non-empty ``# text`` is an error.

**What the reader accepts** -- the structural rules of the UD format
(https://universaldependencies.org/format.html); anything else raises
:class:`~depnmt.core.errors.InputError` naming the user's file (``<stdin>`` for standard input) and
the offending line. Every path that reads trees (``parse --backend conllu`` and ``--merge``,
``train``, ``translate --input-format conllu``, ``inspect``, ``analyze``, ``bench/``) reads
them here.

* Lines end with LF, CRLF or a lone CR (mixed too); a UTF-8 byte order mark is ignored. A NUL
  byte anywhere is an error; so is a line of only whitespace (a sentence ends with an *empty*
  line). Several empty lines in a row separate like one.
* Every block, the last one included, ends with an empty line: a file that ends inside a
  sentence is what a cut-off copy looks like, so it is an error, not a shorter sentence.
* Comments (``#`` lines) only before a sentence's first token line.
* Token lines have exactly 10 tab-separated columns, none empty (``_`` is the empty value),
  none beginning or ending with whitespace, and whitespace inside only FORM, LEMMA and MISC.
* IDs are ASCII digits without sign or leading zero: words ``1, 2, ..., n`` in order;
  multiword-token ranges ``a-b`` right before word ``a``, ``a < b <= n`` (a multiword token
  is at least two words), not overlapping;
  empty nodes ``i.j`` right after word ``i`` (``0.j`` before word 1), ``j = 1, 2, ...``.
  Ranges and empty nodes are checked and then **skipped deliberately**: a sentence holds the
  syntactic words of the basic tree (German ``zum`` becomes ``zu dem``), and empty nodes
  belong to the enhanced graph, which depnmt does not use. Anything else in the ID column
  (``3-``, ``1.``, ``01``, ``+2``, Arabic-Indic digits) is an error, never skipped.
* HEAD is ``0`` or a word's ID (same digit rules), in 0..n; exactly one word has HEAD 0 (a
  tree read here is never repaired: the ``parataxis`` join of ``parse`` applies to a parser's
  output only); every word reaches the root (no cycles).
* MISC ``SentIdx=k`` (same digit rules) on all words of a sentence or on none.
* No number (ID part, HEAD, ``SentIdx``) has more than 9 digits: a longer one is reported as
  too large, not converted.

Every sentence read here carries its ``origin`` (file, first line of its block), so that a
later stage that finds the tree unusable (e.g. it does not fit the sentence's subwords) names
the place too (:func:`sentence_error`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.textio import atomic_open, decode_line, open_bytes, stdin_bytes

N_COLUMNS = 10
SENT_IDX = "SentIdx"


@dataclass
class Sentence:
    """One dependency tree over ``words`` (or, as a backend's raw output, a forest).

    ``heads[i]`` is the head of word ``i + 1`` in CoNLL-U convention: 1-based, 0 for the root.
    ``sent_ids[i]`` is the (0-based) parser sentence word ``i + 1`` came from, when known.
    ``origin``: ``(file, line)`` where the block of a tree read by :func:`read_conllu` starts
    (not compared: two equal trees are equal wherever they come from).
    """

    words: list[str]
    heads: list[int]
    deprels: list[str]
    upos: list[str] | None = None
    sent_ids: list[int] | None = None
    origin: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.words)
        for name in ("heads", "deprels", "upos", "sent_ids"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"Sentence.{name} has {len(value)} items for {n} words")

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def empty(cls) -> "Sentence":
        """The tree of an empty line: no words."""
        return cls([], [], [], None, None)

    @property
    def text(self) -> str:
        """The tokenized line this tree belongs to (words joined by single spaces)."""
        return " ".join(self.words)


# ---------------------------------------------------------------------------------------------
# Tree checks

def tree_problem(heads: list[int]) -> tuple[int, str] | None:
    """Why ``heads`` is not a single tree, as ``(0-based word index, message)``; None if it is.

    Checked in this order: HEAD in 0..n, exactly one root, every word reaches the root.
    """
    n = len(heads)
    for i, h in enumerate(heads):
        if not 0 <= h <= n:
            return i, f"HEAD {h} of word {i + 1} is out of range (0..{n})"
    roots = [i for i, h in enumerate(heads) if h == 0]
    if n and not roots:
        return 0, "no word has HEAD 0 (a tree needs exactly one root)"
    if len(roots) > 1:
        return roots[1], (f"several roots: words {roots[0] + 1} and {roots[1] + 1} both have "
                          f"HEAD 0 (a tree needs exactly one root)")
    cycle = find_cycle(heads)
    if cycle:
        path = " -> ".join(str(i + 1) for i in cycle + [cycle[0]])
        return min(cycle), f"cycle in HEAD column: {path} (words must reach the root)"
    return None


def find_cycle(heads: list[int]) -> list[int]:
    """The first cycle (0-based word indices, in head order) among ``heads``, or ``[]``.

    Heads must be in range; several roots are allowed (a forest is acyclic).
    """
    state = [0] * len(heads)  # 0 = unseen, 1 = on the current path, 2 = reaches a root
    for start in range(len(heads)):
        path = []
        i = start
        while i >= 0 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = heads[i] - 1
        if i >= 0 and state[i] == 1:
            return path[path.index(i):]
        for j in path:
            state[j] = 2
    return []


# ---------------------------------------------------------------------------------------------
# Reading

COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
SPACES_ALLOWED = ("FORM", "LEMMA", "MISC")     # UD: the other columns hold no whitespace
WORD_ID = re.compile(r"[1-9][0-9]*")            # [0-9], not \d: ASCII digits only
RANGE_ID = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
EMPTY_NODE_ID = re.compile(r"(0|[1-9][0-9]*)\.([1-9][0-9]*)")
NUMBER = re.compile(r"0|[1-9][0-9]*")          # HEAD, SentIdx: no sign, no leading zero
MAX_DIGITS = 9          # no sentence has a billion words (and int() refuses > 4300 digits)
WHITESPACE = re.compile(r"\s")


def show(value: str, limit: int = 40) -> str:
    """A field quoted for a one-line message (control characters escaped, long values cut)."""
    cut = value[:limit] + ("…" if len(value) > limit else "")
    return f"'{cut}'" if cut.isprintable() else repr(cut)


def conllu_lines(path: str | Path, stream: IO[bytes] | None = None) -> Iterator[str]:
    """The lines of a CoNLL-U file (plain or .gz), each ended by LF, CRLF or a lone CR.

    Line k is line k as an editor shows it, whichever ending the file uses (mixed endings too);
    a last line without an ending is kept. Decoded as :func:`depnmt.core.textio.iter_lines` does
    (invalid UTF-8 replaced, one warning). ``stream``: an open binary stream (stdin) that
    ``path`` names in messages.
    """
    state: dict = {}
    lineno = 0
    fh = stream if stream is not None else open_bytes(path)
    try:
        for raw in fh:                   # pieces ended by LF (a lone-CR file is a single piece)
            if raw.endswith(b"\n"):
                pieces = raw[:-2 if raw.endswith(b"\r\n") else -1].split(b"\r")
            else:                        # end of file: a last lone CR ends the last line
                pieces = raw.split(b"\r")
                if not pieces[-1]:
                    pieces.pop()
            for piece in pieces:
                lineno += 1
                yield decode_line(piece, path, lineno, state)
    finally:
        if stream is None:
            fh.close()


@dataclass
class _Block:
    """The raw lines of one CoNLL-U block: the value of its ``# text`` comment and its token
    lines (words, multiword ranges, empty nodes) with their line numbers."""

    first_line: int
    text: str | None
    rows: list[tuple[int, str]]


def _blocks(path: str | Path, lines: Iterable[str], first_line: int = 1) -> Iterator[_Block]:
    """Split CoNLL-U lines into blocks, each ended by an empty line (``first_line``: the
    number of the first of ``lines`` in the file)."""
    block: _Block | None = None
    lineno = first_line - 1
    for lineno, line in enumerate(lines, start=first_line):
        if lineno == 1 and line.startswith("\ufeff"):
            line = line[1:]                       # a byte order mark is not content
        if "\0" in line:
            raise InputError(path, lineno, "NUL byte (a binary or damaged file?)")
        if not line:
            if block is not None:
                yield block
            block = None
        elif not line.strip():
            raise InputError(path, lineno, "line of only whitespace; sentences are separated by "
                                           "an empty line")
        elif line.startswith("#"):
            if block is None:
                block = _Block(lineno, None, [])
            elif block.rows:
                raise InputError(path, lineno, "comment after a word line (comments go before "
                                               "the first word line of a sentence)")
            key, sep, value = line[1:].partition("=")
            if sep and key.strip() == "text":
                block.text = value.strip()
        else:
            block = block or _Block(lineno, None, [])
            block.rows.append((lineno, line))
    if block is not None:
        raise InputError(path, lineno, "the file ends inside a sentence: every sentence must be "
                                       "followed by an empty line (was the file cut short?)")


def _columns(path: str | Path, lineno: int, line: str) -> list[str]:
    """The 10 fields of a token line: none empty, none with whitespace at either end, and
    whitespace inside only FORM, LEMMA and MISC."""
    cols = line.split("\t")
    if len(cols) != N_COLUMNS:
        raise InputError(path, lineno, f"expected {N_COLUMNS} tab-separated columns, found "
                                       f"{len(cols)}")
    for name, value in zip(COLUMNS, cols):
        if not value:
            hint = "" if name in ("ID", "HEAD") else " (write _ for a missing value)"
            raise InputError(path, lineno, f"empty {name} column{hint}")
        if value[0].isspace() or value[-1].isspace():
            raise InputError(path, lineno, f"{name} {show(value)} begins or ends with whitespace")
        if name not in SPACES_ALLOWED and WHITESPACE.search(value):
            raise InputError(path, lineno, f"{name} {show(value)} contains whitespace")
    return cols


def _to_int(path: str | Path, lineno: int, column: str, value: str, digits: str) -> int:
    """``digits`` (ASCII digits, a part of the field ``value``) as a number; more than
    :data:`MAX_DIGITS` digits are an error naming ``column`` and ``value``, shortened."""
    if len(digits) > MAX_DIGITS:
        raise InputError(path, lineno, f"{column} {show(value)} is too large (a number has at "
                                       f"most {MAX_DIGITS} digits)")
    return int(digits)


def _number(path: str | Path, lineno: int, value: str, column: str) -> int:
    """A HEAD-like column: 0 or a positive number in ASCII digits (no sign, no leading zero)."""
    if not NUMBER.fullmatch(value):
        raise InputError(path, lineno, f"{column} {show(value)} is not a number 0, 1, 2, ... "
                                       f"(ASCII digits, no sign, no leading zero)")
    return _to_int(path, lineno, column, value, value)


def _misc_sent_idx(path: str | Path, lineno: int, misc: str) -> int | None:
    """The ``SentIdx=k`` value of a MISC column, if present."""
    for item in misc.split("|"):
        key, sep, value = item.partition("=")
        if sep and key == SENT_IDX:
            return _number(path, lineno, value, f"MISC {SENT_IDX}")
    return None


@dataclass
class _Tokens:
    """Where a block's token lines are: words read so far, multiword ranges and empty nodes."""

    n_words: int = 0
    range_end: int = 0             # last word covered by the last multiword range
    range_line: int = 0            # the line of that range
    open_range: str | None = None  # a range line read, its first word not yet
    empty_node: tuple[int, int] = (0, 0)  # last empty node i.j


def _check_token_id(path: str | Path, lineno: int, wid: str, seen: _Tokens) -> bool:
    """Check one ID against the lines before it; True for a word, False for a multiword range
    or an empty node (read, checked and skipped)."""
    expected = seen.n_words + 1
    if WORD_ID.fullmatch(wid):
        if _to_int(path, lineno, "ID", wid, wid) != expected:
            raise InputError(path, lineno, f"word ID {wid} where {expected} was expected "
                                           f"(IDs must be 1, 2, 3, ... in order)")
        seen.n_words, seen.open_range = expected, None
        return True
    if seen.open_range is not None:
        raise InputError(path, lineno, f"ID {show(wid)} right after the multiword range "
                                       f"{seen.open_range}, which must be followed by its first "
                                       f"word")
    if match := RANGE_ID.fullmatch(wid):
        _check_range(path, lineno, wid, [_to_int(path, lineno, "ID", wid, n)
                                         for n in match.groups()], seen)
        return False
    if match := EMPTY_NODE_ID.fullmatch(wid):
        i, j = (_to_int(path, lineno, "ID", wid, n) for n in match.groups())
        node = (i, j)
        after = seen.empty_node[1] if seen.empty_node[0] == seen.n_words else 0
        if node != (seen.n_words, after + 1):
            raise InputError(path, lineno, f"empty node {wid} where {seen.n_words}.{after + 1} "
                                           f"was expected (i.j follows word i; j = 1, 2, ...)")
        seen.empty_node = node
        return False
    raise InputError(path, lineno, f"ID {show(wid)} is not a word (1, 2, ...), a multiword range "
                                   f"(a-b) or an empty node (i.j)")


def _check_range(path: str | Path, lineno: int, wid: str, span: list[int],
                 seen: _Tokens) -> None:
    """Check the multiword range ``wid`` (``span``: its first and last word) against the lines
    before it and record it in ``seen``; that it ends at a word of the sentence is checked once
    the sentence is read."""
    first, last = span
    if last <= first:
        raise InputError(path, lineno, f"multiword range {wid} must span at least two words "
                                       f"(a-b with a < b)")
    if first <= seen.range_end:
        raise InputError(path, lineno, f"multiword range {wid} overlaps the multiword range on "
                                       f"line {seen.range_line} (ranges never share a word)")
    if first != seen.n_words + 1:
        raise InputError(path, lineno, f"multiword range {wid} must start at word "
                                       f"{seen.n_words + 1}: a range comes right before its "
                                       f"first word")
    seen.range_end, seen.range_line, seen.open_range = last, lineno, wid


def _block_sentence(path: str | Path, block: _Block) -> Sentence | None:
    """Turn a block into a validated Sentence (None for a comment-only block to skip)."""
    words: list[str] = []
    heads: list[int] = []
    deprels: list[str] = []
    upos: list[str] = []
    sent_ids: list[int | None] = []
    lines: list[int] = []
    seen = _Tokens()
    for lineno, line in block.rows:
        cols = _columns(path, lineno, line)
        if not _check_token_id(path, lineno, cols[0], seen):
            continue  # multiword-token range or empty node: not a word of the basic tree
        words.append(cols[1])
        upos.append(cols[3])
        heads.append(_number(path, lineno, cols[6], "HEAD"))
        deprels.append(cols[7])
        sent_ids.append(_misc_sent_idx(path, lineno, cols[9]))
        lines.append(lineno)
    if seen.range_end > len(words):  # ranges are ordered: only the last one can
        raise InputError(path, seen.range_line, f"multiword range ends after the last word "
                                                f"({len(words)}) of the sentence")
    if not words:
        if block.rows:
            raise InputError(path, block.rows[0][0], "sentence has multiword ranges or empty "
                                                     "nodes but no word lines")
        if block.text is None:
            return None
        if block.text:
            raise InputError(path, block.first_line, "sentence has a '# text' but no word lines")
        return Sentence.empty()
    problem = tree_problem(heads)
    if problem:
        raise InputError(path, lines[problem[0]], problem[1])
    return Sentence(words, heads, deprels, _optional_upos(upos),
                    _optional_sent_ids(path, lines, sent_ids))


def _optional_upos(upos: list[str]) -> list[str] | None:
    """UPOS column, or None when it is entirely ``_``."""
    return None if all(u == "_" for u in upos) else upos


def _optional_sent_ids(path: str | Path, lines: list[int],
                       sent_ids: list[int | None]) -> list[int] | None:
    """``SentIdx`` values, required on all words of a sentence or on none."""
    missing = [i for i, s in enumerate(sent_ids) if s is None]
    if len(missing) == len(sent_ids):
        return None
    if missing:
        raise InputError(path, lines[missing[0]], f"MISC has no {SENT_IDX}=k although other words "
                                                  f"of this sentence have one")
    return sent_ids  # type: ignore[return-value]


def read_conllu_numbered(path: str | Path, stream: IO[bytes] | None = None,
                         first_line: int = 1) -> Iterator[tuple[int, Sentence]]:
    """Like :func:`read_conllu`, yielding ``(first line of the block, sentence)`` pairs;
    ``first_line``: the line of the file that ``stream`` starts at (a piece of the file that
    begins with a block, read by a worker process)."""
    for block in _blocks(path, conllu_lines(path, stream), first_line):
        sentence = _block_sentence(path, block)
        if sentence is not None:
            sentence.origin = (str(path), block.first_line)
            yield block.first_line, sentence


def read_conllu(path: str | Path, stream: IO[bytes] | None = None) -> Iterator[Sentence]:
    """Yield the validated trees of a CoNLL-U file (plain or .gz), one per block.

    ``stream``: read this open binary stream instead (e.g. standard input), ``path`` naming it
    in messages (``<stdin>``). The rules are in this module's docstring.
    """
    for _, sentence in read_conllu_numbered(path, stream):
        yield sentence


def sentence_error(tree: Sentence | None, number: int, message: str) -> DepnmtError:
    """The one-line error about input sentence ``number`` (1-based), whose tree is ``tree``:
    ``FILE:LINE: message`` (an :class:`InputError` at the tree's :attr:`Sentence.origin`) for a
    tree read from a file, ``sentence N: message`` otherwise (a tree from a parser)."""
    origin = getattr(tree, "origin", None)
    if origin is None:
        return DepnmtError(f"sentence {number}: {message}")
    return InputError(origin[0], origin[1], message)


def read_conllu_input(path: Path | None) -> list[Sentence]:
    """All trees of ``path``, or of standard input (named ``<stdin>`` in messages) when None."""
    if path is not None:
        return list(read_conllu(path))
    return list(read_conllu("<stdin>", stdin_bytes()))


# ---------------------------------------------------------------------------------------------
# Writing

def _check_form(word: str) -> str:
    """A word as a FORM column (tabs and line breaks cannot be stored)."""
    if not word or any(c in word for c in "\t\n\r"):
        raise DepnmtError(f"token {word!r} cannot be written to CoNLL-U (empty, or contains a tab "
                          f"or line break)")
    return word


def format_sentence(sentence: Sentence) -> str:
    """One CoNLL-U block, including the blank line that ends it."""
    out = [f"# text = {sentence.text}"]
    for i, word in enumerate(sentence.words):
        upos = sentence.upos[i] if sentence.upos else "_"
        misc = f"{SENT_IDX}={sentence.sent_ids[i]}" if sentence.sent_ids is not None else "_"
        out.append(f"{i + 1}\t{_check_form(word)}\t_\t{upos or '_'}\t_\t_\t{sentence.heads[i]}\t"
                   f"{sentence.deprels[i] or '_'}\t_\t{misc}")
    return "\n".join(out) + "\n\n"


def write_conllu(path: str | Path, sentences: Iterable[Sentence]) -> int:
    """Atomically write ``sentences`` to ``path``; return how many were written."""
    n = 0
    with atomic_open(path) as fh:
        for sentence in sentences:
            fh.write(format_sentence(sentence))
            n += 1
    return n
