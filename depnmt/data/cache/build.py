"""Building cache entries from the text files, in pieces, on several cores.

A file is cut into contiguous pieces of whole lines (a CoNLL-U file: of whole blocks) by
byte offsets (:func:`pieces`); worker processes turn the pieces into arrays
(:func:`text_piece`, :func:`tree_piece`) and the parent appends them in file order, so the
entry is the same for any number of processes and the parent never holds more than a few
pieces. A text entry (``text-SPLIT.LANG``) holds a subword file's token ids with the
continuation mark of each subword, the offsets of its lines and a digest of each line's
words; a tree entry (``trees-SPLIT.LANG``) the words of a CoNLL-U file (head, relation id,
UPOS id, parser sentence), the offsets of its trees, the line where each tree starts and the
names of the relations and UPOS tags. A tree entry is made against the text entry of the
same side: the trees must be as many as the lines and have the lines' words, else a one-line
error names the CoNLL-U file and line, as loading the trees in memory always did.
"""

from __future__ import annotations

import hashlib
import io
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from depnmt.core.errors import InputError
from depnmt.core.log import track
from depnmt.core.subwords import SEPARATOR, merge_subwords
from depnmt.core.textio import iter_lines
from depnmt.core.vocab import UNK, Vocab
from depnmt.core.workers import worker_pool
from depnmt.data.cache.arrays import HASHES, LINES, OFFSETS, TOKENS, WORDS, ArrayWriter

PIECE_BYTES = 8 << 20        # a worker's piece of a file; small enough to keep all cores busy
Piece = tuple[Path, int, int, int]      # (file, first byte, end byte, number of its first line)


def words_digest(words: list[str]) -> int:
    """A 64-bit digest of a line's words (compares a tree's words with its text line)."""
    data = "\x1f".join(words).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def pieces(path: Path, blocks: bool = False, size: int | None = None) -> list[Piece]:
    """``path`` cut into pieces of about ``size`` bytes (default :data:`PIECE_BYTES`), each
    ending after a line end (with ``blocks``, after an empty line: CoNLL-U blocks stay whole),
    with their first lines."""
    size = size or PIECE_BYTES
    total = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as fh:
        while cuts[-1] + size < total:
            fh.seek(cuts[-1] + size)
            fh.readline()                                   # the rest of a line
            while blocks and fh.readline() not in (b"\n", b"\r\n", b""):
                pass
            if fh.tell() >= total:
                break
            cuts.append(fh.tell())
        cuts.append(total)
        first, out = 1, []
        for start, end in zip(cuts, cuts[1:]):
            out.append((path, start, end, first))
            fh.seek(start)
            first += count_newlines(fh, end - start)
    return out


def count_newlines(fh, n: int) -> int:
    count = 0
    while n > 0:
        block = fh.read(min(n, 1 << 24))
        if not block:
            break
        count += block.count(b"\n")
        n -= len(block)
    return count


def read_piece(piece: Piece) -> io.BytesIO:
    path, start, end, _ = piece
    with open(path, "rb") as fh:
        fh.seek(start)
        return io.BytesIO(fh.read(end - start))


# -- workers ---------------------------------------------------------------------------------

def text_piece(stoi: dict[str, int], piece: Piece) -> dict[str, np.ndarray]:
    """The token codes (``id << 1 | continues``, ids of the vocabulary ``stoi``), line
    lengths and word digests of a piece."""
    codes: list[int] = []
    lengths: list[int] = []
    digests: list[int] = []
    for line in iter_lines(piece[0], read_piece(piece)):
        subwords = line.split()
        codes += [stoi.get(s, UNK) << 1 | s.endswith(SEPARATOR) for s in subwords]
        lengths.append(len(subwords))
        digests.append(words_digest(merge_subwords(subwords)))
    return {"tokens": np.array(codes, TOKENS), "lengths": np.array(lengths, OFFSETS),
            "digests": np.array(digests, HASHES)}


def tree_piece(_: Any, piece: Piece) -> dict[str, Any]:
    """The words (:data:`WORDS` records, relation and UPOS ids local to the piece, with their
    names), tree lengths, first lines and word digests of a piece of a CoNLL-U file."""
    from depnmt.core.conllu import read_conllu_numbered
    rels: dict[str, int] = {}
    tags: dict[str, int] = {}
    fields: dict[str, list[int]] = {"head": [], "rel": [], "upos": [], "sent": []}
    lengths, lines, digests = [], [], []
    for lineno, tree in read_conllu_numbered(piece[0], read_piece(piece), piece[3]):
        n = len(tree.words)
        fields["head"] += tree.heads
        fields["rel"] += [rels.setdefault(r, len(rels)) for r in tree.deprels]
        fields["upos"] += ([tags.setdefault(u, len(tags)) for u in tree.upos] if tree.upos
                           else [-1] * n)
        fields["sent"] += tree.sent_ids or [-1] * n
        lengths.append(n)
        lines.append(lineno)
        digests.append(words_digest(list(tree.words)))
    words = np.empty(len(fields["head"]), WORDS)
    for name, values in fields.items():
        words[name] = values
    return {"words": words, "lengths": np.array(lengths, OFFSETS),
            "lines": np.array(lines, LINES), "digests": np.array(digests, HASHES),
            "rels": list(rels), "tags": list(tags)}


