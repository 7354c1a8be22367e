"""Change-rate estimators (Cho and Garcia-Molina 2003): formulas, limits, and properties."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.stages.revisit.estimators import (
    Prior,
    estimate_rate,
    improved_rate,
    irregular_rate,
    last_modified_rate,
    no_change_rate,
    older_history,
    posterior_rate,
)
from streams.stages.revisit.history import FetchHistory, Observation

DAY = 86_400.0


def regular(fetches: int, changes: int, interval_s: float) -> list[Observation]:
    return [Observation(interval_s, i < changes) for i in range(fetches)]


@pytest.mark.parametrize(("fetches", "changes", "expected"), [
    (10, 0, 0.0),
    (10, 5, -math.log(5.5 / 10.5)),
    (10, 10, -math.log(0.5 / 10.5)),      # finite where the maximum likelihood is infinite
    (1, 1, math.log(3.0)),
])
def test_improved_rate_formula(fetches: int, changes: int, expected: float) -> None:
    assert improved_rate(fetches, changes, DAY) == pytest.approx(expected / DAY)


@pytest.mark.parametrize("arguments", [(0, 0, DAY), (3, 4, DAY), (3, 1, 0.0)])
def test_improved_rate_refuses_impossible_counts(arguments: tuple[int, int, float]) -> None:
    with pytest.raises(ValueError):
        improved_rate(*arguments)


@given(st.integers(1, 40), st.data(), st.floats(60.0, 1e7))
def test_irregular_reduces_to_improved_for_regular_access(fetches: int, data: st.DataObject,
                                                          interval_s: float) -> None:
    changes = data.draw(st.integers(1, fetches))
    assert irregular_rate(regular(fetches, changes, interval_s)) == pytest.approx(
        improved_rate(fetches, changes, interval_s), rel=1e-7)


@given(st.integers(2, 30), st.data(), st.floats(600.0, 1e6))
def test_estimate_grows_with_detected_changes(fetches: int, data: st.DataObject, interval_s: float) -> None:
    changes = data.draw(st.integers(0, fetches - 1))
    fewer = irregular_rate(regular(fetches, changes, interval_s))
    more = irregular_rate(regular(fetches, changes + 1, interval_s))
    assert more > fewer


@given(st.lists(st.tuples(st.floats(60.0, 1e7), st.booleans()), min_size=1, max_size=32)
       .filter(lambda obs: any(changed for _, changed in obs)))
def test_irregular_rate_solves_its_equation(pairs: list[tuple[float, bool]]) -> None:
    observations = [Observation(t, changed) for t, changed in pairs]
    rate = irregular_rate(observations)
    changed = [t for t, c in pairs if c]
    right = sum(t for t, c in pairs if not c) + 0.5 * statistics.median(t for t, _ in pairs)
    left = sum(t / math.expm1(min(rate * t, 700.0)) for t in changed)
    assert rate > 0
    assert left == pytest.approx(right, rel=1e-6)


def test_no_change_is_the_jeffreys_posterior_mean() -> None:
    assert irregular_rate(regular(4, 0, DAY)) == pytest.approx(0.5 / (4 * DAY))
    assert no_change_rate(2 * DAY) == pytest.approx(0.25 / DAY)
    with pytest.raises(ValueError):
        no_change_rate(0.0)


def test_median_keeps_one_long_interval_from_hiding_a_fast_page() -> None:
    short = [Observation(3600.0, True)] * 8
    with_long = [*short, Observation(30 * DAY, True)]
    assert irregular_rate(with_long) > 0.8 * irregular_rate(short)


@pytest.mark.parametrize(("pairs", "expected_per_day"), [
    # every fetch changed: (n - 1) / T, T the sum of the ages
    ([(DAY, True, 0.5 * DAY), (DAY, True, 0.25 * DAY), (DAY, True, 0.25 * DAY)], 2 / 1.0),
    # X of n changed: (X - 1 - X / (n ln(1 - X / n))) / T
    ([(DAY, True, 0.5 * DAY), (DAY, False, None), (DAY, True, 0.5 * DAY), (DAY, False, None)],
     (2 - 1 - 2 / (4 * math.log(0.5))) / 3.0),
    ([(DAY, False, None), (2 * DAY, False, None)], 0.5 / 3.0),
])
def test_last_modified_rate(pairs: list[tuple[float, bool, float | None]], expected_per_day: float) -> None:
    observations = [Observation(t, changed, age) for t, changed, age in pairs]
    assert last_modified_rate(observations) == pytest.approx(expected_per_day / DAY)


def test_last_modified_rate_needs_the_ages() -> None:
    with pytest.raises(ValueError):
        last_modified_rate([Observation(DAY, True, None), Observation(DAY, True, 1.0)])


def history(observations: list[Observation], agreements: int = 0, disagreements: int = 0) -> FetchHistory:
    return FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=DAY, observations=tuple(observations),
                        lm_agreements=agreements, lm_disagreements=disagreements)


def test_estimate_reads_last_modified_only_when_trusted() -> None:
    observations = [Observation(DAY, True, 3600.0), Observation(DAY, True, 7200.0), Observation(DAY, False)]
    trusted = estimate_rate(history(observations, agreements=3))
    untrusted = estimate_rate(history(observations, agreements=3, disagreements=1))
    assert trusted == pytest.approx(last_modified_rate(observations))
    assert untrusted == pytest.approx(irregular_rate(observations))
    assert estimate_rate(history([])) is None


@pytest.mark.parametrize("rate_per_day", [0.1, 1.0, 5.0])
def test_estimates_recover_a_poisson_rate(rate_per_day: float) -> None:
    """Daily fetches of a simulated Poisson page: both estimators land near the true rate."""
    rng = random.Random(int(rate_per_day * 100))
    rate = rate_per_day / DAY
    observations = []
    for _ in range(400):
        gaps, elapsed = [], 0.0
        while (elapsed := elapsed + rng.expovariate(rate)) < DAY:
            gaps.append(elapsed)
        age = DAY - gaps[-1] if gaps else None
        observations.append(Observation(DAY, bool(gaps), age))
    assert irregular_rate(observations) == pytest.approx(rate, rel=0.2)
    assert last_modified_rate(observations) == pytest.approx(rate, rel=0.2)


# -- with a host's prior (posterior_rate) -----------------------------------------------------------

PRIOR = Prior.with_mean(1 / (30 * DAY), 0.5)
intervals = st.floats(60.0, 400 * DAY)


@pytest.mark.parametrize(("observations", "older", "expected_per_day"), [
    ([], (0.0, 0.0), 1 / 30),                                           # nothing seen: the host's mean
    ([Observation(10 * DAY, False)] * 3, (0.0, 0.0), 0.5 / 45),         # 0.5 / (15 d + 30 d)
    ([Observation(10 * DAY, False)] * 3, (2.0, 55 * DAY), 2.5 / 100),   # older changes count as Poisson
])
def test_posterior_without_changes_is_the_gamma_posterior_mean(
        observations: list[Observation], older: tuple[float, float], expected_per_day: float) -> None:
    assert posterior_rate(observations, PRIOR, *older) * DAY == pytest.approx(expected_per_day)


@given(st.lists(st.tuples(intervals, st.booleans()), min_size=1, max_size=32))
def test_posterior_rate_solves_its_equation(pairs: list[tuple[float, bool]]) -> None:
    observations = [Observation(t, c) for t, c in pairs]
    rate = posterior_rate(observations, PRIOR)
    assert math.isfinite(rate) and rate > 0
    left = sum(t / math.expm1(rate * t) for t, c in pairs if c) + PRIOR.shape / rate
    right = PRIOR.exposure_s + sum(t for t, c in pairs if not c)
    assert left == pytest.approx(right, rel=1e-6)


@given(st.lists(st.tuples(intervals, st.booleans()), min_size=1, max_size=31), intervals)
def test_one_more_unchanged_interval_lowers_the_estimate_and_a_change_raises_it(
        pairs: list[tuple[float, bool]], interval_s: float) -> None:
    observations = [Observation(t, c) for t, c in pairs]
    rate = posterior_rate(observations, PRIOR)
    assert posterior_rate([*observations, Observation(interval_s, False)], PRIOR) < rate * (1 + 1e-9)
    assert posterior_rate([*observations, Observation(interval_s, True)], PRIOR) > rate * (1 - 1e-9)


def test_quiet_pages_differ_by_time_watched_and_by_host() -> None:
    """A window of 32 unchanged daily fetches: the windowed estimate is the same for every such page,
    the posterior falls with the time watched before the window and rises with the host's pace."""
    window = [Observation(DAY, False)] * 32
    assert irregular_rate(window) == no_change_rate(32 * DAY)
    watched = [posterior_rate(window, PRIOR, 0.0, older_days * DAY) for older_days in (0, 100, 400)]
    assert watched[0] > watched[1] > watched[2]
    busy_host = Prior.with_mean(1 / (3 * DAY), 0.5)
    assert posterior_rate(window, busy_host) > posterior_rate(window, PRIOR)


def test_every_fetch_changed_stays_finite() -> None:
    rate = posterior_rate([Observation(DAY, True)] * 32, PRIOR)
    assert math.isfinite(rate) and rate * DAY > 1


def test_older_history_is_what_the_window_does_not_hold() -> None:
    history = FetchHistory(first_fetch_s=0.0, last_fetch_s=100 * DAY, interval_s=DAY, fetches=40, changes=7,
                           observations=(Observation(10 * DAY, True), Observation(20 * DAY, False)))
    assert older_history(history) == (6.0, 70 * DAY)
    assert estimate_rate(history, PRIOR) == pytest.approx(
        posterior_rate(history.observations, PRIOR, 6.0, 70 * DAY))
