"""When a waiting page may be decided: once no page that was already in the input could still race it.

A page is a duplicate when an *earlier* page (by order key,
:func:`streams.stages.content_seen.buckets.order_key`) lies within the Hamming threshold. Through
Kafka, pages are probed in arrival order, which is not order-key order: a copy may be probed before
its original (a backlog replayed newest first, partitions consumed at different speeds, one batch
holding both). Both directions are reported:

- a probe reports the best earlier page it meets in a bucket (a *reply* to its own page), and
- a probe that meets a *later* page sends that page a *notice*: "an earlier page is near you".

A notice only helps while its page still waits. So a page waits, after its replies, until every
input record that was in the input topic when it was routed has been probed in every shard: its
**horizon**, a log-end offset per input partition. Progress travels with the records it vouches
for, in two hops:

1. a worker's **routing marks**: with every transaction that routes input records, it sends every
   shard partition, after that transaction's probes, the offsets it has routed through and the
   log-end offsets of its input partitions (:class:`RoutingView`);
2. a shard's **progress**: once a shard has processed a mark, it sends every gather shard, after the
   replies and notices of the probes before the mark, the offsets it has probed through
   (:class:`GatherView` merges them).

Kafka keeps each partition in append order, and a worker taking over a partition appends only after
its predecessor's transaction committed, so a record a shard receives after a mark is always later
than the probes the mark vouches for, and likewise for progress and notices at a gather shard.

A page's router gives it the log ends it reported in its last marks (its *seed*), and the page
takes its horizon as it arrives at its gather shard: the log ends known there, raised to the seed
and to its own offset (:func:`streams.stages.content_seen.gather.arrive`). Where it cannot (no
seed: its router's first batch after an assignment; a page before it still without a horizon; a
partition no shard has reported on yet), the horizon is taken in two steps, because the page
reaches its gather shard before the log ends its router reports with it (those travel two hops):
first the page waits until every shard has probed through its own offset (its replies are then
in), and only then is its horizon read from the log ends known (:meth:`GatherView.horizon`): by
then they include the ones reported in the page's own routing transaction, the log ends of every
partition its worker owned when it routed the page. A page whose horizon is *covered* (every
shard has probed through it) has received every reply and every notice of the pages within its
horizon, and its verdict is the one offline mode gives on the same pages sorted by order key. Log
ends are known as the last reports said, a batch or two old for other workers' partitions (one
for the seed's): in a backlog (written before the workers start, whose log ends are read when a
worker is assigned) that is exact; pages written while the stage runs may race past it within
that time.

Why this cannot wait forever: a horizon is a set of offsets that existed when it was taken; routing
only moves forward and never waits on a verdict (pages waiting here are not counted against the
worker's intake, :class:`streams.stages.content_seen.waiting.PageCache`), so every horizon is covered once the
input it names has been routed and probed. There is no wait between pages, so nothing can cycle.

Horizons are taken in queue order at one gather shard, each as soon as it can be (on arrival, or
once its page's own probes are answered; not when the page reaches the front: by then the input
had moved on, and each page waited a hop or two for a newer horizon than the last), each from the
log ends known then (a seed is known from its arrival on), so they only grow along the queue and
the pages whose horizons are covered are always the first ones to arrive: the waiting pages are a
queue, and only its front is ever compared with the progress.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import orjson

InputId = tuple[int, int]  # (index of the input topic among the stage's route topics, partition)
Offsets = dict[InputId, int]
_ENTRY: Final = struct.Struct(">BHQ")  # topic index, partition, offset


def _pairs(offsets: Mapping[InputId, int]) -> list[list[int]]:
    return [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())]


def _offsets(pairs: Iterable[list[int]]) -> Offsets:
    return {(topic, partition): offset for topic, partition, offset in pairs}


def _raise(target: Offsets, source: Mapping[InputId, int]) -> bool:
    """``target`` raised to ``source`` wherever that is higher; whether anything changed."""
    changed = False
    for place, offset in source.items():
        if offset > target.get(place, -1):
            target[place] = offset
            changed = True
    return changed


@dataclass
class RoutingView:
    """How far the input has been routed, as marks told one shard (and it tells the gathers).

    ``routed``: every input record before this offset was routed, and its probes sent; ``ends``:
    the partition's log-end offset when last reported; ``partitions``: each input topic's partition
    count (a gather shard decides nothing until it has heard of every partition).
    """

    partitions: dict[int, int] = field(default_factory=dict)
    routed: Offsets = field(default_factory=dict)
    ends: Offsets = field(default_factory=dict)

    def merge(self, other: RoutingView) -> bool:
        """Take what ``other`` knows beyond this (offsets never go back); whether anything changed."""
        changed = _raise(self.routed, other.routed)
        changed = _raise(self.ends, other.ends) or changed
        for topic, count in other.partitions.items():
            if count > self.partitions.get(topic, 0):
                self.partitions[topic] = count
                changed = True
        return changed

    def encode(self) -> bytes:
        return orjson.dumps({"partitions": [[t, n] for t, n in sorted(self.partitions.items())],
                             "routed": _pairs(self.routed), "ends": _pairs(self.ends)})

    @classmethod
    def decode(cls, raw: bytes | None) -> RoutingView:
        if not raw:
            return cls()
        loaded = orjson.loads(raw)
        return cls({t: n for t, n in loaded["partitions"]}, _offsets(loaded["routed"]),
                   _offsets(loaded["ends"]))


@dataclass
class GatherView:
    """What one gather shard knows of the input: each shard's progress, and the log ends."""

    partitions: dict[int, int] = field(default_factory=dict)
    shards: dict[int, Offsets] = field(default_factory=dict)
    ends: Offsets = field(default_factory=dict)

    def merge(self, shard: int, view: RoutingView) -> None:
        """Shard ``shard`` has probed through ``view.routed``."""
        _raise(self.shards.setdefault(shard, {}), view.routed)
        _raise(self.ends, view.ends)
        for topic, count in view.partitions.items():
            self.partitions[topic] = max(count, self.partitions.get(topic, 0))

    def learn_ends(self, ends: Mapping[InputId, int]) -> bool:
        """Log ends told otherwise than by progress (a page's router's); whether any was new."""
        return _raise(self.ends, ends)

    def inputs(self) -> list[InputId]:
        return [(topic, partition) for topic, count in sorted(self.partitions.items())
                for partition in range(count)]

    def coverage(self, shard_count: int) -> Offsets | None:
        """The offsets every one of ``shard_count`` shards has probed through, per input partition;
        None until every shard has reported on every partition."""
        inputs = self.inputs()
        if not inputs:
            return None
        covered: Offsets = {}
        for shard in range(shard_count):
            progress = self.shards.get(shard)
            if progress is None:
                return None
            for place in inputs:
                offset = progress.get(place)
                if offset is None:
                    return None
                covered[place] = min(offset, covered.get(place, offset))
        return covered

    def horizon(self, own: Offsets, *floors: Mapping[InputId, int]) -> Offsets:
        """The horizon of a page whose own probes are all answered (``own``: its input partition and
        offset + 1, covered): the log end of every partition as known now, and at least ``own`` and
        each of ``floors`` (its router's log ends, when it is taken on arrival).

        Known now includes the log ends that the page's own routing transaction reported: that
        transaction's marks precede, in every shard, every mark vouching for the page's probes.
        """
        horizon = {place: self.ends.get(place, 0) for place in self.inputs()}
        for floor in (own, *floors):
            _raise(horizon, floor)
        return horizon

    def encode(self) -> bytes:
        return orjson.dumps({
            "partitions": [[t, n] for t, n in sorted(self.partitions.items())],
            "shards": [[shard, _pairs(offsets)] for shard, offsets in sorted(self.shards.items())],
            "ends": _pairs(self.ends)})

    @classmethod
    def decode(cls, raw: bytes | None) -> GatherView:
        if not raw:
            return cls()
        loaded = orjson.loads(raw)
        return cls({t: n for t, n in loaded["partitions"]},
                   {shard: _offsets(pairs) for shard, pairs in loaded["shards"]},
                   _offsets(loaded["ends"]))


def covered(horizon: Mapping[InputId, int], coverage: Mapping[InputId, int]) -> bool:
    """Whether every partition of ``horizon`` has been probed through its offset."""
    return all(coverage.get(place, -1) >= offset for place, offset in horizon.items())


def encode_horizon(horizon: Mapping[InputId, int]) -> bytes:
    """11 bytes per input partition: topic index, partition, offset."""
    return b"".join(_ENTRY.pack(topic, partition, offset)
                    for (topic, partition), offset in sorted(horizon.items()))


def decode_horizon(raw: bytes) -> Offsets:
    return {(topic, partition): offset for topic, partition, offset in _ENTRY.iter_unpack(raw)}
