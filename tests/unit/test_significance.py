"""``depnmt/evaluation/significance.py``: statistics over runs on inputs whose answers are known."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from depnmt.evaluation import significance as sig
from depnmt.evaluation.score import make_metrics

BLEU = make_metrics(["bleu"])["bleu"]


def test_mean_and_sample_sd_of_known_values():
    assert sig.mean_sd([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == (5.0, pytest.approx(
        math.sqrt(32 / 7)))                                            # n − 1, as MultEval
    assert sig.mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert sig.mean_sd([3.5]) == (3.5, None)


def test_t_quantiles_match_tables():
    # two-sided 95 % critical values of Student's t (any statistics table)
    for df, value in ((1, 12.706204736), (2, 4.302652730), (4, 2.776445105), (10, 2.228138852),
                      (30, 2.042272456)):
        assert sig.t_quantile(0.975, df) == pytest.approx(value, abs=1e-8)
    assert sig.t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)


def test_mean_difference_interval_on_known_numbers():
    # base 1, 2, 3 (mean 2, sd 1); other 3, 4, 5 (mean 4, sd 1): se = sqrt(2/3), df = 4
    interval = sig.mean_difference([1.0, 2.0, 3.0], [3.0, 4.0, 5.0])
    half = 2.776445105 * math.sqrt(2 / 3)
    assert interval.difference == 2.0
    assert (interval.low, interval.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    # Welch's df with unequal variances: sd 1 (n 3) and sd 3 (n 3) -> df = (1/3+3)²/((1/9+9)/2)
    interval = sig.mean_difference([1.0, 2.0, 3.0], [0.0, 3.0, 6.0])
    df = (1 / 3 + 3) ** 2 / ((1 / 9 + 9) / 2)
    assert interval.high - interval.difference == pytest.approx(
        sig.t_quantile(0.975, df) * math.sqrt(1 / 3 + 3))
    assert sig.mean_difference([1.0], [2.0, 3.0]).low is None     # one run: no interval
    assert sig.mean_interval([1.0, 2.0, 3.0]) == (pytest.approx(2 - 4.302652730 / math.sqrt(3)),
                                                  pytest.approx(2 + 4.302652730 / math.sqrt(3)))


def corpus(n: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = "the a dog cat runs sits on mat park red big small".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(n)]


def degrade(line: str, rng: random.Random, drop: int) -> str:
    words = line.split()
    for _ in range(min(drop, len(words) - 1)):
        words.pop(rng.randrange(len(words)))
    return " ".join(words)


def stats(refs: list[str], runs: list[list[str]]) -> np.ndarray:
    return np.array([BLEU._extract_corpus_statistics(hyps, [refs]) for hyps in runs])


def test_identical_systems_give_p_one():
    refs = corpus()
    rng = random.Random(1)
    runs = [[degrade(r, rng, 2) for r in refs] for _ in range(3)]
    a = stats(refs, runs)
    assert sig.stratified_approximate_randomization(BLEU, a, a.copy(), shuffles=200) == 1.0
    # MultEval counts only strictly larger differences: identical systems sit at the floor
    assert sig.stratified_approximate_randomization(BLEU, a, a.copy(), shuffles=200,
                                                    count_ties=False) == 1 / 201


def test_constant_sentence_level_gain_gives_the_floor():
    """B is A with every sentence better (the reference itself): no shuffle of the runs'
    hypotheses comes near the observed difference, so p = 1 / (R + 1)."""
    refs = corpus()
    rng = random.Random(2)
    a = stats(refs, [[degrade(r, rng, 3) for r in refs] for _ in range(3)])
    b = stats(refs, [refs for _ in range(3)])
    for shuffles in (99, 200):
        assert sig.stratified_approximate_randomization(BLEU, a, b, shuffles) == 1 / (shuffles + 1)


def test_runs_of_the_same_noise_give_a_large_p():
    """Two systems whose runs are draws of the same noisy process: p far from the floor."""
    refs = corpus(120)
    rng = random.Random(3)
    draw = lambda: [degrade(r, rng, rng.randint(0, 4)) for r in refs]   # noqa: E731
    a, b = stats(refs, [draw() for _ in range(3)]), stats(refs, [draw() for _ in range(3)])
    assert sig.stratified_approximate_randomization(BLEU, a, b, shuffles=300) > 0.05


def test_shuffles_follow_multeval():
    """The batched sums equal MultEval's row loop (X takes B where swap is set, at the permuted
    run; Y the other system at the inverse permutation); with two runs X and Y split the 2N
    hypotheses of a sentence, with three a 3-cycle can give both the same one (as MultEval)."""
    rng = np.random.default_rng(0)
    for runs in (1, 2, 3, 4):
        a, b = rng.integers(0, 50, (runs, 7, 5)).astype(float), rng.integers(0, 50, (runs, 7, 5)
                                                                              ).astype(float)
        swap, perm = sig.draw_shuffles(runs, 7, 20, rng)
        x, y = sig.shuffled_sums(a, b, swap, perm)
        for k in range(20):
            lx, ly = sig.literal_sums(a, b, swap[k], perm[k])
            assert np.array_equal(x[k], lx) and np.array_equal(y[k], ly)
        assert all(sorted(perm[k, :, i]) == list(range(runs)) for k in range(20) for i in range(7))
    # tagging every hypothesis by a power of two shows which ones X and Y took
    tags = 2.0 ** np.arange(12).reshape(2, 2, 3, 1)          # [system, run, sentence, 1]
    swap, perm = sig.draw_shuffles(2, 3, 30, rng)
    x, y = sig.shuffled_sums(tags[0], tags[1], swap, perm)
    assert (x + y == tags.sum()).all()                         # two runs: a partition
    tags = 2.0 ** np.arange(18).reshape(2, 3, 3, 1)
    swap, perm = sig.draw_shuffles(3, 3, 200, rng)
    x, y = sig.shuffled_sums(tags[0], tags[1], swap, perm)
    assert (x + y != tags.sum()).any()                         # three runs: not always
    swap, _ = sig.draw_shuffles(1, 400, 1, np.random.default_rng(1))
    assert 140 < swap.sum() < 260                              # a fair coin per sentence


def test_tests_shuffled_together_give_each_its_own_p(monkeypatch):
    """A report's tests share their shuffles (one draw for all): every p-value is the one the
    test gets alone, over several chunks of draws, two metrics and two shapes of runs."""
    monkeypatch.setattr(sig, "_CHUNK_CELLS", 900)     # 90 × 3 × 120 cells: several chunks
    chrf = make_metrics(["chrf"])["chrf"]
    refs = corpus(120)
    rng = random.Random(5)
    draw = lambda runs, drop: [[degrade(r, rng, rng.randint(0, drop)) for r in refs]  # noqa: E731
                               for _ in range(runs)]
    systems = [draw(3, 4), draw(3, 4), draw(3, 3), draw(2, 4), draw(2, 3)]
    tests = []
    for i, j in ((0, 1), (0, 2), (3, 4)):
        for metric in (BLEU, chrf):
            a, b = ([metric._extract_corpus_statistics(h, [refs]) for h in runs]
                    for runs in (systems[i], systems[j]))
            tests.append((metric, np.array(a, dtype=float), np.array(b, dtype=float)))
    together = sig.approximate_randomization_tests(tests, shuffles=250, seed=7)
    alone = [sig.stratified_approximate_randomization(m, a, b, 250, 7) for m, a, b in tests]
    assert together == alone
    assert len(set(together)) > 2 and min(together) < 0.5 < max(together)


def test_needs_the_same_runs_on_both_sides():
    a = np.ones((2, 4, 10))
    with pytest.raises(Exception, match="same runs"):
        sig.stratified_approximate_randomization(BLEU, a, np.ones((3, 4, 10)), 10)


def test_pooled_sd_of_known_groups():
    # groups 1,2,3 and 3,4,5 (squares 2 + 2, df 2 + 2) -> sd 1; a single run adds nothing
    assert sig.pooled_sd([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [7.0]]) == (1.0, 4)
    # 0,2 (square 2, df 1) and 0,0,6 (squares 4+4+16, df 2): sqrt(26 / 3)
    assert sig.pooled_sd([[0.0, 2.0], [0.0, 0.0, 6.0]]) == (pytest.approx(math.sqrt(26 / 3)), 3)
    assert sig.pooled_sd([[1.0], [2.0]]) == (None, 0)


def test_resolvable_difference_and_runs_needed():
    # sd 1, 3 runs a side: t(0.975, 4) · √(2/3)
    assert sig.resolvable_difference(1.0, 3) == pytest.approx(2.776445105 * math.sqrt(2 / 3))
    # it is the half-width of the pooled t interval of two groups with that sd
    interval = sig.mean_difference([1.0, 2.0, 3.0], [3.0, 4.0, 5.0])
    assert interval.high - interval.difference == pytest.approx(sig.resolvable_difference(1.0, 3))
    assert sig.runs_to_resolve(1.0, sig.resolvable_difference(1.0, 7)) == 7
    assert sig.runs_to_resolve(1.0, 0.001, most=50) is None
    with pytest.raises(ValueError):
        sig.resolvable_difference(1.0, 1)


def test_holm_adjustment_of_known_p_values():
    # m = 3: 0.01·3 = 0.03; 0.03·2 = 0.06; 0.04·1 = 0.04 -> raised to the running max 0.06
    assert sig.holm([0.01, 0.04, None, 0.03]) == [pytest.approx(0.03), pytest.approx(0.06), None,
                                                  pytest.approx(0.06)]
    assert sig.holm([0.5, 0.9]) == [1.0, 1.0]           # capped at 1, then kept monotone
    assert sig.holm([None]) == [None] and sig.holm([]) == []


def test_runs_a_side_for_a_power():
    """runs_to_resolve at power 0.8 gives Cohen's (1988) Table 2.4.1 sample sizes (two-sided
    α 0.05: 64, 26 and 17 a group for effects of 0.5, 0.8 and 1 sd), in any unit; power 0.5
    (the default) is the smallest n whose resolvable difference is at most the difference, as
    a scan over n finds it (the results page's "0.5 BLEU would need 43 runs a side" at its
    pooled sd 1.155, 42 at 1.15)."""
    for effect, n in ((0.5, 64), (0.8, 26), (1.0, 17)):
        assert sig.runs_to_resolve(1.0, effect, power=0.8) == n
        assert sig.runs_to_resolve(1.15, 1.15 * effect, power=0.8) == n
    for sd, difference in ((1.15, 0.5), (1.155, 0.5), (0.37, 0.5), (0.013, 0.01), (2.0, 3.0)):
        scan = next(n for n in range(2, 1001)
                    if sig.resolvable_difference(sd, n) <= difference)
        assert sig.runs_to_resolve(sd, difference) == scan
    assert (sig.runs_to_resolve(1.15, 0.5), sig.runs_to_resolve(1.155, 0.5)) == (42, 43)
    assert sig.runs_to_resolve(1.15, 0.5, power=0.8) == 85
    assert sig.runs_to_resolve(1.0, 0.01, power=0.8) is None                 # beyond 1,000
    with pytest.raises(ValueError):
        sig.runs_to_resolve(1.0, 0.5, power=0.3)
