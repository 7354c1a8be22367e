"""Poisson change rates from a page's fetch history (Cho and Garcia-Molina 2003).

J. Cho and H. Garcia-Molina, "Estimating frequency of change", ACM Transactions on Internet
Technology 3(3), 2003, pp. 256-290. A page changes as a Poisson process of rate ``lambda``; a fetch
only tells whether it changed at least once since the fetch before (the number of changes is
hidden), and sometimes, from Last-Modified, when it last changed. Implemented here:

* :func:`improved_rate`: their bias-reduced estimator for ``n`` fetches at a regular interval ``I``
  with ``X`` detected changes, ``r = -ln((n - X + 0.5) / (n + 0.5)) / I``. Unlike the maximum
  likelihood ``-ln((n - X) / n) / I`` it stays finite when every fetch saw a change.
* :func:`irregular_rate`: fetches at irregular intervals (an adaptive crawler's are never
  regular). The paper's maximum likelihood estimate for irregular access solves
  ``sum over changed intervals t_c of t_c / (exp(lambda t_c) - 1) = sum over unchanged intervals t_u``.
  Like the maximum likelihood estimate for regular access it is infinite when every fetch saw a
  change, so we add the paper's half-observation correction the same way: half an unchanged
  interval on the right-hand side, of the median length (the mean would let one long interval,
  after which any page has changed, drag the estimate of a fast page down). With equal intervals
  the equation then reduces exactly to :func:`improved_rate`
  (``tests/stages/revisit/test_revisit_estimators.py`` checks it); the correction for irregular
  intervals is ours, not the paper's.
* :func:`last_modified_rate`: when the server's Last-Modified says when the page last changed, the
  time from that change to the fetch is, for a Poisson process, exponentially distributed, so the
  time a page is known to have stayed unchanged (``T``: those ages for fetches that saw a change,
  the whole interval for those that did not) gives the maximum likelihood ``X / T``. The paper's
  bias-reduced form is ``(X - 1 - X / (n ln(1 - X / n))) / T``, which is ``(n - 1) / T`` when
  every fetch saw a change and about ``X / T`` when few did. (Transcribed from the paper's
  estimator for a known last date of change and checked against those two limits; the paper's
  text could not be re-read where this was written.)

With no change seen in ``T`` seconds every estimator above says 0, and an interval policy would
then stop visiting the page. :func:`no_change_rate` gives ``0.5 / T`` instead: every change in
``T`` would have been seen, so this is a Poisson count of 0 over an exposure ``T``, and ``0.5 / T`` is
the posterior mean of its rate under Jeffreys' prior (``lambda^-1/2``; posterior Gamma(1/2, T)).
It shrinks as the page keeps not changing.

The stage estimates with :func:`posterior_rate` (:func:`estimate_rate` with a :class:`Prior`): the
irregular-access likelihood over the window, plus the page's older history as Poisson counts and
its host's Gamma prior (:mod:`streams.stages.revisit.hosts`, empirical Bayes), so that quiet pages
are told apart by how long they have been watched and by their site, and real change, which comes
in bursts and in site-wide batches rather than as a Poisson process, is counted once per fetch
interval in which it was seen (docs/revisit.md, "Change-rate estimators").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from streams.stages.revisit.history import FetchHistory, Observation

_NEWTON_STEPS = 60
_RELATIVE_TOLERANCE = 1e-10
_MAX_EXPONENT = 700.0


def improved_rate(fetches: int, changes: int, interval_s: float) -> float:
    """Cho and Garcia-Molina's improved estimator for regular access, changes per second."""
    if fetches < 1 or not 0 <= changes <= fetches or interval_s <= 0:
        raise ValueError(f"need 0 <= changes <= fetches >= 1, interval > 0: {changes}/{fetches}/{interval_s}")
    return -math.log((fetches - changes + 0.5) / (fetches + 0.5)) / interval_s


def no_change_rate(observed_s: float) -> float:
    """``0.5 / T``: the Jeffreys-prior posterior mean rate after no change in ``observed_s`` seconds."""
    if observed_s <= 0:
        raise ValueError(f"observed time must be positive: {observed_s}")
    return 0.5 / observed_s


