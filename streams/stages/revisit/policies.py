"""Interval policies: ``default`` (freshness under a budget), ``nutch`` (AdaptiveFetchSchedule), ``fixed``.

* ``default``: each page's interval is ``1 / f`` with ``f`` the freshness-optimal frequency for its
  estimated change rate at the shard's Lagrange multiplier (:mod:`streams.stages.revisit.allocation`),
  which is re-solved every ``resolve_every`` updates so that the pages together spend the budget:
  ``budget_fetches_per_page_per_day`` times the shard's pages, or ``budget_fetches_per_day`` split
  evenly over ``shards``. A page without an estimate yet (fetched once) waits ``initial_interval_s``.
  One exploration rule (:func:`probe_interval_s`): when the last :data:`SATURATION_RUN` fetches all
  found a change, the estimate from intervals is only a lower bound (``ln(2n + 1) / I`` at most, for
  ``n`` fetches every ``I``), and a page changing much faster than the budget can follow would sit
  forever at the interval its own underestimate justifies, spending fetches on a page that is
  never fresh. Unless the policy already gives up on the page (the longest interval), the next
  fetch then comes after half the median of those intervals, until the estimate either shows
  unchanged fetches or rises past ``1 / mu`` (then the page gets the longest interval).
* ``nutch``: Apache Nutch's ``AdaptiveFetchSchedule`` as its documentation and
  ``nutch-default.xml`` describe it (``db.fetch.schedule.adaptive.*``), for operators coming from
  Nutch: on a change the interval is multiplied by ``1 - dec_rate`` (0.2), otherwise by
  ``1 + inc_rate`` (0.4); an undecided fetch leaves it. With ``sync_delta`` the "modified time" is
  the server's Last-Modified (the fetch time without one, and on a change), ``delta`` = fetch time
  minus modified time; the interval grows to ``delta`` if shorter, and the next fetch is counted
  from ``fetch time - delta * sync_delta_rate`` (0.3) instead of the fetch time. The interval is
  then clamped to the bounds. One deliberate difference: the next fetch time itself is clamped to
  ``[fetch + min, fetch + max]``, the fix proposed in NUTCH-1564, where a page unchanged for long
  got a next fetch time in the past and was refetched every cycle.
* ``stormcrawler``: StormCrawler's ``AdaptiveScheduler`` (``scheduler.adaptive.*`` of its
  configuration, defaults in its source): on a change the interval becomes
  ``(1 - dec_rate) * interval + dec_rate * min_interval`` (so it nears the minimum ever more slowly),
  otherwise (a 304 included) ``interval * (1 + inc_rate)``, at most the longest interval; an
  undecided fetch keeps it, and the first fetch takes ``initial_interval_s`` (its default fetch
  interval, one day). Both rates are 0.5 by default; its own bounds are one hour and two weeks, which
  the operator sets as ``min_interval_s`` and ``max_interval_s``. Its change signal is an MD5 of the
  content; here it is :func:`streams.stages.revisit.signals.detect_change`.
* ``fixed``: ``fixed_interval_s`` for every page.

Every policy's interval is clamped to the page's bounds (:func:`bounds_for`): the most specific of
a host rule, a content-type rule and the global ``[min_interval_s, max_interval_s]``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Final

from streams.errors import ConfigError
from streams.stages.revisit.allocation import optimal_frequency
from streams.stages.revisit.budget import BudgetState
from streams.stages.revisit.estimators import uses_last_modified
from streams.stages.revisit.history import FetchHistory

POLICIES: Final = ("default", "nutch", "stormcrawler", "fixed")
SECONDS_PER_DAY: Final = 86_400.0
SATURATION_RUN: Final = 8


@dataclass(frozen=True, slots=True)
class IntervalBounds:
    """Shortest and longest revisit interval, seconds."""

    min_s: float
    max_s: float

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.max_s:
            raise ConfigError(f"interval bounds need 0 < min <= max: {self.min_s}, {self.max_s}")

    def clamp(self, interval_s: float) -> float:
        return min(max(interval_s, self.min_s), self.max_s)


@dataclass(frozen=True)
class PolicyConfig:
    """What the policies need; built by :class:`streams.stages.revisit.stage.RevisitSettings`
    (defaults there)."""

    policy: str = "default"
    bounds: IntervalBounds = field(default_factory=lambda: IntervalBounds(3600.0, 30 * SECONDS_PER_DAY))
    initial_interval_s: float = SECONDS_PER_DAY
    budget_fetches_per_page_per_day: float = 0.1
    budget_fetches_per_day: float = 0.0
    shards: int = 1
    resolve_every: int = 64
    fixed_interval_s: float = SECONDS_PER_DAY
    host_bounds: tuple[tuple[str, IntervalBounds], ...] = ()
    content_type_bounds: tuple[tuple[str, IntervalBounds], ...] = ()
    nutch_inc_rate: float = 0.4
    nutch_dec_rate: float = 0.2
    nutch_sync_delta: bool = True
    nutch_sync_delta_rate: float = 0.3
    stormcrawler_inc_rate: float = 0.5
    stormcrawler_dec_rate: float = 0.5

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"revisit policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")
        if self.budget_fetches_per_page_per_day <= 0 and self.budget_fetches_per_day <= 0:
            raise ConfigError("a revisit budget must be positive (per page per day, or per day in total)")
        if self.shards < 1 or self.resolve_every < 1:
            raise ConfigError("shards and resolve_every must be at least 1")
        if not (self.stormcrawler_inc_rate >= 0 and 0 <= self.stormcrawler_dec_rate <= 1):
            raise ConfigError("stormcrawler_inc_rate must be >= 0 and stormcrawler_dec_rate within [0, 1]")

    def budget_per_s(self, pages: int) -> float:
        """The shard's budget, fetches per second: the total split over shards, or per page."""
        if self.budget_fetches_per_day > 0:
            return self.budget_fetches_per_day / self.shards / SECONDS_PER_DAY
        return self.budget_fetches_per_page_per_day * max(pages, 1) / SECONDS_PER_DAY


