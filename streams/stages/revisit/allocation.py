"""The freshness-optimal refresh frequency of each page under a fetch budget (Lagrange multiplier).

J. Cho and H. Garcia-Molina, "Effective page refresh policies for Web crawlers", ACM Transactions on
Database Systems 28(4), 2003 (and "Synchronizing a database to improve freshness", SIGMOD 2000).
A page changing as a Poisson process of rate ``lambda`` and refreshed every ``I = 1/f`` seconds is
fresh (stored copy equal to the live one) for a time-averaged share

    F(lambda, f) = (f / lambda) (1 - exp(-lambda / f))           (:func:`poisson_freshness`)

Maximising ``sum_i F(lambda_i, f_i)`` subject to ``sum_i f_i = B`` (the budget, fetches per second)
and ``lo_i <= f_i <= hi_i`` (the interval bounds) is a separable concave problem: at the optimum
every page not at a bound has the same marginal freshness ``dF/df = mu``. With ``r = lambda / f``
(changes per refresh), ``dF/df = (1 - (1 + r) exp(-r)) / lambda``, so the condition reads

    g(r) = 1 - (1 + r) exp(-r) = mu * lambda                      (:func:`marginal_gain`)

``g`` rises from 0 to 1, so a page with ``mu * lambda < 1`` gets ``f = lambda / g^-1(mu * lambda)``
and one with ``mu * lambda >= 1`` gets ``f = 0``: a page that changes much faster than the budget
can follow is not worth refreshing at all (the paper's counter-intuitive result); for slow pages
``g(r) ~ r^2 / 2`` gives ``f ~ sqrt(lambda / (2 mu))``. With bounds, each ``f`` is clamped to its
box (KKT), and ``mu`` is the one value for which the clamped frequencies spend the budget
(:func:`solve_multiplier`, bisection: the total is monotone in ``mu``).

Online, each page knows only its own estimate; the multiplier is the small shared state, solved
from a histogram of the pages' estimated rates (:func:`rate_bin`, :func:`bin_rates_per_s`) kept
per shard (:mod:`streams.stages.revisit.budget`).
"""

from __future__ import annotations

import bisect
import math
from typing import Final

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# g^-1 by table: r on a log grid, g(r) exact; interpolated in (log g, log r), accurate to ~1e-6.
# The grid stops at r = 35, where 1 - g(r) ~ 1e-14 nears the float64 resolution of g.
_R_GRID: Final = np.logspace(-7.0, math.log10(35.0), 4001)
_G_GRID: Final = -np.expm1(-_R_GRID) - _R_GRID * np.exp(-_R_GRID)
_LOG_R: Final = np.log(_R_GRID)
_LOG_G: Final = np.log(np.maximum(_G_GRID, 1e-300))
_LOG_G_LIST: Final = _LOG_G.tolist()
_LOG_R_LIST: Final = _LOG_R.tolist()

RATE_BINS_PER_DECADE: Final = 10
MIN_BIN_RATE_PER_S: Final = 1e-9        # about once in 30 years
MAX_BIN_RATE_PER_S: Final = 1e-1        # every 10 seconds
RATE_BINS: Final = RATE_BINS_PER_DECADE * 8
_MU_RANGE_S: Final = (1e-3, 1e13)
_BISECTION_STEPS: Final = 80


def poisson_freshness(rate_per_s: float, interval_s: float) -> float:
    """Time-averaged freshness ``(1 - exp(-lambda I)) / (lambda I)`` of a page refreshed every ``I``."""
    x = rate_per_s * interval_s
    return 1.0 if x <= 0 else -math.expm1(-x) / x


def marginal_gain(changes_per_refresh: float) -> float:
    """``g(r) = 1 - (1 + r) exp(-r)``: ``lambda`` times the marginal freshness of one more fetch."""
    r = changes_per_refresh
    return -math.expm1(-r) - r * math.exp(-r)


