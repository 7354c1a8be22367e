"""One fetch in, one revisit decision out: the pure step the stage calls for every fetched page.

:func:`apply_fetch` takes what is stored for the URL (or nothing), the fetch, the configuration and
the shard's allocation state (:class:`~streams.stages.revisit.budget.BudgetState`, updated in place),
and returns a :class:`RevisitOutcome`: the history to store, whether the page changed and which
signal said so, the next interval and fetch time, the rate estimate, and for a HEAD the pre-fetch
answer. The steps:

1. A HEAD is answered by :func:`~streams.stages.revisit.prefetch.fetch_needed`. When a full fetch is
   needed the page is due now and nothing is stored (the full fetch will be compared); when not,
   the HEAD counts as an unchanged fetch (``head_unchanged``) and goes on like a 304.
2. :func:`~streams.stages.revisit.signals.detect_change`, with what the host knows of its pages'
   numbers. A failed fetch (``fetch_error``) stores nothing and is retried after
   ``min(interval, error_retry_interval_s)``.
3. :func:`updated_history`: the stored copy's validators and digests are replaced by the fetch's
   (kept on a 304 or a HEAD, which carry no body), the observation (time since the fetch
   before, changed or not, Last-Modified age) joins the window of the last ``history_fetches``,
   and the page learns which of its numbers are content and which churn
   (:mod:`streams.stages.revisit.numbers`; its votes go to the host's).
4. The rate is estimated (:func:`~streams.stages.revisit.estimators.estimate_rate`), the page moves
   to its rate bin of the shard's budget state, and the policy gives the interval
   (:mod:`streams.stages.revisit.policies`). The ``default`` policy, whose intervals follow the
   estimates, estimates against the host's prior when the caller keeps one
   (:mod:`streams.stages.revisit.hosts`; the new observation joins it first); the other policies'
   intervals do not read the estimate, and theirs stays the page's own, a function of its history
   alone, whatever else the shard holds. When numbers moved that the history cannot place
   (``numbers_unlearned``), the next fetch is brought forward to the page's shortest interval, the
   probe that places them, whatever the policy, asked for without conditional headers (a 304 shows
   no numbers); the stored interval stays the policy's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from streams.errors import ConfigError
from streams.stages.revisit.allocation import rate_bin
from streams.stages.revisit.budget import NOT_COUNTED, UNESTIMATED, BudgetState
from streams.stages.revisit.estimators import estimate_rate
from streams.stages.revisit.history import FetchHistory, Observation
from streams.stages.revisit.hosts import HostChanges
from streams.stages.revisit.numbers import NO_TALLIES, HostNumbers, Learned, learn, whole_days_apart
from streams.stages.revisit.policies import (
    IntervalBounds,
    PolicyConfig,
    bounds_for,
    default_interval_s,
    fixed_interval_s,
    nutch_step,
    probe_interval_s,
    stormcrawler_interval_s,
)
from streams.stages.revisit.prefetch import fetch_needed
from streams.stages.revisit.signals import ChangeDecision, Fetch, detect_change, http_date_s

_CLOCK_SKEW_S = 60.0      # a Last-Modified this close to the fetch is the response's time, not the page's
PROBE_LATENESS = 2.0      # a probe fetched later than this many shortest intervals is no probe


@dataclass(frozen=True)
class CoreConfig:
    """Settings of the pure step (built by :class:`streams.stages.revisit.stage.RevisitSettings`)."""

    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    simhash_threshold: int = -1
    history_fetches: int = 32
    error_retry_interval_s: float = 3600.0

    def __post_init__(self) -> None:
        if not -1 <= self.simhash_threshold < 64:
            raise ConfigError(f"simhash_threshold must be -1 (off) or 0 to 63 bits: {self.simhash_threshold}")


@dataclass(frozen=True, slots=True)
class RevisitOutcome:
    """The decision for one fetch; ``history`` is what to store (``None``: leave the store as is)."""

    history: FetchHistory | None
    changed: bool | None
    signal: str
    interval_s: float
    next_fetch_s: float
    rate_per_s: float | None
    conditional_headers: dict[str, str]
    fetch_needed: bool | None = None
    fetch_needed_reason: str | None = None
    distance: int | None = None       # SimHash bits between the stored and fetched change texts


def apply_fetch(previous: FetchHistory | None, fetch: Fetch, config: CoreConfig,
                budget: BudgetState, host: str, host_changes: HostChanges | None = None,
                host_numbers: HostNumbers | None = None) -> RevisitOutcome:
    """Decide on one fetch (module docstring); ``host_changes`` and ``host_numbers`` are updated in
    place, as ``budget``."""
    if fetch.method == "HEAD":
        return _apply_head(previous, fetch, config, budget, host, host_changes)
    host_numbers = host_numbers if host_numbers is not None else HostNumbers()
    host_churn = host_numbers.churn_mask()
    previous = _probe_in_time(previous, fetch, config, host)
    decision = detect_change(previous, fetch, config.simhash_threshold, host_churn)
    if decision.signal == "fetch_error":
        return _retry(previous, fetch, config, decision)
    history = updated_history(previous, fetch, decision, config.history_fetches, host_numbers, host_churn)
    return _schedule(previous, history, decision, fetch, config, budget, host, host_changes)


def _probe_in_time(previous: FetchHistory | None, fetch: Fetch, config: CoreConfig,
                   host: str) -> FetchHistory | None:
    """``previous``, no longer waiting for a probe when this fetch comes too late to be one: more than
    :data:`PROBE_LATENESS` times the page's shortest interval after the fetch that asked for it (a
    number edited daily moves again within a day; it seldom does within an hour). A fetcher that
    does not follow the probe's time leaves the numbers unplaced, to be probed again."""
    if previous is None or not previous.numbers_probing:
        return previous
    bounds = bounds_for(config.policy, host, previous.content_type)
    if fetch.fetched_at_s - previous.last_fetch_s <= PROBE_LATENESS * bounds.min_s:
        return previous
    return dataclasses.replace(previous, numbers_probing=False)


