"""Host priors: what a host's pages showed of change, decayed, encoded, merged on a reshard."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import StateError
from streams.stages.revisit.history import Observation
from streams.stages.revisit.hosts import MEMORY_S, PRIOR_SHAPE, HostChanges, host_key, merge_hosts

DAY = 86_400.0


def test_a_new_host_assumes_one_change_per_initial_interval() -> None:
    assert HostChanges().mean_rate_per_s(DAY) == pytest.approx(1 / DAY)
    prior = HostChanges().prior(DAY)
    assert prior.shape == PRIOR_SHAPE and prior.shape / prior.exposure_s == pytest.approx(1 / DAY)


def test_the_mean_follows_what_the_pages_showed() -> None:
    host = HostChanges()
    for day in range(1, 101):
        host.observe(Observation(10 * DAY, day % 10 == 0), day * 60.0)   # 10 changes in 1,000 page-days
    assert host.mean_rate_per_s(DAY) * DAY == pytest.approx(11 / 1001, rel=1e-3)


def test_old_evidence_fades() -> None:
    host = HostChanges()
    host.observe(Observation(DAY, True), 0.0)
    host.decay(MEMORY_S)
    assert (host.changes, host.watched_s) == pytest.approx((math.exp(-1), DAY * math.exp(-1)))
    host.decay(0.0)   # a clock going back decays nothing
    assert host.changes == pytest.approx(math.exp(-1))


@given(st.floats(0, 1e6), st.floats(0, 1e12), st.one_of(st.just(math.nan), st.floats(0, 1e10)))
def test_encoding_round_trips(changes: float, watched_s: float, clock_s: float) -> None:
    decoded = HostChanges.decode(HostChanges(changes, watched_s, clock_s).encode())
    assert (decoded.changes, decoded.watched_s) == (changes, watched_s)
    assert decoded.clock_s == clock_s or (math.isnan(clock_s) and math.isnan(decoded.clock_s))


@pytest.mark.parametrize("raw", [b"", b"\x02" + b"\0" * 24, b"\x01" + b"\0" * 10])
def test_unreadable_host_state_is_refused(raw: bytes) -> None:
    with pytest.raises(StateError):
        HostChanges.decode(raw)


def test_merge_adds_shards_at_the_latest_clock_and_splits_evenly() -> None:
    merged = merge_hosts([HostChanges(4.0, 100 * DAY, 0.0), HostChanges(2.0, 50 * DAY, MEMORY_S)], 3)
    assert merged.clock_s == MEMORY_S
    assert merged.changes == pytest.approx((4 * math.exp(-1) + 2) / 3)
    assert merged.watched_s == pytest.approx((100 * math.exp(-1) + 50) * DAY / 3)


def test_host_keys_are_apart_from_histories_and_meta() -> None:
    assert host_key("example.com") == b"pexample.com"
    assert not host_key("h").startswith((b"h", b"meta:"))
