"""Interval policies: the Lagrange allocation against its formulas, the budget state, nutch, bounds."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import ConfigError, StateError
from streams.stages.revisit.allocation import (
    RATE_BINS,
    bin_rates_per_s,
    changes_per_refresh,
    marginal_gain,
    optimal_frequencies,
    optimal_frequency,
    poisson_freshness,
    rate_bin,
    solve_multiplier,
)
from streams.stages.revisit.budget import SPEND_INTERVALS, SPEND_WINDOW_S, UNESTIMATED, BudgetState
from streams.stages.revisit.history import FetchHistory, Observation
from streams.stages.revisit.policies import (
    IntervalBounds,
    PolicyConfig,
    bounds_for,
    default_interval_s,
    nutch_step,
    parse_bound_rules,
    probe_interval_s,
    stormcrawler_interval_s,
)

HOUR, DAY = 3600.0, 86_400.0
BOUNDS = IntervalBounds(HOUR, 30 * DAY)
LO, HI = 1 / BOUNDS.max_s, 1 / BOUNDS.min_s
rates = st.floats(1e-9, 1e-2)


@pytest.mark.parametrize(("rate", "interval", "expected"), [
    (0.0, DAY, 1.0), (1 / DAY, DAY, 1 - math.exp(-1)), (2 / DAY, DAY, (1 - math.exp(-2)) / 2)])
def test_poisson_freshness(rate: float, interval: float, expected: float) -> None:
    assert poisson_freshness(rate, interval) == pytest.approx(expected)


@given(st.floats(1e-6, 0.999999))
def test_changes_per_refresh_inverts_the_marginal_gain(gain: float) -> None:
    assert marginal_gain(changes_per_refresh(gain)) == pytest.approx(gain, rel=1e-5)


@given(rates, st.floats(1.0, 1e9))
def test_optimal_frequency_equalises_marginal_freshness(rate: float, mu: float) -> None:
    """KKT: inside the bounds, dF/df = (1 - (1 + r) e^-r) / lambda equals mu."""
    frequency = optimal_frequency(rate, mu, 0.0, math.inf)
    if mu * rate >= 1:
        assert frequency == 0.0
    else:
        r = rate / frequency
        assert (1 - (1 + r) * math.exp(-r)) / rate == pytest.approx(mu, rel=1e-4)


@given(rates, st.floats(1.0, 1e9))
def test_optimal_frequency_stays_in_bounds_and_matches_the_vector_form(rate: float, mu: float) -> None:
    frequency = optimal_frequency(rate, mu, LO, HI)
    assert LO <= frequency <= HI
    vector = optimal_frequencies(np.array([rate]), mu, LO, HI)[0]
    assert vector == pytest.approx(frequency, rel=1e-6)


def test_slow_pages_follow_the_square_root_law() -> None:
    """For lambda << f, g(r) ~ r^2 / 2, so f ~ sqrt(lambda / (2 mu))."""
    rate, mu = 1e-9, 1e2
    assert optimal_frequency(rate, mu, 0.0, math.inf) == pytest.approx(math.sqrt(rate / (2 * mu)), rel=1e-3)


def test_pages_too_fast_for_the_budget_get_the_lower_bound() -> None:
    mu = 1000.0
    assert optimal_frequency(2 / mu, mu, LO, HI) == LO


@given(st.lists(rates, min_size=1, max_size=40), st.floats(0.05, 20.0))
def test_solved_multiplier_is_where_the_spend_crosses_the_budget(page_rates: list[float],
                                                                 per_page_per_day: float) -> None:
    rates_array, counts = np.array(page_rates), np.ones(len(page_rates))
    budget = per_page_per_day * len(page_rates) / DAY
    mu = solve_multiplier(rates_array, counts, budget, LO, HI)

    def spend(multiplier: float) -> float:
        return float(optimal_frequencies(rates_array, multiplier, LO, HI).sum())

    if LO * len(page_rates) < budget < HI * len(page_rates):
        assert spend(mu * 1.001) <= budget * (1 + 1e-9) <= spend(mu * 0.999) * (1 + 2e-9)


def test_solved_multiplier_spends_the_budget_exactly_for_a_spread_of_rates() -> None:
    page_rates = 1 / np.geomspace(HOUR, 90 * DAY, 200)
    budget = 200 / DAY
    mu = solve_multiplier(page_rates, np.ones(200), budget, LO, HI)
    assert optimal_frequencies(page_rates, mu, LO, HI).sum() == pytest.approx(budget, rel=1e-4)


def test_lagrange_allocation_beats_uniform_at_the_same_budget() -> None:
    """Cho and Garcia-Molina: the optimum beats uniform refresh, and gives up on the fastest pages."""
    page_rates = np.array([1 / (10 * 60), 1 / HOUR, 1 / DAY, 1 / (7 * DAY), 1 / (60 * DAY)])
    budget = len(page_rates) / DAY
    mu = solve_multiplier(page_rates, np.ones(5), budget, 0.0, math.inf)
    optimal = optimal_frequencies(page_rates, mu, 0.0, math.inf)
    optimal_freshness = sum(poisson_freshness(r, 1 / f) if f > 0 else 0.0
                            for r, f in zip(page_rates, optimal, strict=True))
    uniform_freshness = sum(poisson_freshness(r, DAY) for r in page_rates)
    assert optimal_freshness > uniform_freshness
    assert optimal[0] == 0.0


@given(rates)
def test_rate_bins_hold_their_rates(rate: float) -> None:
    index = rate_bin(rate)
    assert 0 <= index < RATE_BINS
    assert abs(math.log10(bin_rates_per_s()[index] / rate)) <= 0.05 + 1e-9 or rate <= 1e-9


def test_budget_state_round_trips_and_counts_pages() -> None:
    state = BudgetState()
    state.move(-2, UNESTIMATED)
    state.move(UNESTIMATED, 40)
    state.move(-2, 41)
    state.record_refetch(1000.0)
    assert state.pages == 2 and state.counts[40] == 1 and state.unestimated == 0
    assert BudgetState.decode(state.encode()) == state
    assert BudgetState.decode(None) == BudgetState()
    with pytest.raises(StateError):
        BudgetState.decode(b"\x09" + state.encode()[1:])


def test_spend_feedback_raises_the_target_when_fetches_fall_short() -> None:
    state = BudgetState()
    for _ in range(100):
        state.move(-2, rate_bin(1 / DAY))
    budget = 100 / DAY
    now = 0.0
    for _ in range(800):           # 80 re-fetches a day against a budget of 100
        now += DAY / 80
        state.record_refetch(now)
    realised = state.realised_per_s(now)
    assert realised == pytest.approx(80 / DAY, rel=0.05)
    before = state.solve(budget, LO, HI, now)
    state.solve(budget, LO, HI, now + DAY)
    assert state.correction > 1.0
    assert state.mu_s < before        # a smaller multiplier buys more fetches


def test_spend_feedback_waits_for_two_windows() -> None:
    """A new crawl's first intervals are as long as a window: what they spend shows only after it,
    and a correction made before would wind up against spend still on its way."""
    state = BudgetState()
    state.record_refetch(0.0)
    assert state.realised_per_s(SPEND_WINDOW_S * 1.5) is None
    assert state.realised_per_s(SPEND_WINDOW_S * 2) is not None


def _refetched(pages: int, per_day: float, days: float) -> BudgetState:
    """``pages`` pages re-fetched ``per_day`` times a day for ``days``, against a budget of 0.1 a page
    a day (the window is set by the first solve, at the first page's interval)."""
    state = BudgetState()
    for _ in range(pages):
        state.move(-2, rate_bin(1 / (10 * DAY)))
    state.solve(pages / 10 / DAY, LO, HI, 0.0)
    now = 0.0
    while now < days * DAY:
        now += DAY / per_day
        state.record_refetch(now)
    return state


def test_spend_window_spans_several_of_the_intervals_the_budget_buys() -> None:
    """At 0.1 fetches a page a day the mean interval is ten days: the window, 30 days, sees the
    waves of re-fetches as one spend, not as overspending and underspending in turn."""
    state = _refetched(100, 10.0, 70.0)
    state.solve(10 / DAY, LO, HI, 70 * DAY)
    assert state.window_s == pytest.approx(SPEND_INTERVALS * 10 * DAY)
    assert state.realised_per_s(70 * DAY) == pytest.approx(10 / DAY, rel=0.1)


def test_spend_correction_integrates_over_time_not_over_solves() -> None:
    """Solves come with updates, most of them inside a wave of re-fetches: ten solves at one instant
    correct no more than one does."""
    once, often = _refetched(100, 8.0, 70.0), _refetched(100, 8.0, 70.0)
    for state in (once, often):
        state.solve(10 / DAY, LO, HI, 70 * DAY)
        state.solve(10 / DAY, LO, HI, 71 * DAY)
    for _ in range(9):
        often.solve(10 / DAY, LO, HI, 71 * DAY)
    assert 1.0 < once.correction == pytest.approx(often.correction)


def test_budget_state_of_format_1_is_read() -> None:
    """Written before the window followed the budget: its spend weight counted over two days."""
    counts = [0] * RATE_BINS
    counts[5] = 7
    head = struct.pack(">BdIIdddd", 1, 123.0, 2, 3, 1.1, 4.0, 500.0, 100.0)
    raw = head + struct.pack(f">{RATE_BINS}I", *counts)
    state = BudgetState.decode(raw)
    assert (state.mu_s, state.unestimated, state.since_solve, state.correction) == (123.0, 2, 3, 1.1)
    assert (state.spend_weight, state.clock_s, state.started_s, state.counts) == (4.0, 500.0, 100.0, counts)
    assert state.window_s == SPEND_WINDOW_S and state.corrected_s == -math.inf


CONFIG = PolicyConfig(bounds=BOUNDS, initial_interval_s=DAY)


@given(st.none() | rates, st.integers(1, 1000))
def test_default_intervals_stay_within_bounds(rate: float | None, pages: int) -> None:
    state = BudgetState(counts=[0] * RATE_BINS)
    state.counts[rate_bin(1 / DAY)] = pages
    interval = default_interval_s(CONFIG, BOUNDS, rate, state, 0.0)
    assert BOUNDS.min_s <= interval <= BOUNDS.max_s
    if rate is None:
        assert interval == DAY


def test_default_gives_every_page_the_budget_when_all_are_alike() -> None:
    state = BudgetState()
    state.counts[rate_bin(1 / DAY)] = 1000
    interval = default_interval_s(CONFIG, BOUNDS, bin_rates_per_s()[rate_bin(1 / DAY)], state, 0.0)
    assert interval == pytest.approx(DAY / CONFIG.budget_fetches_per_page_per_day, rel=1e-3)


@pytest.mark.parametrize("unestimated", [0, 100, 900])
def test_pages_without_an_estimate_yet_leave_the_others_their_share_of_the_budget(unestimated: int) -> None:
    """Pages fetched once, waiting for their second fetch at the initial interval, are set aside
    with their share of the budget: the estimated ones get the interval they would get alone.
    (Counted at the initial interval, 900 pages at one fetch a day spent a budget of 0.1 a page by
    themselves, and the first pages to take an estimate got the longest interval.)"""
    state = BudgetState()
    for _ in range(100):
        state.move(-2, rate_bin(1 / DAY))
    for _ in range(unestimated):
        state.move(-2, UNESTIMATED)
    rate = bin_rates_per_s()[rate_bin(1 / DAY)]
    interval = default_interval_s(CONFIG, BOUNDS, rate, state, 0.0)
    assert interval == pytest.approx(DAY / CONFIG.budget_fetches_per_page_per_day, rel=1e-3)


def saturated(interval_s: float, count: int = 8) -> FetchHistory:
    return FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=interval_s,
                        observations=tuple(Observation(interval_s, True) for _ in range(count)))


