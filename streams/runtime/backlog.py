"""When records for a shard taken by this worker may be decided at once: once its backlog is decided.

The runtime decides a record for a shard this worker owns in the open transaction, without the
trip through the shard topic (:mod:`streams.runtime.local_path`, through :meth:`OwnedShards.settled
<streams.runtime.batch.OwnedShards.settled>`). A shard just taken (at start, from a worker that
left or was lost, in a reshard) may still have records in its shard topic that were routed to it
before: by its last owner's router, from the very input partitions this worker now reads. Deciding a
later sighting of a URL at once before the earlier one waiting in the shard topic would emit the
later spelling instead of the first (seen in the standby SIGKILL test: both sightings emitted once,
but the second's record, where offline emits the first's).

So a shard taken is *pending* until the records its shard topic held when it was taken are decided
and committed: its end then is the read_committed end (the last stable offset, which a
read_committed client's uncached watermark query answers), and the consumer's position, which
librdkafka moves past control records and aborted transactions, reaches it when those records have
been handed to the engine. A batch that starts with the position at that end holds the last of them;
the shard settles when the next batch starts, since the one before it committed (an abort rewinds
the input and undoes the promise). Meanwhile its records go through the shard topic, after the
backlog, as any other worker's would. A shard whose group offset is at its end when taken (a clean
restart, a new stage) has no backlog and settles at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams.runtime.recovery import committed_offsets, watermarks

log: Final = logging.getLogger(__name__)

LATEST: Final = -1  # ListOffsets' timestamp for a partition's end


def _nothing_between(committed: int, end: int) -> bool:
    """No backlog: the group's committed offset is at the end already, or there is none (the
    consumer starts at the earliest offset) and the partition never held a record."""
    return committed >= end or (committed < 0 and end == 0)


class Backlogs:
    """The shard-topic partitions of taken shards whose backlog is not decided yet.

    ``pending`` is the set of shard numbers :class:`~streams.runtime.batch.OwnedShards` reads (the
    same object, changed in place)."""

    def __init__(self, consumer: Consumer, shard_topics: Iterable[str], pending: set[int]) -> None:
        self._consumer = consumer
        self._topics = frozenset(shard_topics)
        self.pending = pending
        self._ends: dict[tuple[str, int], int] = {}  # (topic, shard) -> its end when taken
        self._ready: set[tuple[str, int]] = set()  # reached that end in the batch now running

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        """Shards taken: each waits for its shard topics' records up to their end now."""
        taken = [TopicPartition(tp.topic, tp.partition, LATEST)
                 for tp in partitions if tp.topic in self._topics]
        if taken:
            committed = committed_offsets(self._consumer, taken)
            starts = {(tp.topic, tp.partition): tp.offset for tp in committed}
            self._ends.update({key: end for key, end in self._ends_of(taken).items()
                               if not _nothing_between(starts.get(key, -1), end)})
        self._refresh()

    def _ends_of(self, taken: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """Each partition's read_committed end: one request for all (a ListOffsets for "latest" at
        the consumer's isolation level), the retrying query per partition where that fails."""
        try:
            found = self._consumer.offsets_for_times(taken, timeout=10)
        except KafkaException as error:
            log.warning("shard topic ends: %s; asking partition by partition", error)
            found = taken
        return {(tp.topic, tp.partition): tp.offset if tp.error is None and tp.offset >= 0
                else watermarks(self._consumer, TopicPartition(tp.topic, tp.partition))[1]
                for tp in found}

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._ends.pop((tp.topic, tp.partition), None)
            self._ready.discard((tp.topic, tp.partition))
        self._refresh()

    def batch_starting(self) -> None:
        """Called with a consumed batch, before it is processed: the shards whose backlog the last
        batch finished settle; those whose backlog ends in this batch settle at the next one."""
        if not self._ends:
            return
        for key in self._ready:
            self._ends.pop(key, None)
        self._ready = set()
        keys = list(self._ends)
        positions = self._consumer.position([TopicPartition(topic, shard) for topic, shard in keys])
        self._ready = {key for key, tp in zip(keys, positions, strict=True)
                       if tp.offset >= 0 and tp.offset >= self._ends[key]}
        self._refresh()

    def aborted(self) -> None:
        """The batch was not committed: its records come again, and so does the end of a backlog."""
        self._ready = set()

    def _refresh(self) -> None:
        self.pending.clear()
        self.pending.update(shard for _, shard in self._ends)