def irregular_rate(observations: Sequence[Observation]) -> float:
    """Rate (changes per second) from fetches at irregular intervals (module docstring).

    Solves ``phi(lambda) = sum_c t_c / expm1(lambda t_c) - (sum_u t_u + median(t) / 2) = 0``. ``phi`` is
    convex and decreasing in ``lambda``, and since ``1/lambda - t <= t / expm1(lambda t) <= 1/lambda``
    the root lies in ``[X / (R + C), X / R]`` (``R`` the right-hand side, ``C`` the sum of the changed
    intervals); Newton's method from the left end of that bracket rises monotonically to it.
    """
    if not observations:
        raise ValueError("no observations")
    changed = [o.interval_s for o in observations if o.changed]
    total_s = sum(o.interval_s for o in observations)
    if not changed:
        return no_change_rate(total_s)
    right = total_s - sum(changed) + 0.5 * statistics.median(o.interval_s for o in observations)
    rate, high = len(changed) / (right + sum(changed)), len(changed) / right
    for _ in range(_NEWTON_STEPS):
        value, slope = _phi(rate, changed, right)
        step = value / slope
        rate -= step
        if not step <= 0 or abs(step) <= _RELATIVE_TOLERANCE * rate:
            break
    return min(rate, high) if math.isfinite(rate) else high


def _phi(rate: float, changed: Sequence[float], right: float) -> tuple[float, float]:
    """``phi(rate)`` and its derivative ``-sum t^2 e^(rate t) / (e^(rate t) - 1)^2``, the latter
    written ``t^2 / (expm1(x) * -expm1(-x))`` so that neither factor overflows."""
    value, slope = -right, 0.0
    for t in changed:
        x = min(rate * t, _MAX_EXPONENT)
        m = math.expm1(x)
        value += t / m
        slope -= t * t / (m * -math.expm1(-x))
    return value, slope


def last_modified_rate(observations: Sequence[Observation]) -> float:
    """Rate from Last-Modified ages (module docstring); every changed observation needs its age."""
    if not observations:
        raise ValueError("no observations")
    fetches = len(observations)
    changes = sum(o.changed for o in observations)
    unchanged_s = sum(_known_unchanged_s(o) for o in observations)
    if changes == 0:
        return no_change_rate(unchanged_s)
    if unchanged_s <= 0:
        raise ValueError("no time known unchanged: every change happened at its fetch")
    if changes == fetches:
        return (changes - 1) / unchanged_s
    share = changes / fetches
    return (changes - 1 - changes / (fetches * math.log1p(-share))) / unchanged_s


def _known_unchanged_s(observation: Observation) -> float:
    if not observation.changed:
        return observation.interval_s
    if observation.modified_age_s is None:
        raise ValueError("a changed observation without its Last-Modified age")
    return min(observation.modified_age_s, observation.interval_s)


@dataclass(frozen=True, slots=True)
class Prior:
    """A Gamma prior on a page's rate: ``shape`` pseudo-changes seen over ``exposure_s`` pseudo-seconds
    (mean ``shape / exposure_s``); :mod:`streams.stages.revisit.hosts` gives each page its host's."""

    shape: float
    exposure_s: float

    @classmethod
    def with_mean(cls, rate_per_s: float, shape: float) -> Prior:
        if rate_per_s <= 0 or shape <= 0:
            raise ValueError(f"a prior needs a positive mean and shape: {rate_per_s}, {shape}")
        return cls(shape, shape / rate_per_s)


