"""CoNLL-U trees: the :class:`Sentence` record, a validating reader and an atomic writer.

What depnmt writes (standard CoNLL-U: 10 tab-separated columns, blocks ended by a blank line):

* one block per line of the tokenized text, in the same order;
* a ``# text = ...`` comment holding the tokens joined by single spaces (the tokenized line);
* ID, FORM, UPOS (``_`` when unknown), HEAD, DEPREL; LEMMA, XPOS, FEATS and DEPS are ``_``;
* MISC ``SentIdx=k`` on every word when the parser reported sentences (see
  :mod:`depnmt.parse.projection`): which of the parser's sentences (0-based) the word came from.

**Empty lines.** CoNLL-U has no empty sentence, but a text line may be empty. It is written as a
block holding only the comment ``# text =`` (empty value) and the blank line that ends the block.
:func:`read_conllu` reads such a block back as an empty :class:`Sentence`, so the one-block-per-line
correspondence survives a round trip; standard readers (stanza, the ``conllu`` package, UDPipe)
accept the file and simply see no sentence there. A comment-only block without a ``# text``
comment (e.g. a file header) is skipped; one with a non-empty ``# text`` is an error.

**What the reader accepts** (anything else raises :class:`~depnmt.errors.InputError` naming the
file and the offending line): exactly 10 tab-separated columns; word ids 1, 2, ..., n in order;
multiword-token ranges (``1-2``) and empty nodes (``1.1``) are skipped, so a sentence holds the
syntactic words (``zum`` in German becomes ``zu dem``); HEAD an integer in 0..n; exactly one
word with HEAD 0; no cycles (every word reaches the root).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import DepnmtError, InputError
from ..textio import atomic_open, iter_lines

N_COLUMNS = 10
SENT_IDX = "SentIdx"


@dataclass
class Sentence:
    """One dependency tree over ``words`` (or, as a backend's raw output, a forest).

    ``heads[i]`` is the head of word ``i + 1`` in CoNLL-U convention: 1-based, 0 for the root.
    ``sent_ids[i]`` is the (0-based) parser sentence word ``i + 1`` came from, when known.
    """

    words: list[str]
    heads: list[int]
    deprels: list[str]
    upos: list[str] | None = None
    sent_ids: list[int] | None = None

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

@dataclass
class _Block:
    """The raw lines of one CoNLL-U block."""

    first_line: int
    text: str | None
    rows: list[tuple[int, list[str]]]


def _blocks(path: str | Path) -> Iterator[_Block]:
    """Split a CoNLL-U file into blocks of comments and word rows."""
    block = _Block(0, None, [])
    for lineno, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            if block.first_line:
                yield block
            block = _Block(0, None, [])
            continue
        if not block.first_line:
            block.first_line = lineno
        if line.startswith("#"):
            key, sep, value = line[1:].partition("=")
            if sep and key.strip() == "text":
                block.text = value.strip()
        else:
            block.rows.append((lineno, line.split("\t")))
    if block.first_line:
        yield block


def _int_field(path: str | Path, lineno: int, value: str, column: str) -> int:
    """Parse an integer column or raise an InputError naming the line."""
    try:
        return int(value)
    except ValueError:
        raise InputError(path, lineno, f"{column} '{value}' is not an integer") from None


def _misc_sent_idx(path: str | Path, lineno: int, misc: str) -> int | None:
    """The ``SentIdx=k`` value of a MISC column, if present."""
    for item in misc.split("|"):
        key, sep, value = item.partition("=")
        if sep and key == SENT_IDX:
            return _int_field(path, lineno, value, f"MISC {SENT_IDX}")
    return None


def _block_sentence(path: str | Path, block: _Block) -> Sentence | None:
    """Turn a block into a validated Sentence (None for a comment-only block to skip)."""
    words: list[str] = []
    heads: list[int] = []
    deprels: list[str] = []
    upos: list[str] = []
    sent_ids: list[int | None] = []
    lines: list[int] = []
    for lineno, cols in block.rows:
        if len(cols) != N_COLUMNS:
            raise InputError(path, lineno, f"expected {N_COLUMNS} tab-separated columns, found "
                                           f"{len(cols)}")
        wid = cols[0]
        if "-" in wid or "." in wid:
            continue  # multiword-token range or empty node: not a word of the basic tree
        if _int_field(path, lineno, wid, "ID") != len(words) + 1:
            raise InputError(path, lineno, f"word ID {wid} where {len(words) + 1} was expected "
                                           f"(IDs must be 1, 2, 3, ... in order)")
        words.append(cols[1])
        upos.append(cols[3])
        heads.append(_int_field(path, lineno, cols[6], "HEAD"))
        deprels.append(cols[7])
        sent_ids.append(_misc_sent_idx(path, lineno, cols[9]))
        lines.append(lineno)
    if not words:
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


def read_conllu_numbered(path: str | Path) -> Iterator[tuple[int, Sentence]]:
    """Like :func:`read_conllu`, yielding ``(first line of the block, sentence)`` pairs."""
    for block in _blocks(path):
        sentence = _block_sentence(path, block)
        if sentence is not None:
            yield block.first_line, sentence


def read_conllu(path: str | Path) -> Iterator[Sentence]:
    """Yield the validated trees of a CoNLL-U file (plain or .gz), one per block."""
    for _, sentence in read_conllu_numbered(path):
        yield sentence


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
