"""The statistics research/MECHANISM.md pre-registers: exact paired sign-flip tests, Holm, equivalence by a 90%
t-interval, and a permutation test of a rising relation. Pure Python, no records read here."""

from __future__ import annotations

import itertools
import math
import random

# Two-sided 90% Student-t quantiles t_{0.95, df}, df = 1..30 (beyond: the normal 1.645).
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
MARGIN = 0.03  # a difference inside (-MARGIN, +MARGIN), by its 90% interval, is a tie
PERMUTATIONS = 10_000


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def sign_flip_p(differences: list[float]) -> float:
    """Exact two-sided p of the paired sign-flip test, statistic the mean: every one of the 2^n sign assignments."""
    observed = abs(sum(differences))
    flips = [sum(s * d for s, d in zip(signs, differences)) for signs in itertools.product((1, -1), repeat=len(differences))]
    return sum(abs(f) >= observed - 1e-12 for f in flips) / len(flips)


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, bool]:
    """Which hypotheses Holm's step-down procedure rejects at family-wise level alpha."""
    rejected, order = {}, sorted(p_values, key=p_values.get)
    for rank, name in enumerate(order):
        if p_values[name] > alpha / (len(order) - rank):
            break
        rejected[name] = True
    return {name: rejected.get(name, False) for name in p_values}


def interval90(differences: list[float]) -> tuple[float, float]:
    """The paired 90% t-interval of the mean difference."""
    n = len(differences)
    m = mean(differences)
    sd = math.sqrt(sum((d - m) ** 2 for d in differences) / (n - 1))
    half = (T95[n - 2] if n - 1 <= len(T95) else 1.645) * sd / math.sqrt(n)
    return m - half, m + half


def equivalent(differences: list[float], margin: float = MARGIN) -> bool:
    """A tie: the 90% interval lies inside (-margin, +margin)."""
    low, high = interval90(differences)
    return -margin < low and high < margin


def rising_p(x: list[float], y: list[float], seed: int = 0) -> float:
    """One-sided permutation p that y rises with x (Pearson correlation), PERMUTATIONS shuffles of y, fixed seed.

    A shuffle keeps both spreads, so it orders correlations as it orders covariances: those are compared.
    """
    def covariance(ys):
        mx, my = mean(x), mean(ys)
        return sum((a - mx) * (b - my) for a, b in zip(x, ys))
    observed, rng, ys = covariance(y), random.Random(seed), list(y)
    count = 0
    for _ in range(PERMUTATIONS):
        rng.shuffle(ys)
        count += covariance(ys) >= observed - 1e-12
    return (count + 1) / (PERMUTATIONS + 1)
