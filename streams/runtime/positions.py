"""How far a worker has routed its input partitions, for a stage that reports it to its shards.

A stage with a per-transaction callback (:mod:`streams.runtime.schedule`; the page stage) learns,
last in every transaction, this worker's :class:`~streams.runtime.message.InputPositions`: the next offset
to route of each assigned input partition once the transaction commits, the partition's log-end
offset, and each input topic's partition count. Reported positions are what a transaction commits
or nothing: they are taken as reported only after the commit, so an aborted transaction's report is
made again by the next one. A stage with no such callback gets :class:`NoPositions`, which
tracks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from streams.runtime.drain import Cut
from streams.runtime.message import InputPositions
from streams.runtime.recovery import committed_offsets

Partition = tuple[str, int]


class PositionTracker(Protocol):
    def assigned(self, partitions: Sequence[TopicPartition]) -> None: ...

    def revoked(self, partitions: Iterable[Partition]) -> None: ...

    def after(self, part: Sequence[Message]) -> InputPositions | None: ...

    def committed(self, positions: InputPositions | None) -> None: ...


class NoPositions:
    """No callback wants the input positions: none are tracked, none reported."""

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        pass

    def revoked(self, partitions: Iterable[Partition]) -> None:
        pass

    def after(self, part: Sequence[Message]) -> InputPositions | None:
        return None

    def committed(self, positions: InputPositions | None) -> None:
        pass


class InputTracker:
    """The input positions of one worker (assigned partitions only)."""

    def __init__(self, consumer: Consumer, inputs: frozenset[str], timeout_s: float, cut: Cut) -> None:
        """``cut``: a draining worker's (:mod:`streams.runtime.drain`): the log ends it reports are
        its cut, never more, so that no page waits for input past it."""
        self._consumer = consumer
        self._cut = cut
        self._inputs = inputs
        self._timeout_s = timeout_s
        self._routed: dict[Partition, int] = {}  # input partition -> next offset to route
        self._ends: dict[Partition, int] = {}  # log-end offsets read at assignment
        self._partitions: dict[str, int] = {}
        self._reported: InputPositions | None = None  # last reported in a committed transaction

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Newly assigned input partitions stand at their committed offsets (at the first offset kept
        when none is committed, where the consumer starts). Their log ends are asked of the broker:
        the client knows them only after its first fetch, and a report must never understate them."""
        inputs = [tp for tp in partitions if tp.topic in self._inputs]
        if not inputs:
            return
        for tp in committed_offsets(self._consumer, inputs, self._timeout_s):
            low, high = self._consumer.get_watermark_offsets(tp, timeout=self._timeout_s, cached=False)
            cut = self._cut.end((tp.topic, tp.partition))
            self._routed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else low
            self._ends[(tp.topic, tp.partition)] = high if cut is None else cut
        for topic in {tp.topic for tp in inputs}:
            found = self._consumer.list_topics(topic, timeout=self._timeout_s).topics[topic].partitions
            self._partitions[topic] = len(found)

    def revoked(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            self._routed.pop(partition, None)
            self._ends.pop(partition, None)

    def after(self, part: Sequence[Message]) -> InputPositions | None:
        """The positions once ``part`` (records being committed) commits; None when they are the
        ones last reported."""
        routed = dict(self._routed)
        for message in part:
            topic = message.topic() or ""
            if topic in self._inputs:
                routed[(topic, message.partition() or 0)] = (message.offset() or 0) + 1
        log_ends = {}
        for (topic, partition), offset in routed.items():
            end = 0 if self._cut.draining else self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True)[1]
            log_ends[(topic, partition)] = max(end, offset, self._ends.get((topic, partition), 0))
        positions = InputPositions(routed, log_ends, dict(self._partitions))
        return None if positions == self._reported else positions

    def committed(self, positions: InputPositions | None) -> None:
        """``positions`` were reported in a transaction that committed (None: nothing was)."""
        if positions is None:
            return
        self._routed = {partition: offset for partition, offset in positions.routed.items()
                        if partition in self._routed}
        self._reported = positions
