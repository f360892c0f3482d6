"""depnmt.stages.bpelearn learns subword-nmt's merges: compared with subword-nmt's own learn_bpe."""

import gzip
import io
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from subword_nmt import learn_bpe

from depnmt.stages import bpelearn
from depnmt.stages.bpe import learn_codes

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def subword_nmt_codes(counts: dict[str, int], merges: int, min_frequency: int,
                      monkeypatch) -> str:
    out = io.StringIO()
    monkeypatch.setattr(learn_bpe, "tqdm", lambda iterable, *a, **k: iterable, raising=False)
    learn_bpe.learn_bpe([f"{tok} {n}" for tok, n in counts.items()], out, merges,
                        min_frequency=min_frequency, is_dict=True)
    return out.getvalue()


def corpus_counts(paths, lines: int) -> Counter:
    counts: Counter = Counter()
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for _, line in zip(range(lines), f):
                counts.update(t for t in line.rstrip("\n").split(" ") if t)
    return counts


@pytest.mark.skipif(not (SHARED / "multi30k").is_dir(), reason="needs ../shared/data")
def test_same_merges_as_subword_nmt_on_real_text(monkeypatch):
    """Multi30k En+De (raw text, so punctuation stays attached and the vocabulary is long-tailed):
    the same 3,000 merges in the same order, through a return to the full statistics."""
    counts = corpus_counts([SHARED / "multi30k" / "train.en.gz", SHARED / "multi30k" / "train.de.gz"],
                           6000)
    built = []

    class Counted(bpelearn.PairStats):
        def __init__(self, freq):
            built.append(len(freq))
            super().__init__(freq)

    monkeypatch.setattr(bpelearn, "PairStats", Counted)
    mine = bpelearn.codes_text(bpelearn.learn_merges(counts, 3000))
    assert mine == subword_nmt_codes(counts, 3000, 2, monkeypatch)
    assert mine.count("\n") == 3001
    assert len(built) >= 2  # the pruned statistics were given up for the full ones


@pytest.mark.parametrize("min_frequency", [1, 2, 5])
def test_same_merges_on_awkward_tokens(monkeypatch, min_frequency):
    """Repeated symbols (pairs like "a a"), backslashes and regex characters, tokens with tabs
    and no-break spaces inside (subword-nmt's regex treats them as symbol boundaries), single
    characters, and an early stop when no pair is frequent enough."""
    rng = random.Random(7)
    alphabet = ["a", "b", "a", "\\", ".", "*", "\t", "\u00a0", "é", "ab"]
    counts: dict[str, int] = {}
    for _ in range(600):
        tok = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        counts[tok] = counts.get(tok, 0) + rng.choice([1, 1, 2, 3, 8, 40])
    counts.update({"aaaa": 50, "aaaaa": 30, "a\\\\b": 9})
    mine = bpelearn.codes_text(bpelearn.learn_merges(counts, 400, min_frequency))
    assert mine == subword_nmt_codes(counts, 400, min_frequency, monkeypatch)


def test_learn_codes_progress_and_nothing_to_merge():
    assert learn_codes(Counter({"a": 3, "b": 1}), 100) == "#version: 0.2\n"
    assert learn_codes(Counter({"ab": 3}), 100) == "#version: 0.2\na b</w>\n"


def test_pair_stats_matches_a_dict_under_random_updates():
    """best() is max(stats, key=lambda x: (stats[x], x)) and prune() is subword-nmt's prune_stats,
    after any sequence of additions, assignments and prunings."""
    rng = random.Random(3)
    pairs = [(a, b) for a in "abcdef" for b in "abcdef"]
    start = {p: rng.randint(0, 30) for p in rng.sample(pairs, 20)}
    stats = bpelearn.PairStats(start)
    reference: dict = defaultdict(int, start)
    big_mine: dict = dict(start)
    big_ref: dict = defaultdict(int, start)
    for step in range(3000):
        p = rng.choice(pairs)
        op = rng.random()
        if op < 0.6:
            delta = rng.randint(-12, 12)
            stats.add(p, delta)
            reference[p] += delta
        elif op < 0.9:
            value = rng.randint(-5, 40)
            stats.set(p, value)
            reference[p] = value
        else:
            threshold = rng.uniform(-5, 25)
            stats.prune(big_mine, threshold)
            learn_bpe.prune_stats(reference, big_ref, threshold)
            assert big_mine == dict(big_ref)
        assert stats.freq == dict(reference)
        if reference:
            assert stats.best() == max(reference, key=lambda x: (reference[x], x))
