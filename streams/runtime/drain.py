"""Drain mode (``--drain``): route the input up to a cut, decide everything routed, then exit.

A reshard (:mod:`streams.runtime.reshard`) moves a stage's *state*; records in flight between its
two steps (routed to the shard topic, not yet decided) and the page stage's pages waiting for their
horizon depend on the old shard count and cannot move. So before a reshard the workers drain: each
input partition is routed up to its log end as found when it was assigned (its *cut*), no further;
the shard records go on being decided; and with nothing left to do for ``idle_exit_s`` the worker
exits. The page stage's pages wait until every input record that was in the input when they were
routed has been probed (:mod:`streams.stages.content_seen.horizon`); a draining worker reports the
cut as its partitions' log ends, so every horizon lies within the cut and every waiting page is
decided before the worker goes idle. Input that arrives meanwhile stays in the input topics for the
next generation's workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import Consumer, Message, TopicPartition

Partition = tuple[str, int]

DRAIN_IDLE_EXIT_S = 10.0  # a draining worker exits after this long with nothing to decide
DRAIN_SESSION_TIMEOUT_MS = 6_000  # the broker's smallest by default: the group empties soon after


class Cut:
    """Each assigned input partition's cut: its log end when this worker was assigned it."""

    draining = True

    def __init__(self, consumer: Consumer, inputs: Iterable[str], timeout_s: float) -> None:
        self._consumer = consumer
        self._inputs = frozenset(inputs)
        self._timeout_s = timeout_s
        self._ends: dict[Partition, int] = {}

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            if tp.topic in self._inputs:
                _, high = self._consumer.get_watermark_offsets(tp, timeout=self._timeout_s, cached=False)
                self._ends[(tp.topic, tp.partition)] = high

    def revoked(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            self._ends.pop(partition, None)

    def end(self, partition: Partition) -> int | None:
        return self._ends.get(partition)

    def within(self, messages: list[Message]) -> list[Message]:
        """``messages`` without the input records at or past their partition's cut (never routed
        here, never committed: the next generation's workers consume them); such a partition is
        paused, as nothing more of it will be routed."""
        kept, done = [], set()
        for message in messages:
            partition = (message.topic() or "", message.partition() or 0)
            end = self._ends.get(partition)
            if end is None or (message.offset() or 0) < end:
                kept.append(message)
            else:
                done.add(partition)
        if done:
            self._consumer.pause([TopicPartition(topic, number) for topic, number in done])
        return kept


class NoCut(Cut):
    """A worker that is not draining: no cut, every record routed."""

    draining = False

    def __init__(self) -> None:
        pass

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        pass

    def revoked(self, partitions: Iterable[Partition]) -> None:
        pass

    def end(self, partition: Partition) -> int | None:
        return None

    def within(self, messages: list[Message]) -> list[Message]:
        return messages