@pytest.mark.parametrize(("history", "interval", "expected"), [
    (saturated(12 * HOUR), 12 * HOUR, 6 * HOUR),          # every fetch changed: probe faster
    (saturated(12 * HOUR, 7), 12 * HOUR, 12 * HOUR),      # not enough evidence yet
    (saturated(12 * HOUR), 30 * DAY, 30 * DAY),           # already given up on: leave it
    (saturated(HOUR), HOUR, HOUR),                        # never under the lower bound
])
def test_probe_when_every_fetch_found_a_change(history: FetchHistory, interval: float,
                                               expected: float) -> None:
    assert probe_interval_s(history, interval, BOUNDS) == expected


@pytest.mark.parametrize(("changed", "last_modified", "interval", "next_fetch"), [
    (True, None, 0.8 * DAY, 0.8 * DAY),                   # modified: interval * (1 - dec_rate)
    (False, None, 1.4 * DAY, 1.4 * DAY),                  # not modified: interval * (1 + inc_rate)
    (None, None, DAY, DAY),                               # unknown: unchanged
    (False, -3 * DAY, 3 * DAY, 3 * DAY - 0.9 * DAY),      # sync_delta: interval >= delta, earlier reference
    (True, -3 * DAY, 0.8 * DAY, 0.8 * DAY),               # modified: modified time is the fetch time
])
def test_nutch_adaptive_schedule(changed: bool | None, last_modified: float | None, interval: float,
                                 next_fetch: float) -> None:
    step = nutch_step(CONFIG, BOUNDS, DAY, changed, 0.0, last_modified)
    assert step.interval_s == pytest.approx(interval)
    assert step.next_fetch_s == pytest.approx(next_fetch)


