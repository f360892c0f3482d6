"""An independent strict CoNLL-U oracle and mutators of real UD sentences, for fuzzing the reader.

Shared by ``tests/unit/test_conllu_fuzz.py`` (a few hundred cases) and ``bench/fuzz_conllu.py``
(the long run). The oracle implements the rules listed in :mod:`depnmt.core.conllu` a second
time, from the UD format description, without any of the reader's code: whole-text line
splitting, string methods instead of regular expressions, checks on the finished token list
instead of a running state. The reader must accept exactly what the oracle accepts and read the
same words, heads and relations.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

DIGITS = "0123456789"
NO_SPACE_COLUMNS = (0, 3, 4, 5, 6, 7, 8)   # all but FORM, LEMMA, MISC


class Invalid(Exception):
    """The oracle rejects the file; ``line`` is where (1-based)."""

    def __init__(self, line: int, why: str):
        super().__init__(f"{line}: {why}")
        self.line = line


def _natural(s: str, zero: bool = True) -> bool:
    """ASCII digits, no sign, no leading zero (``0`` itself only if ``zero``), at most 9 of them
    (longer numbers are too large)."""
    if not s or len(s) > 9 or any(c not in DIGITS for c in s):
        return False
    if s[0] == "0":
        return zero and s == "0"
    return True


def _kind(wid: str) -> tuple:
    """("word", k) | ("range", a, b) | ("empty", i, j); raises ValueError for anything else."""
    if _natural(wid, zero=False):
        return ("word", int(wid))
    for sep, kind in (("-", "range"), (".", "empty")):
        parts = wid.split(sep)
        if len(parts) == 2 and _natural(parts[0], zero=kind == "empty") \
                and _natural(parts[1], zero=False):
            return (kind, int(parts[0]), int(parts[1]))
    raise ValueError(wid)


def _tokens(rows: list[tuple[int, str]]) -> list[tuple[int, tuple, list[str]]]:
    """Per token line: (line, kind, columns), after the per-line format rules."""
    tokens = []
    for no, line in rows:
        cols = line.split("\t")
        if len(cols) != 10:
            raise Invalid(no, "column count")
        for k, col in enumerate(cols):
            if col == "" or col[0].isspace() or col[-1].isspace():
                raise Invalid(no, "empty column or whitespace at its ends")
            if k in NO_SPACE_COLUMNS and any(c.isspace() for c in col):
                raise Invalid(no, "whitespace inside a column")
        try:
            tokens.append((no, _kind(cols[0]), cols))
        except ValueError:
            raise Invalid(no, "ID") from None
    return tokens


def _check_order(tokens: list) -> list:
    """The word tokens, after the ID order rules for words, ranges and empty nodes."""
    words = [t for t in tokens if t[1][0] == "word"]
    for k, (no, kind, _) in enumerate(words, start=1):
        if kind[1] != k:
            raise Invalid(no, "word IDs not 1..n")
    last_end = 0
    for pos, (no, kind, _) in enumerate(tokens):
        before = sum(1 for t in tokens[:pos] if t[1][0] == "word")
        if kind[0] == "range":
            nxt = tokens[pos + 1][1] if pos + 1 < len(tokens) else None
            if nxt != ("word", kind[1]) or kind[2] <= kind[1] or kind[2] > len(words) \
                    or kind[1] <= last_end:
                raise Invalid(no, "range")
            last_end = kind[2]
        elif kind[0] == "empty":
            same = sum(1 for t in tokens[:pos] if t[1][0] == "empty" and t[1][1] == kind[1])
            if kind[1] != before or kind[2] != same + 1:
                raise Invalid(no, "empty node")
    return words


def _sentence(rows: list[tuple[int, str]]):
    """(words, heads, deprels) of one block, or None for a comment-only block to skip."""
    n_comments = 0
    while n_comments < len(rows) and rows[n_comments][1][0] == "#":
        n_comments += 1
    text = None
    for no, line in rows[:n_comments]:
        m = re.fullmatch(r"#\s*text\s*=(.*)", line, re.DOTALL)
        text = m.group(1).strip() if m else text
    for no, line in rows[n_comments:]:
        if line[0] == "#":
            raise Invalid(no, "comment after a token line")
    tokens = _tokens(rows[n_comments:])
    words = _check_order(tokens)
    if not words:
        if tokens or text:
            raise Invalid(rows[0][0], "no words")
        return None if text is None else ([], [], [])
    n = len(words)
    heads = []
    for no, _, cols in words:
        if not _natural(cols[6]) or int(cols[6]) > n:
            raise Invalid(no, "HEAD")
        heads.append(int(cols[6]))
    if heads.count(0) != 1:
        raise Invalid(words[0][0], "roots")
    for start in range(1, n + 1):
        node, steps = start, 0
        while node != 0:
            node, steps = heads[node - 1], steps + 1
            if steps > n:
                raise Invalid(words[start - 1][0], "cycle")
    marks = []
    for no, _, cols in words:
        values = [item[len("SentIdx="):] for item in cols[9].split("|")
                  if item.startswith("SentIdx=")]
        if values and not _natural(values[0]):
            raise Invalid(no, "SentIdx")
        marks.append(bool(values))
    if any(marks) and not all(marks):
        raise Invalid(words[0][0], "SentIdx on some words only")
    return [c[1] for _, _, c in words], heads, [c[7] for _, _, c in words]


def oracle(data: bytes) -> list[tuple[list[str], list[int], list[str]]]:
    """The (words, heads, deprels) of every sentence of a valid file; raises Invalid."""
    text = data.decode("utf-8", errors="replace")
    lines = re.split(r"\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()                    # the text after the last line ending
    if lines and lines[0][:1] == "\ufeff":
        lines[0] = lines[0][1:]
    sentences, block = [], []
    for no, line in enumerate(lines, start=1):
        if "\x00" in line:
            raise Invalid(no, "NUL")
        if line == "":
            if block:
                sentence = _sentence(block)
                if sentence is not None:
                    sentences.append(sentence)
            block = []
        elif line.strip() == "":
            raise Invalid(no, "whitespace-only line")
        else:
            block.append((no, line))
    if block:
        raise Invalid(len(lines), "no empty line after the last sentence")
    return sentences


def line_count(data: bytes) -> int:
    """Lines in the file as the oracle counts them (for checking error line numbers)."""
    lines = re.split(r"\r\n|\r|\n", data.decode("utf-8", errors="replace"))
    return len(lines) - (lines[-1] == "")


# ---------------------------------------------------------------------------------------------
# Real sentences and their mutations

ODD_NUMBERS = ["1_0", "\u0662", "+2", " 3", "3 ", "01", "00", "3-", "1.", "-1", "2.0", "1e1",
               "\u00b2", "\uff13", "0x1", "1-1", "2-1", "0.1", "1.1", "0", "x", "_", "", "10",
               "99", "1-99", "1.0", "1..2", "1-2-3", "\u0967", "٣", "1\u00a0", "1234567890",
               "123456789", "9" * 5000, "1-" + "9" * 5000, "9" * 5000 + ".1", "2-2"]
ODD_TEXT = ["", " ", "\t", "_", "a b", " a", "a ", "\x0b", "\x0c", "\u2028", "\x85", "\u00a0",
            "\x00", "#", "x\x1cy", "SentIdx=1", "SentIdx=01", "SentIdx=\u0662",
            "SentIdx=" + "9" * 5000]


def load_sentences(ud_dir: Path) -> list[list[str]]:
    """The sentences of every ``*.conllu`` in ``ud_dir``, each as its lines (no blank line)."""
    sentences = []
    for path in sorted(ud_dir.glob("*.conllu")):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if block.strip():
                sentences.append(block.strip("\n").split("\n"))
    return sentences


def _set_field(rng: random.Random, lines: list[str], column: int, values: list[str]) -> None:
    rows = [k for k, line in enumerate(lines) if line.count("\t") == 9]
    if rows:
        k = rng.choice(rows)
        cols = lines[k].split("\t")
        cols[column] = rng.choice(values)
        lines[k] = "\t".join(cols)


def _any_line(rng: random.Random, lines: list[str]) -> int:
    return rng.randrange(len(lines)) if lines else 0


def _insert_range_or_empty_node(rng: random.Random, lines: list[str]) -> None:
    """A multiword range before a word or an empty node after it, often valid, often just
    past the sentence's end or misnumbered."""
    def wid(line: str) -> str:
        first = line.split("\t", 1)[0]
        return first if first and all(c in DIGITS for c in first) else ""

    words = [k for k, line in enumerate(lines) if wid(line)]
    if not words:
        return
    k = rng.choice(words)
    a = int(wid(lines[k]))
    end = k
    while end < len(lines) and lines[end]:
        end += 1
    n = max(int(wid(line)) for line in lines[k:end] if wid(line))
    if rng.random() < 0.6:
        new = f"{a}-{rng.choice([a, a + 1, a + 2, n, n + 1, a - 1])}"
    else:
        new, k = f"{rng.choice([a, a, a - 1, a + 1])}.{rng.choice([1, 1, 2])}", k + 1
    lines.insert(k, f"{new}\tx\t_\t_\t_\t_\t_\t_\t_\t_")