def run_pieces(work: Callable[[Any, Piece], dict], todo: list[Piece], jobs: int,
               state: Any, what: str) -> Iterator[dict]:
    """``work(state, piece)`` over ``todo`` in ``jobs`` worker processes
    (:func:`depnmt.core.workers.worker_pool`, forked: ``train_model`` called from a script without
    a ``__main__`` guard must not re-run the script in spawned workers), results in file
    order, with a progress bar."""
    with worker_pool(min(jobs, len(todo)), state, start="fork") as pool:
        yield from track(pool.map(work, todo), what, total=len(todo))


# -- entries ---------------------------------------------------------------------------------

def build_text(source: Path, vocab_path: Path, out: Path, jobs: int) -> dict[str, Any]:
    """Write the text entry of ``source`` (a subword file) into ``out``; returns its meta."""
    writers = {"tokens.bin": ArrayWriter(out / "tokens.bin", TOKENS),
               "offsets.bin": ArrayWriter(out / "offsets.bin", OFFSETS),
               "digests.bin": ArrayWriter(out / "digests.bin", HASHES)}
    writers["offsets.bin"].append(np.zeros(1, OFFSETS))
    end = 0
    stoi = Vocab.load(vocab_path).stoi
    for part in run_pieces(text_piece, pieces(source), jobs, stoi, f"cache {source.name}"):
        writers["tokens.bin"].append(part["tokens"])
        writers["offsets.bin"].append(end + np.cumsum(part["lengths"]))
        writers["digests.bin"].append(part["digests"])
        end += int(part["lengths"].sum())
    arrays = {name: w.close() for name, w in writers.items()}
    return {"kind": "text", "lines": arrays["digests.bin"]["count"], "arrays": arrays}


def build_trees(conllu: Path, against: tuple[Path, Path, int], out: Path, jobs: int
                ) -> dict[str, Any]:
    """Write the tree entry of ``conllu`` into ``out``, checked against its side's text
    (``against``: the subword file, its text entry and line count: as many trees as lines,
    each with its line's words); returns its meta."""
    source, text, text_lines = against
    writers = {"words.bin": ArrayWriter(out / "words.bin", WORDS),
               "offsets.bin": ArrayWriter(out / "offsets.bin", OFFSETS),
               "lines.bin": ArrayWriter(out / "lines.bin", LINES)}
    writers["offsets.bin"].append(np.zeros(1, OFFSETS))
    names: dict[str, dict[str, int]] = {"rels": {}, "tags": {}}
    end = trees = 0
    for part in run_pieces(tree_piece, pieces(conllu, blocks=True), jobs, None,
                           f"cache {conllu.name}"):
        count = len(part["lengths"])
        fits = min(count, text_lines - trees)
        expected = np.fromfile(text / "digests.bin", HASHES, fits, offset=trees * 8)
        bad = np.flatnonzero(expected != part["digests"][:fits])
        if len(bad):
            raise word_mismatch(conllu, source, trees + int(bad[0]),
                                int(part["lines"][bad[0]]))
        if fits < count:
            raise InputError(conllu, int(part["lines"][fits]),
                             f"has more trees than the text has lines ({text_lines})")
        words = part["words"]
        for key, field in (("rels", "rel"), ("tags", "upos")):
            ids = np.array([names[key].setdefault(n, len(names[key])) for n in part[key]]
                           + [-1], np.int16)
            words[field] = ids[words[field]]            # local ids -> the entry's (-1 stays)
        writers["words.bin"].append(words)
        writers["offsets.bin"].append(end + np.cumsum(part["lengths"]))
        writers["lines.bin"].append(part["lines"])
        end += int(part["lengths"].sum())
        trees += count
    if trees < text_lines:
        raise InputError(conllu, None, f"has {trees} trees but the text has {text_lines} lines")
    return {"kind": "trees", "trees": trees, "rels": list(names["rels"]),
            "tags": list(names["tags"]), "arrays": {n: w.close() for n, w in writers.items()}}


def word_mismatch(conllu: Path, source: Path, index: int, lineno: int) -> InputError:
    """The error for tree ``index`` (0-based), at ``lineno`` of ``conllu``, whose words are not
    those of line ``index + 1`` of the subword file ``source``."""
    from depnmt.core.conllu import read_conllu_numbered
    line = next(islice(iter_lines(source), index, None), "")
    words = merge_subwords(line.split())
    tree = next(t for n, t in read_conllu_numbered(conllu) if n == lineno)
    return InputError(conllu, lineno, f"tree {index + 1} has words {tree.words[:8]}… but "
                                      f"{source}:{index + 1} has {words[:8]}…")