def test_nutch_next_fetch_is_never_in_the_past() -> None:
    """NUTCH-1564: a page unchanged for a year got a reference time so early that it was due at once."""
    step = nutch_step(CONFIG, IntervalBounds(DAY, 7 * DAY), 2 * DAY, False, 0.0, -365 * DAY)
    assert step.interval_s == 7 * DAY
    assert step.next_fetch_s >= DAY


def test_nutch_without_sync_delta_ignores_last_modified() -> None:
    config = PolicyConfig(bounds=BOUNDS, nutch_sync_delta=False)
    assert nutch_step(config, BOUNDS, DAY, False, 0.0, -30 * DAY).next_fetch_s == pytest.approx(1.4 * DAY)


@pytest.mark.parametrize(("interval", "changed", "expected"), [
    (None, None, DAY),                           # first fetch: its default interval
    (DAY, True, 0.5 * DAY + 0.5 * HOUR),         # (1 - dec) * i + dec * min
    (DAY, False, 1.5 * DAY),                     # i * (1 + inc), a 304 included
    (10 * DAY, False, 14 * DAY),                 # at most the longest interval
    (HOUR, True, HOUR),                          # nears the minimum, never below
    (DAY, None, DAY),                            # undecided: kept
])
def test_stormcrawler_adaptive_scheduler(interval: float | None, changed: bool | None,
                                         expected: float) -> None:
    config = PolicyConfig(policy="stormcrawler", bounds=IntervalBounds(HOUR, 14 * DAY))
    assert stormcrawler_interval_s(config, config.bounds, interval, changed) == pytest.approx(expected)