def changes_per_refresh(gain: float) -> float:
    """``g^-1``: the changes per refresh at which the marginal gain is ``gain`` (0 < gain < 1)."""
    if not 0.0 < gain < 1.0:
        raise ValueError(f"gain must lie in (0, 1): {gain}")
    log_gain = math.log(gain)
    i = bisect.bisect_left(_LOG_G_LIST, log_gain)
    if i == 0:
        return math.sqrt(2.0 * gain)
    if i >= len(_LOG_G_LIST):
        return float(_R_GRID[-1])
    g0, g1 = _LOG_G_LIST[i - 1], _LOG_G_LIST[i]
    r0, r1 = _LOG_R_LIST[i - 1], _LOG_R_LIST[i]
    return math.exp(r0 + (r1 - r0) * (log_gain - g0) / (g1 - g0))


def optimal_frequency(rate_per_s: float, mu_s: float, lo_per_s: float, hi_per_s: float) -> float:
    """The page's refresh frequency at multiplier ``mu`` (seconds), clamped to ``[lo, hi]``."""
    gain = mu_s * rate_per_s
    if gain >= 1.0:
        return lo_per_s
    if gain <= 0.0:
        return lo_per_s if rate_per_s <= 0 else hi_per_s
    frequency = rate_per_s / changes_per_refresh(gain)
    return min(max(frequency, lo_per_s), hi_per_s)


def optimal_frequencies(rates_per_s: FloatArray, mu_s: float, lo_per_s: float, hi_per_s: float) -> FloatArray:
    """:func:`optimal_frequency` over an array of rates (the same table, vectorised)."""
    gains = mu_s * rates_per_s
    inside = (gains > 0.0) & (gains < 1.0)
    safe = np.where(inside, gains, 0.5)
    ratio = np.exp(np.interp(np.log(safe), _LOG_G, _LOG_R, left=_LOG_R[0], right=_LOG_R[-1]))
    small = np.log(safe) < _LOG_G[0]
    ratio = np.where(small, np.sqrt(2.0 * safe), ratio)
    frequencies = np.where(inside, rates_per_s / ratio, np.where(gains >= 1.0, lo_per_s, hi_per_s))
    clamped: FloatArray = np.clip(frequencies, lo_per_s, hi_per_s)
    return clamped


def solve_multiplier(rates_per_s: FloatArray, counts: FloatArray, budget_per_s: float,
                     lo_per_s: float, hi_per_s: float, fixed_spend_per_s: float = 0.0) -> float:
    """The ``mu`` at which ``sum counts * f(rates, mu) + fixed_spend`` equals ``budget_per_s``.

    ``fixed_spend_per_s`` is what pages outside the allocation spend (those without an estimate
    yet, at the initial interval). When even ``mu -> 0`` (every page at ``hi``) spends less than
    the budget, the smallest ``mu`` is returned; when every page at ``lo`` spends more, the largest.
    """
    target = budget_per_s - fixed_spend_per_s
    low, high = math.log(_MU_RANGE_S[0]), math.log(_MU_RANGE_S[1])
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        spend = float(np.dot(counts, optimal_frequencies(rates_per_s, math.exp(middle), lo_per_s, hi_per_s)))
        if spend > target:
            low = middle
        else:
            high = middle
    return math.exp(0.5 * (low + high))


def rate_bin(rate_per_s: float) -> int:
    """The histogram bin of a rate (log-spaced, :data:`RATE_BINS_PER_DECADE` per decade, clamped)."""
    if rate_per_s <= MIN_BIN_RATE_PER_S:
        return 0
    position = math.log10(rate_per_s / MIN_BIN_RATE_PER_S) * RATE_BINS_PER_DECADE
    return min(int(position), RATE_BINS - 1)


def bin_rates_per_s() -> FloatArray:
    """The representative (geometric middle) rate of each bin."""
    edges: FloatArray = MIN_BIN_RATE_PER_S * 10.0 ** ((np.arange(RATE_BINS) + 0.5) / RATE_BINS_PER_DECADE)
    return edges