def parse_bound_rules(rules: tuple[str, ...], what: str) -> tuple[tuple[str, IntervalBounds], ...]:
    """``("example.com=600:86400", ...)`` -> ``(("example.com", IntervalBounds(600, 86400)), ...)``."""
    parsed = []
    for rule in rules:
        key, _, span = rule.partition("=")
        low, _, high = span.partition(":")
        try:
            parsed.append((key.strip().lower(), IntervalBounds(float(low), float(high))))
        except ValueError as error:
            raise ConfigError(f"{what} interval rule {rule!r}: expected KEY=MIN_S:MAX_S") from error
    return tuple(parsed)


def bounds_for(config: PolicyConfig, host: str, content_type: str | None) -> IntervalBounds:
    """The page's bounds: a host rule (the host or a parent domain), else a content-type rule
    (``text/html`` or ``text/*``), else the global bounds."""
    for key, bounds in config.host_bounds:
        if host == key or host.endswith("." + key):
            return bounds
    if content_type:
        family = content_type.partition("/")[0] + "/*"
        for key, bounds in config.content_type_bounds:
            if key in (content_type, family):
                return bounds
    return config.bounds


def fixed_interval_s(config: PolicyConfig, bounds: IntervalBounds) -> float:
    return bounds.clamp(config.fixed_interval_s)


def default_interval_s(config: PolicyConfig, bounds: IntervalBounds, rate_per_s: float | None,
                       budget: BudgetState, now_s: float) -> float:
    """The budget policy's interval for a page with estimated rate ``rate_per_s`` (module docstring)."""
    if rate_per_s is None:
        return bounds.clamp(config.initial_interval_s)
    if budget.mu_s <= 0 or budget.since_solve >= config.resolve_every:
        budget.solve(config.budget_per_s(budget.pages), 1.0 / config.bounds.max_s,
                     1.0 / config.bounds.min_s, now_s)
    frequency = optimal_frequency(rate_per_s, budget.mu_s, 1.0 / bounds.max_s, 1.0 / bounds.min_s)
    return bounds.clamp(1.0 / frequency)


def stormcrawler_interval_s(config: PolicyConfig, bounds: IntervalBounds, interval_s: float | None,
                            changed: bool | None) -> float:
    """One step of StormCrawler's AdaptiveScheduler (module docstring)."""
    if interval_s is None:
        return bounds.clamp(config.initial_interval_s)
    if changed is True:
        decrement = config.stormcrawler_dec_rate
        return bounds.clamp((1.0 - decrement) * interval_s + decrement * bounds.min_s)
    if changed is False:
        return bounds.clamp(interval_s * (1.0 + config.stormcrawler_inc_rate))
    return bounds.clamp(interval_s)


def probe_interval_s(history: FetchHistory, interval_s: float, bounds: IntervalBounds) -> float:
    """``interval_s``, or a shorter probe when the interval estimate is saturated (module docstring)."""
    recent = history.observations[-SATURATION_RUN:]
    if (interval_s >= bounds.max_s or len(recent) < SATURATION_RUN or not all(o.changed for o in recent)
            or uses_last_modified(history)):
        return interval_s
    return bounds.clamp(min(interval_s, 0.5 * statistics.median(o.interval_s for o in recent)))


@dataclass(frozen=True, slots=True)
class NutchStep:
    """The outcome of one AdaptiveFetchSchedule step: the new interval, next fetch and modified time."""

    interval_s: float
    next_fetch_s: float
    modified_time_s: float


def nutch_step(config: PolicyConfig, bounds: IntervalBounds, interval_s: float, changed: bool | None,
               fetched_at_s: float, last_modified_s: float | None) -> NutchStep:
    """One ``setFetchSchedule`` of Nutch's AdaptiveFetchSchedule (module docstring)."""
    modified_s = fetched_at_s if last_modified_s is None else last_modified_s
    if changed is True:
        interval_s *= 1.0 - config.nutch_dec_rate
        modified_s = fetched_at_s
    elif changed is False:
        interval_s *= 1.0 + config.nutch_inc_rate
    reference_s = fetched_at_s
    if config.nutch_sync_delta:
        delta_s = fetched_at_s - modified_s
        interval_s = max(interval_s, delta_s)
        reference_s = fetched_at_s - delta_s * config.nutch_sync_delta_rate
    interval_s = bounds.clamp(interval_s)
    next_fetch_s = min(max(reference_s + interval_s, fetched_at_s + bounds.min_s),
                       fetched_at_s + bounds.max_s)
    return NutchStep(interval_s, next_fetch_s, modified_s)
