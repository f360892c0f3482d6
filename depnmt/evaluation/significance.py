"""Statistics over replicated runs: mean ± sd, a 95 % interval of a mean difference, and
approximate randomization stratified over runs (Clark, Dyer, Lavie & Smith 2011, "Better
Hypothesis Testing for Statistical Machine Translation: Controlling for Optimizer Instability").

Training an NMT model twice with different seeds gives different BLEU; a test that only resamples
the test set (the paired bootstrap of :mod:`depnmt.evaluation.score`) cannot see that noise. Clark
et al.
ask for ≥ 3 independent runs per system, the mean and standard deviation over them, and a test
that shuffles hypotheses between the systems *and* between the runs. This module implements that
test exactly as MultEval does it (``multeval/significance/StratifiedApproximateRandomizationTest
.java`` of github.com/jhclark/multeval at commit bd93ed1, the reference implementation of the
paper; names in parentheses below are its own):

Layout
    Each system has ``N`` runs over the same ``n`` test sentences; ``stats[r, i]`` holds the
    sufficient statistics (sacreBLEU's per-sentence BLEU or chrF statistics) of run ``r`` on
    sentence ``i``. The *score of a system* is the metric on the statistics summed over all
    runs and sentences — one pooled corpus of ``N·n`` hypotheses (MultEval's ``sumStats`` over
    ``getStatsAllOptForSys``), not the mean of the runs' scores.

One shuffle (MultEval's ``Shuffling.shuffle``)
    - ``swap[r, i]``: a fair coin for every (run, sentence);
    - ``perm[·, i]``: for every sentence ``i``, a uniformly random permutation of the runs
      (stratified on "like hypotheses": a sentence's hypotheses only move among themselves),
      and its inverse ``inv[·, i]``;
    - pseudo-system X takes, at row (r, i), the hypothesis of run ``perm[r, i]`` of B if
      ``swap[r, i]`` else of A; pseudo-system Y takes the hypothesis of run ``inv[r, i]`` of
      A if ``swap[r, i]`` else of B (MultEval's ``at(iRow, a, b, invert)``).
    With one or two runs every permutation is its own inverse, so X and Y split the ``2N``
    hypotheses of each sentence between them; with three or more runs a 3-cycle can give the
    same hypothesis to both, exactly as in MultEval (reproduced, not "fixed").

p-value (MultEval's ``getTwoSidedP``)
    Two-sided: ``c`` counts the shuffles with ``|score(X) − score(Y)| ≥ |score(A) − score(B)|``
    and ``p = (c + 1) / (R + 1)`` for ``R`` shuffles (the +1 keeps the test's false-rejection
    rate at most its level; Noreen 1989, Riezler & Maxwell 2005). The floor is ``1 / (R + 1)``.
    One deliberate difference: MultEval counts only *strictly* larger differences (``>``, since
    its commit 48ff070; its first version used ``≥``), so two identical systems get the floor
    p ≈ 0 — its README argues that an identical output "did not happen by chance". A p-value
    here answers "could shuffling produce a difference this large?", so ties count and two
    identical systems get p = 1 (``count_ties=False`` gives MultEval's behaviour).

The interval of a mean difference is Welch's: the difference of the two systems' mean run
scores ± t(0.975, ν) · √(s_A²/N_A + s_B²/N_B), ν by the Welch–Satterthwaite equation; it needs
two runs of each system. Standard deviations use Bessel's correction (n − 1), as MultEval's
``MathUtils.variance``.

How large is the noise? :func:`pooled_sd` pools every system's runs into one estimate of the
run-to-run standard deviation, and :func:`resolvable_difference` turns it into the smallest
difference a design with N runs a side can resolve (:func:`runs_to_resolve`: the N a target
difference needs, at a given power). Several systems tested against one baseline form a
family: :func:`holm` adjusts their p-values for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics.base import Metric

from depnmt.core.errors import DepnmtError

DEFAULT_SHUFFLES = 10_000       # MultEval's default --ar-shuffles
DEFAULT_SEED = 12345
_CHUNK_CELLS = 2_000_000        # shuffles are drawn in chunks of at most this many (run, sentence) cells


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n − 1); the sd is None for a single value."""
    if not values:
        raise DepnmtError("no values to average")
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t distribution with ``df`` (> 0, may be fractional) degrees of
    freedom, for ``0.5 < p < 1``: Newton's method on the CDF, whose integral from 0 is taken by
    Simpson's rule on the substitution t = tan θ (bounded integrand)."""
    if not 0.5 < p < 1 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))

    def cdf_above_half(x: float, steps: int = 2000) -> float:
        # ∫_0^x f(t) dt = ∫_0^atan(x) f(tan θ) / cos²θ dθ
        top = math.atan(x)
        h = top / steps
        total = 0.0
        for k in range(steps + 1):
            theta = k * h
            w = 1 if k in (0, steps) else (4 if k % 2 else 2)
            total += w * density(math.tan(theta)) / math.cos(theta) ** 2
        return total * h / 3

    x = 2.0
    for _ in range(100):
        step = (cdf_above_half(x) - (p - 0.5)) / density(x)
        x = max(x - step, x / 10)
        if abs(step) < 1e-12 * max(1.0, x):
            break
    return x


