"""Which new-urls offsets a crawler process has taken, has in flight and has done; what it commits.

A Kafka offset commit says "everything before this offset is done", but a crawler finishes its
requests out of order. So a partition's committed offset is its lowest offset still in flight, and
the offsets done past it go in the commit's metadata (a comma-separated list of distances from the
committed offset): a process taking the partition over skips them, and fetches again only what was
in flight, which :attr:`Offsets.count_in_flight` bounds (the scheduler takes no more while it is at
its buffer).

A new URL's request may give rise to requests fetched in this process only (``dont_filter``, not
GET, not serializable): each *holds* its source's offset (:meth:`Offsets.hold`), which is done only
once its own work and every hold on it are, so a crash fetches the source again rather than losing
them. No Scrapy here: ``tests/integrations/test_scrapy_unit.py`` drives it alone.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

METADATA_BYTES = 3800  # the broker's offset.metadata.max.bytes is 4,096 by default


def committed_at_assignment(consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets of partitions just assigned, asked in the assignment callback.

    An assignment can still arrive while the consumer closes (a rebalance under way when the spider
    finished): librdkafka then answers ``_DESTROY``, and ``close()`` raised that from the callback as a
    bare ``KafkaError``, no ``Exception``, so the spider's close failed (seen once in CI). A closing
    consumer reads nothing more: the partitions are taken as not assigned."""
    try:
        found: list[TopicPartition] = consumer.committed(partitions, timeout=30)
    except KafkaException as error:
        if error.args[0].code() != KafkaError._DESTROY:
            raise
        return []
    return found


class Offsets:
    """Which new-urls offsets are taken, in flight and done, per partition; what to commit."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}  # partition -> next offset not yet seen
        self.in_flight: dict[int, set[int]] = {}
        self.done: dict[int, set[int]] = {}  # done past the lowest one in flight
        self.uncommitted = 0  # finished since the last commits(): fetched again after a crash
        self.holds: dict[tuple[int, int], set[int]] = {}  # offset -> tokens of the requests holding it
        self._finished_held: set[tuple[int, int]] = set()  # its own work done, holds left
        self._tokens = 0

    def assigned(self, partition: int, committed: int, metadata: str | None) -> None:
        self.next[partition] = max(committed, 0)
        self.in_flight[partition] = set()
        self.done[partition] = {committed + int(delta) for delta in (metadata or "").split(",") if delta}

    def assigned_at(self, committed: list[TopicPartition]) -> None:
        """Newly assigned partitions, each at its committed offset and metadata."""
        for tp in committed:
            self.assigned(tp.partition, tp.offset, tp.metadata)

    def revoked(self, partition: int) -> None:
        for table in (self.next, self.in_flight, self.done):
            table.pop(partition, None)
        self._forget_holds(partition)

    def _forget_holds(self, partition: int) -> None:
        self.holds = {key: tokens for key, tokens in self.holds.items() if key[0] != partition}
        self._finished_held = {key for key in self._finished_held if key[0] != partition}

    def release(self, partition: int, dropped: set[int]) -> None:
        """The partition goes to another process: the offsets ``dropped`` here are for it to fetch;
        the rest in flight this process fetches still, so they count as done (the other skips them)."""
        in_flight = self.in_flight.get(partition, set())
        self.done.setdefault(partition, set()).update(in_flight - dropped)
        self.in_flight[partition] = in_flight & dropped
        self._forget_holds(partition)

    def committed(self) -> None:
        """The last :meth:`commits` are committed: what finished before them is safe."""
        self.uncommitted = 0

    def take(self, partition: int, offset: int) -> bool:
        """Whether to fetch this record: False for one done before a restart."""
        self.next[partition] = offset + 1
        if offset in self.done.get(partition, ()):
            return False
        self.in_flight.setdefault(partition, set()).add(offset)
        return True

    def skip(self, partition: int, offset: int) -> None:
        """A record not to fetch here (another crawl's, one fetched where it was found): done at once,
        and nothing a crash would fetch again."""
        if self.take(partition, offset):
            self.in_flight[partition].discard(offset)
            self.done[partition].add(offset)

    def finish(self, partition: int, offset: int) -> None:
        """The offset's own work is done; it is done once no request holds it any more."""
        if offset not in self.in_flight.get(partition, ()):
            return
        if self.holds.get((partition, offset)):
            self._finished_held.add((partition, offset))
            return
        self.in_flight[partition].discard(offset)
        self.done[partition].add(offset)
        self.uncommitted += 1

    def hold(self, partition: int, offset: int) -> int | None:
        """A request fetched here only, born of this offset's request: the offset stays in flight
        until :meth:`unhold` with the token returned (None: the offset is not in flight here)."""
        if offset not in self.in_flight.get(partition, ()):
            return None
        self._tokens += 1
        self.holds.setdefault((partition, offset), set()).add(self._tokens)
        return self._tokens

    def unhold(self, partition: int, offset: int, token: int) -> None:
        """The holding request is done (once per token: a second call changes nothing)."""
        tokens = self.holds.get((partition, offset))
        if tokens is None:
            return
        tokens.discard(token)
        if not tokens:
            del self.holds[(partition, offset)]
            if (partition, offset) in self._finished_held:
                self._finished_held.discard((partition, offset))
                self.finish(partition, offset)

    @property
    def count_in_flight(self) -> int:
        """Taken and not yet committed as done: what a crash could make this process fetch again."""
        return sum(len(offsets) for offsets in self.in_flight.values()) + self.uncommitted

    def commits(self, topic: str) -> list[TopicPartition]:
        """Each partition's lowest offset in flight (or next), the offsets done past it as metadata;
        :meth:`committed` once the broker took them."""
        out = []
        for partition, upto in self.next.items():
            low = min(self.in_flight[partition], default=upto)
            self.done[partition] = {offset for offset in self.done[partition] if offset >= low}
            deltas = [str(offset - low) for offset in sorted(self.done[partition])]
            while sum(map(len, deltas)) + len(deltas) > METADATA_BYTES:  # the broker's limit: 4,096
                deltas.pop()  # those beyond are fetched again after a restart
            out.append(TopicPartition(topic, partition, low, metadata=",".join(deltas)))
        return out