def test_bounds_most_specific_rule_wins() -> None:
    config = PolicyConfig(
        bounds=BOUNDS, host_bounds=parse_bound_rules(("news.example=600:7200",), "host"),
        content_type_bounds=parse_bound_rules(("application/pdf=86400:8640000", "image/*=3600:864000"),
                                              "type"))
    assert bounds_for(config, "news.example", "application/pdf") == IntervalBounds(600, 7200)
    assert bounds_for(config, "www.news.example", None) == IntervalBounds(600, 7200)
    assert bounds_for(config, "other.example", "application/pdf") == IntervalBounds(86400, 8640000)
    assert bounds_for(config, "other.example", "image/png") == IntervalBounds(3600, 864000)
    assert bounds_for(config, "other.example", "text/html") == BOUNDS
    assert bounds_for(config, "xnews.example", None) == BOUNDS


@pytest.mark.parametrize("rule", ["example.com", "example.com=10", "example.com=a:b", "example.com=20:10"])
def test_bad_bound_rules_are_refused(rule: str) -> None:
    with pytest.raises(ConfigError):
        parse_bound_rules((rule,), "host")


@pytest.mark.parametrize("fields", [{"policy": "weekly"}, {"budget_fetches_per_page_per_day": 0.0},
                                    {"shards": 0}])
def test_bad_policy_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        PolicyConfig(**fields)  # type: ignore[arg-type]


def test_total_budget_is_split_over_shards() -> None:
    config = PolicyConfig(budget_fetches_per_day=86_400.0, shards=4)
    assert config.budget_per_s(pages=10) == pytest.approx(0.25)
    assert PolicyConfig(budget_fetches_per_page_per_day=2.0).budget_per_s(pages=43_200) == pytest.approx(1.0)