def _apply_head(previous: FetchHistory | None, fetch: Fetch, config: CoreConfig,
                budget: BudgetState, host: str, host_changes: HostChanges | None) -> RevisitOutcome:
    needed, reason = fetch_needed(previous, fetch.content_length, fetch.last_modified, fetch.etag)
    if needed or previous is None:
        interval_s = previous.interval_s if previous is not None else config.policy.initial_interval_s
        return RevisitOutcome(None, None, "head_changed", interval_s, fetch.fetched_at_s,
                              previous.rate_per_s if previous is not None else None,
                              conditional_headers(previous), True, reason)
    decision = ChangeDecision(False, "head_unchanged")
    history = updated_history(previous, fetch, decision, config.history_fetches)
    outcome = _schedule(previous, history, decision, fetch, config, budget, host, host_changes)
    return dataclasses.replace(outcome, fetch_needed=False, fetch_needed_reason=reason)


def _retry(previous: FetchHistory | None, fetch: Fetch, config: CoreConfig,
           decision: ChangeDecision) -> RevisitOutcome:
    interval_s = config.error_retry_interval_s
    if previous is not None:
        interval_s = min(previous.interval_s, interval_s)
    rate_per_s = previous.rate_per_s if previous is not None else None
    return RevisitOutcome(None, decision.changed, decision.signal, interval_s,
                          fetch.fetched_at_s + interval_s, rate_per_s, conditional_headers(previous))


def _schedule(previous: FetchHistory | None, history: FetchHistory, decision: ChangeDecision, fetch: Fetch,
              config: CoreConfig, budget: BudgetState, host: str,
              host_changes: HostChanges | None) -> RevisitOutcome:
    policy = config.policy
    bounds = bounds_for(policy, host, history.content_type)
    now_s = fetch.fetched_at_s
    prior = None
    if host_changes is not None and policy.policy == "default":
        if _observed(previous, fetch, decision):
            host_changes.observe(history.observations[-1], now_s, previous, policy.initial_interval_s)
        prior = host_changes.prior(policy.initial_interval_s)
    rate_per_s = estimate_rate(history, prior)
    new_bin = rate_bin(rate_per_s) if rate_per_s is not None else UNESTIMATED
    budget.move(previous.rate_bin if previous is not None else NOT_COUNTED, new_bin)
    if previous is not None and previous.rate_bin != UNESTIMATED:
        budget.record_refetch(now_s)
    if policy.policy == "nutch":
        interval_s, next_fetch_s = _nutch(policy, bounds, previous, history, decision, now_s)
    else:
        if policy.policy == "fixed":
            interval_s = fixed_interval_s(policy, bounds)
        elif policy.policy == "stormcrawler":
            interval_s = stormcrawler_interval_s(policy, bounds, previous.interval_s if previous else None,
                                                 decision.changed)
        else:
            interval_s = default_interval_s(policy, bounds, rate_per_s, budget, now_s)
            interval_s = probe_interval_s(history, interval_s, bounds)
        next_fetch_s = now_s + interval_s
    stored = dataclasses.replace(history, interval_s=interval_s, rate_per_s=rate_per_s, rate_bin=new_bin)
    headers = conditional_headers(stored)
    if history.numbers_probing:
        interval_s = min(interval_s, bounds.min_s)
        next_fetch_s = min(next_fetch_s, now_s + interval_s)
        headers = {}
    return RevisitOutcome(stored, decision.changed, decision.signal, interval_s, next_fetch_s, rate_per_s,
                          headers, distance=decision.distance)


def _nutch(policy: PolicyConfig, bounds: IntervalBounds, previous: FetchHistory | None,
           history: FetchHistory, decision: ChangeDecision, now_s: float) -> tuple[float, float]:
    interval_s = previous.interval_s if previous is not None else policy.initial_interval_s
    step = nutch_step(policy, bounds, interval_s, decision.changed, now_s, http_date_s(history.last_modified))
    return step.interval_s, step.next_fetch_s