def posterior_rate(observations: Sequence[Observation], prior: Prior, older_changes: float = 0.0,
                   older_s: float = 0.0) -> float:
    """The page's rate from its window of fetches, its older history and its host's prior.

    Solves, for ``lambda``,

        sum over changed intervals t_c / expm1(lambda t_c) + (alpha + X_o) / lambda
            = beta + T_o + sum over unchanged intervals t_u

    Cho and Garcia-Molina's likelihood equation for irregular access (:func:`irregular_rate`) with
    two more terms of Poisson counts: the prior's ``alpha`` changes over ``beta`` seconds, and the
    older history, summarised as ``X_o`` changes over ``T_o`` seconds (:func:`older_history`), so that
    the window keeps following a page whose pace drifts while the time a page has been watched is
    never forgotten. With no change at all it is ``(alpha + X_o) / (beta + T_o + T)``, the posterior
    mean of a Poisson rate with a Gamma(alpha, beta) prior; when every change was seen one by one
    (intervals short beside ``1 / lambda``), ``(alpha + X_o + X) / (beta + T_o + T)``, the same.
    So a quiet page's estimate falls with the time it has been watched, from its host's mean, and
    does not floor where every other quiet page's does. A window whose every fetch saw a change
    stays finite (the right-hand side is at least ``beta > 0``), which the half-observation
    correction of :func:`irregular_rate` was for.

    ``phi(lambda)`` (left minus right) is convex and decreasing, ``A / lambda - C - R <= phi <= A /
    lambda - R`` with ``A = X + alpha + X_o``, ``C`` the changed intervals' sum and ``R`` the right-hand
    side, so the root lies in ``[A / (R + C), A / R]`` and Newton's method from the left end rises
    monotonically to it.
    """
    changed = [o.interval_s for o in observations if o.changed]
    pseudo = prior.shape + older_changes
    right = prior.exposure_s + older_s + sum(o.interval_s for o in observations if not o.changed)
    if not changed:
        return pseudo / right
    counts = len(changed) + pseudo
    rate, high = counts / (right + sum(changed)), counts / right
    for _ in range(_NEWTON_STEPS):
        value, slope = _phi(rate, changed, right)
        value += pseudo / rate
        slope -= pseudo / (rate * rate)
        step = value / slope
        rate -= step
        if not step <= 0 or abs(step) <= _RELATIVE_TOLERANCE * rate:
            break
    return min(rate, high) if math.isfinite(rate) else high


def older_history(history: FetchHistory) -> tuple[float, float]:
    """(changes, seconds) of the page's history before its window of observations: what
    :attr:`FetchHistory.changes` and the time since the first fetch hold beyond the window."""
    window = history.observations
    changes = max(0, history.changes - sum(o.changed for o in window))
    watched_s = max(0.0, history.last_fetch_s - history.first_fetch_s - sum(o.interval_s for o in window))
    return float(changes), watched_s


def estimate_rate(history: FetchHistory, prior: Prior | None = None) -> float | None:
    """The page's change rate (per second) from its history; ``None`` before any observation.

    With a ``prior`` (the stage's: its host's, :mod:`streams.stages.revisit.hosts`):
    :func:`posterior_rate` over the window and the older history; when the server's Last-Modified
    is trusted (:func:`uses_last_modified`), the changes over the time the page is known to have
    stayed unchanged instead, with the same prior and older history,
    ``(alpha + X_o + X) / (beta + T_o + T)``. Without one, the estimators of Cho and Garcia-Molina
    alone, over the window: :func:`last_modified_rate` when Last-Modified is trusted, else
    :func:`irregular_rate`.
    """
    observations = history.observations
    if not observations:
        return None
    if prior is None:
        if uses_last_modified(history):
            return last_modified_rate(observations)
        return irregular_rate(observations)
    older_changes, older_s = older_history(history)
    if uses_last_modified(history):
        changes = prior.shape + older_changes + sum(o.changed for o in observations)
        return changes / (prior.exposure_s + older_s + sum(_known_unchanged_s(o) for o in observations))
    return posterior_rate(observations, prior, older_changes, older_s)


def uses_last_modified(history: FetchHistory) -> bool:
    """Whether :func:`estimate_rate` reads the page's Last-Modified ages (see there)."""
    return history.last_modified_trusted and _ages_usable(history.observations)


def _ages_usable(observations: Sequence[Observation]) -> bool:
    changed = [o for o in observations if o.changed]
    return (len(changed) >= 2 and all(o.modified_age_s is not None for o in changed)
            and sum(_known_unchanged_s(o) for o in observations) > 0)
