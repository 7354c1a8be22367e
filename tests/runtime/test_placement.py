"""Standby placement: the range assignor's owners, and who would own each shard next."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime.placement import owned_after_join, range_owners, standby_chain, standby_shards


def _ranges(owners: dict[int, str]) -> dict[str, list[int]]:
    by_member: dict[str, list[int]] = {}
    for shard, member in sorted(owners.items()):
        by_member.setdefault(member, []).append(shard)
    return by_member


@pytest.mark.parametrize(("members", "shards", "expected"), [
    ([], 8, {}),
    (["w0"], 4, {"w0": [0, 1, 2, 3]}),
    (["w1", "w0"], 8, {"w0": [0, 1, 2, 3], "w1": [4, 5, 6, 7]}),
    # librdkafka's range assignor: the first shards % n members get one more
    (["a", "b", "c"], 8, {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}),
    # members ordered as strings, as group.instance.id is compared: "w10" before "w2"
    (["w2", "w10"], 2, {"w10": [0], "w2": [1]}),
    # more members than shards: the last ones own nothing
    (["a", "b", "c"], 2, {"a": [0], "b": [1]}),
])
def test_range_owners_lay_members_out_as_the_range_assignor(members: list[str], shards: int,
                                                            expected: dict[str, list[int]]) -> None:
    assert _ranges(range_owners(members, shards)) == expected


@pytest.mark.parametrize(("shard", "members", "replicas", "expected"), [
    (0, ["w0", "w1"], 1, ["w1"]),
    (5, ["w0", "w1"], 1, ["w0"]),
    (0, ["w0", "w1"], 2, ["w1"]),         # no third worker to hold a second copy
    (0, ["w0"], 1, []),
    # a, b, c own 0-2, 3-5, 6-7; without a, b owns 0-3 and c 4-7; without a and b, c owns all
    (0, ["a", "b", "c"], 1, ["b"]),
    (2, ["a", "b", "c"], 2, ["b", "c"]),
    (4, ["a", "b", "c"], 1, ["c"]),        # without b: a 0-3, c 4-7
    (3, ["a", "b", "c"], 1, ["a"]),
])
def test_standby_chain_is_who_would_own_the_shard_next(shard: int, members: list[str], replicas: int,
                                                       expected: list[str]) -> None:
    assert standby_chain(shard, members, 8, replicas) == expected


def test_a_worker_keeps_warm_what_it_would_be_given() -> None:
    assert standby_shards("b", ["a", "b", "c"], 8, 1) == {0, 1, 2, 6, 7}  # a's, and c's
    assert standby_shards("w0", ["w0", "w1"], 8, 1) == {4, 5, 6, 7}
    assert standby_shards("w0", ["w0"], 8, 1) == set()
    assert standby_shards("w0", ["w0", "w1"], 8, 0) == set()


def test_a_joining_worker_knows_its_shards_before_it_joins() -> None:
    assert owned_after_join("w1", ["w0"], 8) == {4, 5, 6, 7}
    assert owned_after_join("w0", [], 8) == set(range(8))
    assert owned_after_join("w0", ["w0", "w1"], 8) == {0, 1, 2, 3}  # a restarted member: its own


members_and_shards = st.tuples(
    st.sets(st.text("abcdw0123456789", min_size=1, max_size=4), min_size=2, max_size=6),
    st.integers(min_value=1, max_value=24))


@given(members_and_shards)
def test_each_first_standby_is_the_owner_after_the_owner_leaves(case: tuple[set[str], int]) -> None:
    members, shards = case
    owners = range_owners(members, shards)
    for shard in range(shards):
        [standby] = standby_chain(shard, members, shards, 1)
        assert standby != owners[shard]
        assert range_owners(members - {owners[shard]}, shards)[shard] == standby


@given(members_and_shards, st.integers(min_value=1, max_value=3))
def test_standbys_are_other_workers_and_every_shard_has_its_replicas(case: tuple[set[str], int],
                                                                     replicas: int) -> None:
    members, shards = case
    owners = range_owners(members, shards)
    held = {member: standby_shards(member, members, shards, replicas) for member in members}
    for member, kept in held.items():
        assert not kept & {shard for shard, owner in owners.items() if owner == member}
    for shard in range(shards):
        copies = sum(1 for kept in held.values() if shard in kept)
        assert copies == min(replicas, len(members) - 1)