def _mutate_lines(rng: random.Random, lines: list[str]) -> None:
    """One random change to the list of lines (blank lines included)."""
    op = rng.randrange(19)
    k = _any_line(rng, lines)
    if not lines:
        lines.append(rng.choice(ODD_TEXT))
    elif op == 0:
        del lines[k]
    elif op == 1:
        lines.insert(k, lines[k])
    elif op == 2:
        j = _any_line(rng, lines)
        lines[k], lines[j] = lines[j], lines[k]
    elif op == 3:
        _set_field(rng, lines, 0, ODD_NUMBERS + [str(rng.randrange(1, 40))])
    elif op == 4:
        _set_field(rng, lines, 6, ODD_NUMBERS + [str(rng.randrange(0, 40))])
    elif op == 5:                                           # a valid-looking head: cycles, roots
        _set_field(rng, lines, 6, [str(rng.randrange(0, 8))])
    elif op == 6:
        _set_field(rng, lines, rng.randrange(10), ODD_TEXT)
    elif op == 7:                                           # a column removed or added
        cols = lines[k].split("\t")
        if rng.random() < 0.5 and len(cols) > 1:
            del cols[rng.randrange(len(cols))]
        else:
            cols.insert(rng.randrange(len(cols) + 1), "_")
        lines[k] = "\t".join(cols)
    elif op == 8:
        lines.insert(k, rng.choice([" ", "\t", "  \t", "\x0c", "\u3000"]))
    elif op == 9:
        lines.insert(k, rng.choice(["# note", "#", "# text = moved", "# text ="]))
    elif op == 10:
        lines.insert(k, "")
    elif op == 11 or op >= 16:                              # (more often: rare otherwise)
        _insert_range_or_empty_node(rng, lines)
    elif op == 12:
        _set_field(rng, lines, 9, ["SentIdx=0", "SentIdx=1", "SentIdx=01", "SentIdx=", "_"])
    elif op == 13:
        lines[k] = lines[k] + rng.choice([" ", "\t", "\t_", "\x00"])
    elif op == 14:
        del lines[k:k + rng.randrange(1, 6)]
    else:                                                   # a field's value moved to another
        _set_field(rng, lines, rng.choice([1, 7]), ["", "_", "root", "a\tb"])


