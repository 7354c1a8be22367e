"""Where a shard lives: its owner under the group's range assignor, and the workers that keep it warm.

Ownership is Kafka's to decide: the workers join one consumer group with the range assignor
(partition *i* of every internal topic is shard *i*, :mod:`streams.runtime.shards`), and librdkafka's
range assignor lays the members out sorted by ``group.instance.id`` when every member has one, as
every worker does (its ``--worker-id``, static membership, KIP-345), then gives member *k* of *n* the
*k*-th contiguous range of ``shards`` partitions, the first ``shards % n`` ranges one longer
(librdkafka ``rdkafka_range_assignor.c`` and ``rd_kafka_group_member_cmp``; the Java client's
``RangeAssignor`` does the same). So the owner of every shard is a function of the set of worker ids
in the group, and so is the owner each shard would get if one of them went away.

That is the whole placement of standby replicas (docs/decisions/0011-standby-replicas.md): a shard's
standbys are the workers that would own it next, ``standby_chain``: the owner it would have if its
owner left, then the owner it would have if that one left too, and so on. When an owner is lost the
assignor gives each of its shards to exactly the worker that kept it warm, which then replays only
the tail; no assignor of our own is needed (confluent-kafka's Python client cannot plug one in), and
nothing is stored about where standbys are: every worker computes the same answer from the group's
membership. A placement the assignor does not follow (an operator's ``client.rack`` makes librdkafka's
range assignor rack-aware) costs warmth, never correctness: a shard taken without a warm copy is
recovered from its changelog as before.

A worker about to join computes the shards it will own once it is a member, ``owned_after_join``,
and catches up on them before it joins (KIP-441's warm-up, without the probing rebalances).

Pure functions of names and counts: no Kafka here.
"""

from __future__ import annotations

from collections.abc import Iterable


def range_owners(members: Iterable[str], shards: int) -> dict[int, str]:
    """Shard -> the member the range assignor gives it, for a group of ``members`` (worker ids)."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    each, extra = divmod(shards, len(ordered))
    owners: dict[int, str] = {}
    for index, member in enumerate(ordered):
        start = each * index + min(index, extra)
        for shard in range(start, start + each + (1 if index < extra else 0)):
            owners[shard] = member
    return owners


def standby_chain(shard: int, members: Iterable[str], shards: int, replicas: int) -> list[str]:
    """The workers that keep ``shard`` warm, warmest-to-be first: who would own it if its owner left,
    then who would if that one left too... at most ``replicas`` of them (fewer in a small group)."""
    remaining = set(members)
    chain: list[str] = []
    owner = range_owners(remaining, shards).get(shard)
    while owner is not None and len(chain) < replicas:
        remaining.discard(owner)
        owner = range_owners(remaining, shards).get(shard)
        if owner is not None:
            chain.append(owner)
    return chain


def standby_shards(me: str, members: Iterable[str], shards: int, replicas: int) -> set[int]:
    """The shards ``me`` keeps warm for others in a group of ``members`` (``me`` among them)."""
    group = {*members, me}
    if replicas <= 0 or len(group) < 2:
        return set()
    return {shard for shard in range(shards) if me in standby_chain(shard, group, shards, replicas)}


def owned_after_join(me: str, members: Iterable[str], shards: int) -> set[int]:
    """The shards ``me`` will own once it is a member of the group of ``members``."""
    return {shard for shard, owner in range_owners({*members, me}, shards).items() if owner == me}