@dataclass
class Interval:
    """A difference of means with its 95 % Welch interval (None when a side has < 2 runs)."""

    difference: float
    low: float | None
    high: float | None


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float | None, float | None]:
    """The ``level`` t-interval of the mean of ``values``: mean ± t(·, n − 1) · sd / √n
    ((None, None) for fewer than two values)."""
    mean, sd = mean_sd(values)
    if sd is None:
        return None, None
    half = t_quantile(0.5 + level / 2, len(values) - 1) * sd / math.sqrt(len(values)) if sd else 0.0
    return mean - half, mean + half


def mean_difference(base: Sequence[float], other: Sequence[float], level: float = 0.95
                    ) -> Interval:
    """``mean(other) − mean(base)`` and Welch's ``level`` interval (module docstring)."""
    (mb, sb), (mo, so) = mean_sd(base), mean_sd(other)
    diff = mo - mb
    if sb is None or so is None:
        return Interval(diff, None, None)
    va, vb = sb * sb / len(base), so * so / len(other)
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(diff, diff, diff)
    df = (va + vb) ** 2 / (va * va / (len(base) - 1) + vb * vb / (len(other) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return Interval(diff, diff - half, diff + half)


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """Run-to-run noise pooled over systems: the within-group standard deviation
    ``s_p = √(Σ_g Σ_r (x_gr − x̄_g)² / Σ_g (n_g − 1))`` of ``groups`` (e.g. each system's runs'
    BLEU) and its degrees of freedom ``Σ_g (n_g − 1)``; a group of one value adds nothing.
    ``(None, 0)`` when no group has two values."""
    squares, df = 0.0, 0
    for values in groups:
        _, sd = mean_sd(values)
        if sd is not None:                      # Σ (x − x̄)² = sd² · (n − 1)
            squares += sd * sd * (len(values) - 1)
            df += len(values) - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def resolvable_difference(sd: float, runs: int, level: float = 0.95) -> float:
    """The half-width of the ``level`` interval of the difference between two systems' means
    when each has ``runs`` runs with run-to-run standard deviation ``sd``: the pooled two-sample
    t interval, ``t(0.5 + level/2, 2·runs − 2) · sd · √(2 / runs)``. A true difference below
    it is unlikely to be told from training noise with that many runs."""
    if runs < 2:
        raise ValueError(f"an interval needs at least 2 runs a side, got {runs}")
    return t_quantile(0.5 + level / 2, 2 * runs - 2) * sd * math.sqrt(2 / runs)


def runs_to_resolve(sd: float, difference: float, level: float = 0.95, most: int = 1000,
                    power: float = 0.5) -> int | None:
    """The fewest runs a side ``n`` (None beyond ``most``) for which a true ``difference``
    between two systems' means, with run-to-run standard deviation ``sd`` on each side, is
    found significant at ``level`` (two-sided) with probability ``power``::

        (t(0.5 + level/2, 2n − 2) + t(power, 2n − 2)) · sd · √(2 / n) ≤ difference

    the two-sample sample-size formula ``n = 2 (z_{1−α/2} + z_{power})² sd² / difference²``
    (e.g. Chow, Shao & Wang 2008, *Sample Size Calculations in Clinical Research*, 2nd ed.,
    § 3.2.1) with Student's t quantiles at ``2n − 2`` degrees of freedom in place of the normal
    ones, solved for the smallest ``n`` (the pooled-sd t test, which Welch's is with equal run
    counts and sds). It gives Cohen's (1988, *Statistical Power Analysis*, Table 2.4.1) 64, 26
    and 17 runs a side for effects of 0.5, 0.8 and 1 sd at power 0.8 and α = 0.05.

    ``power`` 0.5 (the default; t(0.5) = 0) asks only that an *observed* difference of that
    size be significant: the ``n`` whose :func:`resolvable_difference` is at most
    ``difference`` (sd 1.15, 0.5 BLEU: 42 runs a side; about twice as many, 85, for power 0.8).
    """
    if not 0.5 <= power < 1:
        raise ValueError(f"power must be in [0.5, 1), got {power}")

    def enough(runs: int) -> bool:
        extra = t_quantile(power, 2 * runs - 2) if power > 0.5 else 0.0
        return resolvable_difference(sd, runs, level) + extra * sd * math.sqrt(2 / runs) \
            <= difference

    if not enough(most):
        return None
    low, high = 1, most                  # enough(high); the left side shrinks with n: bisect
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's (1979) step-down adjustment of a family of p-values (e.g. every system against
    one baseline): sorted ascending, the i-th (from 0) of m becomes ``max_{j ≤ i} min(1, (m − j)
    · p_(j))``; it keeps the family-wise error rate at the level without assuming independence.
    ``None`` entries (no test) are left out of the family and stay None."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        adjusted[i] = running
    return adjusted


def pooled_score(metric: Metric, stats: np.ndarray) -> float:
    """The metric on statistics summed over every leading axis (runs, sentences)."""
    summed = np.asarray(stats, dtype=np.float64).reshape(-1, stats.shape[-1]).sum(axis=0)
    return metric._compute_score_from_stats(summed.tolist()).score


def draw_shuffles(runs: int, n: int, count: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``count`` MultEval shufflings: ``swap [count, runs, n]`` (0/1 coins) and ``perm [count,
    runs, n]`` (for every shuffle and sentence, a uniform permutation of the runs)."""
    swap = rng.integers(0, 2, size=(count, runs, n), dtype=np.int8)
    base = np.broadcast_to(np.arange(runs)[None, :, None], (count, runs, n))
    perm = rng.permuted(base, axis=1) if runs > 1 else np.zeros((count, 1, n), dtype=np.int64)
    return swap, perm


def literal_sums(a: np.ndarray, b: np.ndarray, swap: np.ndarray, perm: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """One shuffle as MultEval's ``sumStats`` loops over its rows: the summed statistics of
    pseudo-systems X and Y. ``a``, ``b``: ``[runs, n, d]``; ``swap``, ``perm``: ``[runs, n]``.
    The reference for :func:`shuffled_sums` (a test checks that they agree)."""
    runs, n, _ = a.shape
    inv = np.argsort(perm, axis=0)
    x, y = np.zeros(a.shape[-1]), np.zeros(a.shape[-1])
    for r in range(runs):
        for i in range(n):
            x += (b if swap[r, i] else a)[perm[r, i], i]          # at(iRow, a, b, false)
            y += (a if swap[r, i] else b)[inv[r, i], i]           # at(iRow, a, b, true)
    return x, y


def shuffle_weights(swap: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weights of :func:`shuffled_sums`'s products for a batch of shuffles (``swap``,
    ``perm``: ``[count, runs, n]``): ``wx[c, j·n + i] = swap[c, inv_ji, i]`` and ``wy[c, j·n
    + i] = swap[c, perm_ji, i]``, ``[count, runs·n]`` each. They depend on the shuffles only,
    so every test drawn with the same shuffles shares them."""
    count, runs, n = swap.shape
    # flat positions of (c, perm[c, r, i], i): the weights of X are swap scattered to them,
    # those of Y swap gathered from them (no inverse permutation needed)
    at = (perm * n + (np.arange(count)[:, None, None] * (runs * n)
                      + np.arange(n)[None, None, :])).ravel()
    coins = swap.astype(np.float64).ravel()
    wx = np.empty(count * runs * n)
    wx[at] = coins
    return wx.reshape(count, -1), coins[at].reshape(count, -1)


def shuffled_sums(a: np.ndarray, b: np.ndarray, swap: np.ndarray, perm: np.ndarray,
                  weights: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`literal_sums` for a batch of shuffles (``swap``, ``perm``: ``[count, runs, n]``),
    by algebra instead of loops. With ``D = B − A`` and ``perm`` a permutation of the runs of
    each sentence, ``X = Σ_{r,i} A[perm_ri, i] + swap_ri·D[perm_ri, i] = ΣA + Σ_{j,i}
    swap[inv_ji, i]·D[j, i]`` and likewise ``Y = ΣB − Σ_{j,i} swap[perm_ji, i]·D[j, i]``:
    two ``[count, runs·n] @ [runs·n, d]`` products. ``weights``: :func:`shuffle_weights` of
    these shuffles, when already computed. Returns ``[count, d]`` each."""
    count, runs, n = swap.shape
    wx, wy = shuffle_weights(swap, perm) if weights is None else weights
    d = (b - a).reshape(runs * n, -1)
    return a.sum(axis=(0, 1)) + wx @ d, b.sum(axis=(0, 1)) - wy @ d


ARTest = tuple[Metric, np.ndarray, np.ndarray]     # (metric, stats_a, stats_b)


def stratified_approximate_randomization(metric: Metric, stats_a: np.ndarray, stats_b: np.ndarray,
                                         shuffles: int = DEFAULT_SHUFFLES,
                                         seed: int = DEFAULT_SEED,
                                         count_ties: bool = True) -> float:
    """Two-sided p-value of the difference between systems A and B (module docstring).

    ``stats_a``, ``stats_b``: ``[runs, sentences, n_stats]`` sufficient statistics of the same
    sentences, the same number of runs on each side (MultEval's requirement).
    """
    return approximate_randomization_tests([(metric, stats_a, stats_b)], shuffles, seed,
                                           count_ties)[0]


def approximate_randomization_tests(tests: Sequence[ARTest], shuffles: int = DEFAULT_SHUFFLES,
                                    seed: int = DEFAULT_SEED, count_ties: bool = True
                                    ) -> list[float]:
    """:func:`stratified_approximate_randomization` of every ``(metric, stats_a, stats_b)`` of
    ``tests``, each p-value the same as that function gives it alone. The tests of one shape
    (runs × sentences) are shuffled together: each shuffle is drawn once, with its
    :func:`shuffle_weights`, for all of them (a report's tests all see the same draws anyway,
    one seed each; drawing is most of the cost of a test)."""
    arrays = []
    for metric, stats_a, stats_b in tests:
        a, b = np.asarray(stats_a, dtype=np.float64), np.asarray(stats_b, dtype=np.float64)
        if a.shape != b.shape or a.ndim != 3:
            raise DepnmtError(f"approximate randomization needs the same runs × sentences on "
                              f"both sides (got {a.shape[:2]} and {b.shape[:2]})")
        arrays.append((metric, a, b))
    if shuffles <= 0:
        raise DepnmtError("approximate randomization needs at least one shuffle")
    pvalues: list[float] = [0.0] * len(arrays)
    shapes: dict[tuple[int, int], list[int]] = {}
    for k, (_, a, _) in enumerate(arrays):
        shapes.setdefault(a.shape[:2], []).append(k)
    for (runs, n), members in shapes.items():
        observed, extreme = {}, dict.fromkeys(members, 0)
        for k in members:
            metric, a, b = arrays[k]
            observed[k] = abs(pooled_score(metric, a) - pooled_score(metric, b))
        rng = np.random.default_rng(seed)
        chunk = max(1, min(shuffles, _CHUNK_CELLS // (runs * n)))
        for start in range(0, shuffles, chunk):
            swap, perm = draw_shuffles(runs, n, min(chunk, shuffles - start), rng)
            weights = shuffle_weights(swap, perm)
            for k in members:
                metric, a, b = arrays[k]
                tolerance = 1e-9 * max(1.0, observed[k])
                score = metric._compute_score_from_stats
                for sx, sy in zip(*shuffled_sums(a, b, swap, perm, weights)):
                    diff = abs(score(sx.tolist()).score - score(sy.tolist()).score)
                    if diff > observed[k] + tolerance or (count_ties and
                                                          diff >= observed[k] - tolerance):
                        extreme[k] += 1
        for k in members:
            pvalues[k] = (extreme[k] + 1) / (shuffles + 1)
    return pvalues