def updated_history(previous: FetchHistory | None, fetch: Fetch, decision: ChangeDecision,
                    window: int, host_numbers: HostNumbers | None = None,
                    host_churn: int = 0) -> FetchHistory:
    """The history after ``fetch`` (step 3 of the module docstring); the interval is set later.
    ``host_numbers`` receives the page's votes (:func:`streams.stages.revisit.numbers.learn`),
    ``host_churn`` is its churn mask before them."""
    now_s = fetch.fetched_at_s
    if previous is None:
        return _with_content(FetchHistory(first_fetch_s=now_s, last_fetch_s=now_s, interval_s=0.0), fetch)
    learned = _learned_numbers(previous, fetch, host_numbers, host_churn)
    observation = _observation(previous, fetch, decision)
    agree, disagree = _last_modified_votes(previous, fetch, decision)
    observations = previous.observations
    if observation is not None:
        observations = (*observations, observation)[-window:]
    return dataclasses.replace(
        _with_content(previous, fetch), last_fetch_s=max(now_s, previous.last_fetch_s),
        observations=observations,
        fetches=previous.fetches + 1, changes=previous.changes + (decision.changed is True),
        lm_agreements=previous.lm_agreements + agree, lm_disagreements=previous.lm_disagreements + disagree,
        number_tallies=learned.tallies, numbers_steady=learned.steady, numbers_churn=learned.churn,
        numbers_probing=decision.signal == "numbers_unlearned")


def _learned_numbers(previous: FetchHistory, fetch: Fetch, host_numbers: HostNumbers | None,
                     host_churn: int) -> Learned:
    """What the page knows of its numbers after ``fetch``: learned when both it and the stored copy
    are full responses with numbers; else as it was (a HEAD, a 304, a page without numbers).

    A 304 teaches nothing, not even to a probe: a server whose validators follow the content answers
    the probe 304 whether the numbers that moved before it were a counter or an edit (neither moves
    its validator within the probe), which is why a probe goes out without conditional headers
    (:func:`_schedule`)."""
    masks = Learned(previous.number_tallies or NO_TALLIES, previous.numbers_steady, previous.numbers_churn)
    if (previous.number_buckets is None or fetch.method == "HEAD" or fetch.status == 304
            or fetch.number_buckets is None):
        return masks
    learned = learn(previous.number_buckets, fetch.number_buckets, masks, previous.numbers_probing,
                    host_churn, whole_days_apart(fetch.fetched_at_s - previous.last_fetch_s))
    if host_numbers is not None:
        host_numbers.vote(learned)
    return learned


def _with_content(previous: FetchHistory, fetch: Fetch) -> FetchHistory:
    """A 304 or a HEAD keeps the stored copy (with any fresher validators); a full response replaces it."""
    if fetch.status == 304 or fetch.method == "HEAD":
        return dataclasses.replace(previous, etag=fetch.etag or previous.etag,
                                   last_modified=fetch.last_modified or previous.last_modified)
    return dataclasses.replace(
        previous, status=fetch.status, etag=fetch.etag, last_modified=fetch.last_modified,
        content_type=fetch.content_type or previous.content_type, content_length=fetch.content_length,
        body_digest=fetch.body_digest, text_digest=fetch.text_digest, simhash=fetch.simhash,
        wording_digest=fetch.wording_digest, number_buckets=fetch.number_buckets)


def _observed(previous: FetchHistory | None, fetch: Fetch, decision: ChangeDecision) -> bool:
    """Whether the fetch adds an observation to the window (:func:`_observation`)."""
    return (previous is not None and decision.changed is not None
            and fetch.fetched_at_s > previous.last_fetch_s)


def _observation(previous: FetchHistory, fetch: Fetch, decision: ChangeDecision) -> Observation | None:
    if not _observed(previous, fetch, decision):
        return None
    interval_s = fetch.fetched_at_s - previous.last_fetch_s
    age_s = None
    modified_s = http_date_s(fetch.last_modified) if decision.changed else None
    if modified_s is not None:
        age_s = fetch.fetched_at_s - modified_s
        plausible = _CLOCK_SKEW_S <= age_s <= interval_s + _CLOCK_SKEW_S
        age_s = min(age_s, interval_s) if plausible else None
    return Observation(interval_s, decision.changed is True, age_s)


def _last_modified_votes(previous: FetchHistory, fetch: Fetch, decision: ChangeDecision) -> tuple[int, int]:
    """(agreement, disagreement): did Last-Modified move exactly when the content changed?"""
    fetched_s = http_date_s(fetch.last_modified)
    stored_s = http_date_s(previous.last_modified)
    if decision.changed is None or fetched_s is None or stored_s is None:
        return 0, 0
    if abs(fetch.fetched_at_s - fetched_s) < _CLOCK_SKEW_S:
        return 0, 1   # the time of the response, not of the page's last change
    moved = fetched_s != stored_s
    return (1, 0) if moved == decision.changed else (0, 1)


def conditional_headers(history: FetchHistory | None) -> dict[str, str]:
    """Request headers that make the next fetch conditional (RFC 9110 sections 13.1.2 and 13.1.3)."""
    headers: dict[str, str] = {}
    if history is not None and history.etag:
        headers["If-None-Match"] = history.etag
    if history is not None and history.last_modified:
        headers["If-Modified-Since"] = history.last_modified
    return headers