def _serialise(rng: random.Random, lines: list[str]) -> bytes:
    """The lines joined with LF, CRLF, lone CR or a mix; sometimes cut, a NUL or BOM added."""
    style = rng.randrange(5)
    endings = ["\n", "\r\n", "\r"]
    if style < 3:
        text = "".join(line + endings[style] for line in lines)
    else:
        text = "".join(line + rng.choice(endings) for line in lines)
    op = rng.randrange(12)
    if op == 0 and text:
        text = text[:rng.randrange(len(text))]               # a cut file
    elif op == 1:
        text = text.rstrip("\r\n") + rng.choice(["", "\n"])  # no blank line at the end
    elif op == 2:
        k = rng.randrange(len(text) + 1)
        text = text[:k] + "\x00" + text[k:]
    elif op == 3:
        text = "\ufeff" + text
    elif op == 4:
        text = text + rng.choice(["\n", "\n\n", "\r\n", "\r"])  # extra empty lines
    return text.encode("utf-8")


def make_case(rng: random.Random, sentences: list[list[str]]) -> bytes:
    """A file of 1-3 consecutive real sentences with 0-3 random changes (a quarter unchanged)."""
    start = rng.randrange(len(sentences))
    lines: list[str] = []
    for sentence in sentences[start:start + rng.randint(1, 3)]:
        lines.extend(sentence)
        lines.append("")
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        _mutate_lines(rng, lines)
    return _serialise(rng, lines)
