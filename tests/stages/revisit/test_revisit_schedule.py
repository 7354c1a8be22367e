"""The pure step per fetch (apply_fetch) and seed 004's pre-fetch check (fetch_needed)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from streams.stages.revisit.budget import BudgetState
from streams.stages.revisit.history import FetchHistory
from streams.stages.revisit.hosts import MEMORY_S, HostChanges
from streams.stages.revisit.policies import IntervalBounds, PolicyConfig
from streams.stages.revisit.prefetch import fetch_needed
from streams.stages.revisit.schedule import CoreConfig, apply_fetch
from streams.stages.revisit.signals import Fetch

HOUR, DAY = 3600.0, 86_400.0
MONDAY = "Mon, 06 May 2024 08:00:00 GMT"
TUESDAY = "Tue, 07 May 2024 08:00:00 GMT"
NOW = 1_715_000_000.0

STORED = FetchHistory(first_fetch_s=NOW - DAY, last_fetch_s=NOW - DAY, interval_s=DAY, status=200,
                      etag='"v1"', last_modified=MONDAY, content_length=1000, body_digest=b"a" * 16)


@pytest.mark.parametrize(("history", "length", "modified", "etag", "expected"), [
    (None, 1000, MONDAY, None, (True, "no_history")),
    (STORED, 1000, MONDAY, '"v1"', (False, "etag_unchanged")),
    (STORED, 1000, MONDAY, '"v2"', (True, "etag_changed")),
    (STORED, 1000, MONDAY, None, (False, "unchanged")),                 # seed 004: both unchanged
    (STORED, 1000, TUESDAY, None, (True, "last_modified_changed")),
    (STORED, 1200, MONDAY, None, (True, "content_length_changed")),
    (STORED, None, MONDAY, None, (False, "last_modified_unchanged")),
    (dataclasses.replace(STORED, last_modified=None), 1200, None, None, (True, "content_length_changed")),
    (dataclasses.replace(STORED, last_modified=None), 1000, None, None, (True, "content_length_only")),
    (dataclasses.replace(STORED, etag=None, last_modified=None, content_length=None), None, None, None,
     (True, "no_validators")),
])
def test_fetch_needed(history: FetchHistory | None, length: int | None, modified: str | None,
                      etag: str | None, expected: tuple[bool, str]) -> None:
    assert fetch_needed(history, length, modified, etag) == expected


def config(policy: str = "default", **fields: object) -> CoreConfig:
    policy_config = PolicyConfig(policy=policy, bounds=IntervalBounds(HOUR, 30 * DAY), **fields)  # type: ignore[arg-type]
    return CoreConfig(policy=policy_config)


def test_first_fetch_waits_the_initial_interval() -> None:
    budget = BudgetState()
    outcome = apply_fetch(None, Fetch(NOW, etag='"v1"', body_digest=b"a" * 16), config(), budget, "a.example")
    assert (outcome.changed, outcome.signal, outcome.interval_s) == (None, "first_fetch", DAY)
    assert outcome.next_fetch_s == NOW + DAY and outcome.history is not None
    assert outcome.conditional_headers == {"If-None-Match": '"v1"'}
    assert budget.unestimated == 1 and budget.pages == 1


def test_refetch_estimates_a_rate_and_counts_it() -> None:
    budget = BudgetState()
    outcome = apply_fetch(STORED, Fetch(NOW, status=304), config(), budget, "a.example")
    assert (outcome.changed, outcome.signal) == (False, "not_modified")
    assert outcome.rate_per_s == pytest.approx(0.5 / DAY)
    assert outcome.history is not None and outcome.history.rate_bin >= 0
    assert outcome.conditional_headers == {"If-None-Match": '"v1"', "If-Modified-Since": MONDAY}


@pytest.mark.parametrize(("rate_bin", "spent"), [(-1, False), (40, True)])
def test_the_spend_counts_the_refetches_of_pages_with_an_estimate(rate_bin: int, spent: bool) -> None:
    """A page's second fetch, at the initial interval, is the price of discovering it, not a
    revisit the budget allocated: the spend feedback leaves it out, as the allocation leaves out the
    pages without an estimate (their share of the budget aside)."""
    budget = BudgetState()
    apply_fetch(dataclasses.replace(STORED, rate_bin=rate_bin), Fetch(NOW, status=304), config(), budget,
                "a.example")
    assert (budget.spend_weight > 0) == spent


def test_head_that_needs_a_fetch_is_due_now_and_stores_nothing() -> None:
    head = Fetch(NOW, method="HEAD", last_modified=TUESDAY, etag=None, content_length=1000)
    outcome = apply_fetch(STORED, head, config(), BudgetState(), "a.example")
    assert (outcome.fetch_needed, outcome.fetch_needed_reason) == (True, "last_modified_changed")
    assert (outcome.signal, outcome.changed, outcome.history) == ("head_changed", None, None)
    assert outcome.next_fetch_s == NOW and outcome.interval_s == DAY


def test_head_that_shows_no_change_counts_as_an_unchanged_fetch() -> None:
    head = Fetch(NOW, method="HEAD", last_modified=MONDAY, etag=None, content_length=1000)
    outcome = apply_fetch(STORED, head, config(), BudgetState(), "a.example")
    assert (outcome.fetch_needed, outcome.fetch_needed_reason) == (False, "unchanged")
    assert (outcome.signal, outcome.changed) == ("head_unchanged", False)
    assert outcome.history is not None and outcome.history.body_digest == b"a" * 16
    assert len(outcome.history.observations) == 1 and outcome.next_fetch_s > NOW


def test_head_without_history_asks_for_the_fetch() -> None:
    outcome = apply_fetch(None, Fetch(NOW, method="HEAD"), config(), BudgetState(), "a.example")
    assert (outcome.fetch_needed, outcome.fetch_needed_reason, outcome.history) == (True, "no_history", None)


def test_failed_fetch_is_retried_and_stores_nothing() -> None:
    outcome = apply_fetch(STORED, Fetch(NOW, status=503), config(), BudgetState(), "a.example")
    assert (outcome.signal, outcome.changed, outcome.history) == ("fetch_error", None, None)
    assert outcome.interval_s == HOUR and outcome.next_fetch_s == NOW + HOUR


@pytest.mark.parametrize(("policy", "changed_body", "interval"), [
    ("nutch", b"b" * 16, 0.8 * DAY), ("nutch", b"a" * 16, 1.4 * DAY), ("fixed", b"b" * 16, DAY)])
def test_other_policies(policy: str, changed_body: bytes, interval: float) -> None:
    fetch = Fetch(NOW, etag='"v1"', body_digest=changed_body)
    outcome = apply_fetch(dataclasses.replace(STORED, last_modified=None), fetch,
                          config(policy, nutch_sync_delta=False), BudgetState(), "a.example")
    assert outcome.interval_s == pytest.approx(interval)


def test_host_bounds_apply_to_every_policy() -> None:
    bounded = config("fixed", fixed_interval_s=DAY,
                     host_bounds=(("slow.example", IntervalBounds(7 * DAY, 30 * DAY)),))
    outcome = apply_fetch(STORED, Fetch(NOW, status=304), bounded, BudgetState(), "www.slow.example")
    assert outcome.interval_s == 7 * DAY


def _quiet_page_estimate(host: HostChanges, policy: str = "default") -> float | None:
    """A page fetched twice ten days apart, unchanged, against ``host``'s changes."""
    first = apply_fetch(None, Fetch(NOW, body_digest=b"a" * 16), config(policy), BudgetState(), "x", host)
    assert first.history is not None
    second = apply_fetch(first.history, Fetch(NOW + 10 * DAY, body_digest=b"a" * 16), config(policy),
                         BudgetState(), "x", host)
    return second.rate_per_s


def test_a_quiet_page_of_a_busy_host_is_estimated_busier_than_one_of_a_quiet_host() -> None:
    busy, quiet = HostChanges(50.0, 100 * DAY, NOW), HostChanges(1.0, 1000 * DAY, NOW)
    assert _quiet_page_estimate(busy) > 5 * (_quiet_page_estimate(quiet) or 0.0)
    # the re-fetch joined the host's evidence, after ten days' decay
    assert busy.watched_s == pytest.approx((100 * math.exp(-10 * DAY / MEMORY_S) + 10) * DAY)


@pytest.mark.parametrize("policy", ["nutch", "stormcrawler", "fixed"])
def test_other_policies_keep_the_pages_own_estimate(policy: str) -> None:
    busy, quiet = HostChanges(50.0, 100 * DAY, NOW), HostChanges(1.0, 1000 * DAY, NOW)
    assert _quiet_page_estimate(busy, policy) == _quiet_page_estimate(quiet, policy)
    assert busy.watched_s == 100 * DAY
