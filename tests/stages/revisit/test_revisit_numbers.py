"""Learned number churn: the verdict on moved numbers, what a comparison teaches, the host's votes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import StateError
from streams.stages.revisit.move import RevisitMove
from streams.stages.revisit.numbers import (
    HostNumbers,
    Learned,
    NumberVerdict,
    filled_buckets,
    host_numbers_key,
    judge,
    learn,
    merge_host_numbers,
    moved_buckets,
    whole_days_apart,
)

COUNTER, RELEASE, DATE = 0b001, 0b010, 0b100


def buckets(**values: int) -> bytes:
    """64 bytes with bucket ``bN`` holding ``values["bN"]`` (the rest empty)."""
    held = [0] * 32
    for name, value in values.items():
        held[int(name[1:])] = value
    return b"".join(v.to_bytes(2, "big") for v in held)


@pytest.mark.parametrize(("moved", "steady", "churn", "probing", "host_churn", "verdict"), [
    (COUNTER, 0, 0, False, 0, NumberVerdict(None, "numbers_unlearned")),       # a suspect: probe
    (COUNTER, 0, 0, True, 0, NumberVerdict(False, "number_churn")),            # moved again on the probe
    (COUNTER, 0, COUNTER, False, 0, NumberVerdict(False, "number_churn")),     # known to churn here
    (COUNTER, 0, 0, False, COUNTER, NumberVerdict(False, "number_churn")),     # the host knows it
    (COUNTER | RELEASE, RELEASE, COUNTER, False, 0, NumberVerdict(True, "number_edit")),
    (RELEASE, RELEASE, 0, False, RELEASE, NumberVerdict(True, "number_edit")),  # steady wins over the host
    (COUNTER | DATE, 0, COUNTER, False, 0, NumberVerdict(None, "numbers_unlearned")),
    (0, 0b10, 0, False, 0, NumberVerdict(False, "number_churn")),   # only the page's clock moved
], ids=["suspect", "probe", "page churn", "host churn", "edit beside churn", "steady over host",
        "a new suspect beside churn", "only the clock"])
def test_judge(moved: int, steady: int, churn: int, probing: bool, host_churn: int,
               verdict: NumberVerdict) -> None:
    assert judge(moved, steady, churn, probing, host_churn) == verdict


def tallies(**counts: tuple[int, int]) -> bytes:
    """32 tallies with bucket ``bN`` at ``counts["bN"]`` = (still, moved) (the rest 0, 0)."""
    held = bytearray(32)
    for name, (still, moved) in counts.items():
        held[int(name[1:])] = still << 4 | moved
    return bytes(held)


NONE = tallies()


@pytest.mark.parametrize(("before", "after", "masks", "probing", "host_churn", "learned"), [
    # Still once: counted; twice: steady.
    (buckets(b1=5), buckets(b1=5), Learned(NONE, 0, 0), False, 0, Learned(tallies(b1=(1, 0)), 0, 0)),
    (buckets(b1=5), buckets(b1=5), Learned(tallies(b1=(1, 0)), 0, 0), False, 0,
     Learned(tallies(b1=(2, 0)), 0b10, 0)),
    # Still twice in a counter that moved nine times (a small random number repeating): not steady.
    (buckets(b1=5), buckets(b1=5), Learned(tallies(b1=(1, 9)), 0, 0), False, 0,
     Learned(tallies(b1=(2, 9)), 0, 0)),
    # On a probe: what moved again is churn (a vote for the host), what stayed is steady at once.
    (buckets(b0=1, b1=5), buckets(b0=2, b1=5), Learned(NONE, 0, 0), True, 0,
     Learned(tallies(b0=(0, 1), b1=(1, 0)), 0b10, 0b01, host_churn_votes=0b01)),
    # Churn already known: no second vote; a bucket that empties teaches nothing.
    (buckets(b0=1, b2=3), buckets(b0=2), Learned(NONE, 0, 0b01), True, 0,
     Learned(tallies(b0=(0, 1)), 0, 0b01)),
    # Steady where the host says churn: a dissenting vote, once.
    (buckets(b0=1), buckets(b0=1), Learned(tallies(b0=(1, 0)), 0, 0), False, 0b01,
     Learned(tallies(b0=(2, 0)), 0b01, 0, host_steady_votes=0b01)),
    (buckets(b0=1), buckets(b0=1), Learned(tallies(b0=(2, 0)), 0b01, 0), False, 0b01,
     Learned(tallies(b0=(3, 0)), 0b01, 0)),
    # A churn bucket seen still twice (and no more moved) is content after all.
    (buckets(b0=1), buckets(b0=1), Learned(tallies(b0=(1, 1)), 0, 0b01), False, 0,
     Learned(tallies(b0=(2, 1)), 0b01, 0)),
    # A steady bucket that has come to move in more than four of five comparisons is a suspect again.
    (buckets(b0=1), buckets(b0=2), Learned(tallies(b0=(1, 4)), 0b01, 0), False, 0,
     Learned(tallies(b0=(1, 5)), 0, 0)),
    # Counts at the top halve.
    (buckets(b0=1), buckets(b0=2), Learned(tallies(b0=(3, 15)), 0, 0), False, 0,
     Learned(tallies(b0=(2, 8)), 0, 0)),
], ids=["still once", "still twice", "chance repeats", "probe", "known churn", "dissent", "dissent once",
        "churn refuted", "steady revoked", "halved"])
def test_learn(before: bytes, after: bytes, masks: Learned, probing: bool, host_churn: int,
               learned: Learned) -> None:
    assert learn(before, after, masks, probing, host_churn) == learned


def test_standing_still_across_whole_days_proves_nothing() -> None:
    """A clock printed as a time of day shows the same time a day or a month later: still is not
    counted then (nor steady on a probe), what moved is."""
    learned = learn(buckets(b0=1, b1=5), buckets(b0=2, b1=5), Learned(tallies(b1=(1, 0)), 0, 0), True, 0,
                    whole_days=True)
    assert learned == Learned(tallies(b0=(0, 1), b1=(1, 0)), 0, 0b01, host_churn_votes=0b01)


@pytest.mark.parametrize(("interval_s", "whole"), [
    (86_400.0, True), (30 * 86_400.0 + 59, True), (7 * 86_400.0 - 30, True), (3_600.0, False),
    (86_400.0 + 120, False), (10.5 * 86_400, False), (30.0, False)])
def test_whole_days_apart(interval_s: float, whole: bool) -> None:
    assert whole_days_apart(interval_s) == whole


@given(st.binary(min_size=64, max_size=64), st.binary(min_size=64, max_size=64))
def test_moved_buckets_are_symmetric_and_empty_between_equals(a: bytes, b: bytes) -> None:
    assert moved_buckets(a, b) == moved_buckets(b, a)
    assert moved_buckets(a, a) == 0
    assert moved_buckets(a, b) & ~(filled_buckets(a) | filled_buckets(b)) == 0


@pytest.mark.parametrize(("churning", "steady", "is_churn"), [
    (1, 0, False), (2, 0, True), (3, 1, True), (3, 2, False), (255, 85, True), (0, 0, False),
])
def test_a_host_calls_a_bucket_churn_when_enough_of_its_pages_agree(churning: int, steady: int,
                                                                      is_churn: bool) -> None:
    host = HostNumbers()
    host.churning[7], host.steady[7] = churning, steady
    assert host.churn_mask() == (1 << 7 if is_churn else 0)


def test_host_votes_halve_at_the_cap_and_round_trip() -> None:
    host = HostNumbers()
    host.churning[3], host.steady[3] = 255, 40
    host.vote(Learned(NONE, 0, 0, host_churn_votes=1 << 3, host_steady_votes=1 << 4))
    assert (host.churning[3], host.steady[3], host.steady[4]) == (128, 20, 1)
    assert HostNumbers.decode(host.encode()) == host
    assert HostNumbers.decode(None) == HostNumbers()
    merged = merge_host_numbers([host, host])
    assert (merged.churning[3], merged.steady[3]) == (255, 40)


@pytest.mark.parametrize("raw", [b"", b"\x02" + bytes(64), b"\x01" + bytes(10)])
def test_unreadable_host_numbers_are_refused(raw: bytes) -> None:
    with pytest.raises(StateError):
        HostNumbers.decode(raw)


def test_a_reshard_gives_every_new_shard_all_of_a_hosts_number_votes() -> None:
    """Votes are pages' evidence about the host's template, not a share of its pages."""
    first, second = HostNumbers(), HostNumbers()
    first.churning[5], second.churning[5], second.steady[9] = 2, 1, 3
    move = RevisitMove(2, 3)
    assert list(move.place(0, host_numbers_key("example.com"), first.encode())) == []
    assert list(move.place(1, host_numbers_key("example.com"), second.encode())) == []
    placed = [(shard, key, HostNumbers.decode(value)) for shard, key, value in move.finish()]
    assert [(shard, key) for shard, key, _ in placed] == [(shard, b"nexample.com") for shard in range(3)]
    for _, _, votes in placed:
        assert (votes.churning[5], votes.steady[9]) == (3, 3) and votes.churn_mask() == 1 << 5


def test_host_number_keys_are_apart_from_every_other_key() -> None:
    assert host_numbers_key("h") == b"nh"
    assert not host_numbers_key("example.com").startswith((b"h", b"p", b"meta:"))
