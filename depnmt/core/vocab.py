"""Token vocabularies: ``token<TAB>count`` files, special tokens first.

Indices 0–3 are always ``<pad>``, ``<unk>``, ``<s>`` (BOS), ``</s>`` (EOS).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from depnmt.core.errors import InputError
from depnmt.core.textio import atomic_open, iter_lines

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


class Vocab:
    """Bidirectional token <-> index map with counts from the training data."""

    def __init__(self, tokens: Sequence[str], counts: Sequence[int] | None = None):
        self.itos: list[str] = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        counts = list(counts) if counts is not None else [0] * len(tokens)
        self.counts: list[int] = [0] * len(SPECIALS) + [c for t, c in zip(tokens, counts)
                                                         if t not in SPECIALS]

    @classmethod
    def build(cls, counter: Counter, min_freq: int = 1, max_size: int | None = None) -> "Vocab":
        """Tokens with count ≥ ``min_freq``, most frequent first (ties alphabetical)."""
        items = sorted(((t, c) for t, c in counter.items() if c >= min_freq and t not in SPECIALS),
                       key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            items = items[:max_size]
        return cls([t for t, _ in items], [c for _, c in items])

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        tokens, counts = [], []
        for lineno, line in enumerate(iter_lines(path), start=1):
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[1].isdigit():
                raise InputError(path, lineno, "expected `token<TAB>count`")
            tokens.append(fields[0])
            counts.append(int(fields[1]))
        return cls(tokens, counts)

    def save(self, path: str | Path) -> None:
        with atomic_open(path) as fh:
            for tok, cnt in zip(self.itos, self.counts):
                fh.write(f"{tok}\t{cnt}\n")

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Indices of ``tokens`` (``<unk>`` for unknown ones); no BOS/EOS added."""
        return [self.stoi.get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Tokens of ``ids``; stops at EOS and drops PAD/BOS when ``strip_specials``."""
        out = []
        for i in ids:
            i = int(i)
            if strip_specials:
                if i == EOS:
                    break
                if i in (PAD, BOS):
                    continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK])
        return out
