"""Host priors: what a host's pages showed of change, decayed, encoded, merged on a reshard."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import StateError
from streams.stages.revisit.history import FetchHistory, Observation
from streams.stages.revisit.hosts import (
    DEFAULT_SHAPE,
    MEMORY_S,
    PRIOR_SHAPES,
    HostChanges,
    host_key,
    merge_hosts,
)

DAY = 86_400.0


def test_a_new_host_assumes_one_change_per_initial_interval() -> None:
    assert HostChanges().mean_rate_per_s(DAY) == pytest.approx(1 / DAY)
    prior = HostChanges().prior(DAY)
    assert prior.shape == DEFAULT_SHAPE and prior.shape / prior.exposure_s == pytest.approx(1 / DAY)


def test_the_mean_follows_what_the_pages_showed() -> None:
    host = HostChanges()
    for day in range(1, 101):   # 10 changes in 1,000 page-days
        host.observe(Observation(10 * DAY, day % 10 == 0), day * 60.0, None, DAY)
    assert host.mean_rate_per_s(DAY) * DAY == pytest.approx(11 / 1001, rel=1e-3)


def test_old_evidence_fades() -> None:
    host = HostChanges()
    host.observe(Observation(DAY, True), 0.0, None, DAY)
    host.decay(MEMORY_S)
    assert (host.changes, host.watched_s) == pytest.approx((math.exp(-1), DAY * math.exp(-1)))
    host.decay(0.0)   # a clock going back decays nothing
    assert host.changes == pytest.approx(math.exp(-1))


def _page(intervals_s: list[float], changed: list[bool]) -> FetchHistory:
    """A page watched from 0 through ``intervals_s``, each fetch finding a change or not."""
    observations = tuple(Observation(t, c) for t, c in zip(intervals_s, changed, strict=True))
    return FetchHistory(first_fetch_s=0.0, last_fetch_s=sum(intervals_s), interval_s=intervals_s[-1],
                        observations=observations, fetches=len(observations) + 1, changes=sum(changed))


def _host_of(pages: list[list[bool]], interval_s: float) -> HostChanges:
    """A host whose pages were re-fetched every ``interval_s`` in turn, each showing its own changes."""
    host, now = HostChanges(), 0.0
    for fetch in range(1, max(len(changes) for changes in pages)):
        for changes in pages:
            now += 1.0
            seen = changes[:fetch]
            page = _page([interval_s] * len(seen), seen)
            host.observe(Observation(interval_s, changes[fetch]), now, page, DAY)
    return host


def test_a_host_whose_pages_mix_every_rate_pulls_them_weakly() -> None:
    """Half the pages change between every two fetches, half never: the host's mean fits neither,
    and the weakest prior predicts their next fetches best."""
    host = _host_of([[True] * 12] * 10 + [[False] * 12] * 10, 10 * DAY)
    assert host.shape() == min(PRIOR_SHAPES)


def test_a_host_whose_pages_agree_keeps_a_strong_prior() -> None:
    """Every page changes about once in four fetches: the host's mean fits each of them."""
    pattern = [i % 4 == 0 for i in range(12)]
    host = _host_of([pattern[k % 4:] + pattern[:k % 4] for k in range(20)], 10 * DAY)
    assert host.shape() >= DEFAULT_SHAPE


def test_a_host_without_scored_fetches_takes_the_default_shape() -> None:
    """A page's second fetch scores nothing: without observations every shape predicts the mean."""
    host = HostChanges()
    second = FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=0.0)
    host.observe(Observation(DAY, True), 0.0, second, DAY)
    assert host.scores == [0.0] * len(PRIOR_SHAPES) and host.shape() == DEFAULT_SHAPE


@given(st.floats(0, 1e6), st.floats(0, 1e12), st.one_of(st.just(math.nan), st.floats(0, 1e10)),
       st.lists(st.floats(-1e9, 0), min_size=len(PRIOR_SHAPES), max_size=len(PRIOR_SHAPES)))
def test_encoding_round_trips(changes: float, watched_s: float, clock_s: float, scores: list[float]) -> None:
    decoded = HostChanges.decode(HostChanges(changes, watched_s, clock_s, scores).encode())
    assert (decoded.changes, decoded.watched_s, decoded.scores) == (changes, watched_s, scores)
    assert decoded.clock_s == clock_s or (math.isnan(clock_s) and math.isnan(decoded.clock_s))


def test_a_host_state_of_format_1_is_read_with_no_scores() -> None:
    """Written before the shapes were scored (25 bytes: version, changes, watched, clock)."""
    raw = b"\x01" + struct.pack(">ddd", 3.0, 10 * DAY, 5.0)
    assert HostChanges.decode(raw) == HostChanges(3.0, 10 * DAY, 5.0)
    assert HostChanges.decode(raw).shape() == DEFAULT_SHAPE


@pytest.mark.parametrize("raw", [b"", b"\x03" + b"\0" * 56, b"\x01" + b"\0" * 10, b"\x02" + b"\0" * 24])
def test_unreadable_host_state_is_refused(raw: bytes) -> None:
    with pytest.raises(StateError):
        HostChanges.decode(raw)


def test_merge_adds_shards_at_the_latest_clock_and_splits_evenly() -> None:
    scores = [-4.0, -2.0, -1.0]
    merged = merge_hosts([HostChanges(4.0, 100 * DAY, 0.0, scores), HostChanges(2.0, 50 * DAY, MEMORY_S)], 3)
    assert merged.clock_s == MEMORY_S
    assert merged.changes == pytest.approx((4 * math.exp(-1) + 2) / 3)
    assert merged.watched_s == pytest.approx((100 * math.exp(-1) + 50) * DAY / 3)
    assert merged.scores == pytest.approx([score * math.exp(-1) / 3 for score in scores])


def test_host_keys_are_apart_from_histories_and_meta() -> None:
    assert host_key("example.com") == b"pexample.com"
    assert not host_key("h").startswith((b"h", b"meta:"))
