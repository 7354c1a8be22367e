"""Steps 3 and 4 of a batch (:mod:`streams.runtime.engine`): what a transaction produces, its commit
with the changelog and the offsets, then the state applied.

Apart from the engine so that each reads alone: the engine decides what a batch is and when it
commits; this module knows how a transaction's records reach Kafka and its writes reach RocksDB.
Compiled with the engine (``setup.py``): :meth:`Commit.produce` and the changelog loop run once per
record.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from streams.runtime.batch import BatchState, Emit
from streams.runtime.counters import Counters
from streams.runtime.kafka_io import produce_when_room
from streams.runtime.lifecycle import Lifecycle
from streams.runtime.watchdog import Watchdog


class Commit:
    """One worker's transactional producer, as the engine's batches use it."""

    def __init__(self, producer: Producer, watchdog: Watchdog, changelog: str, timeout_s: float,
                 counters: Counters, lifecycle: Lifecycle) -> None:
        self._producer = producer
        self._watchdog = watchdog
        self._changelog = changelog
        self._timeout_s = timeout_s
        self._counters = counters
        self._lifecycle = lifecycle

    def init_transactions(self, producer: Producer | None = None) -> None:
        """Fence this worker's predecessor (the same transactional id) and abort what it left open,
        with this worker's producer, or another of the same id (``producer``)."""
        timeout_s, producer = self._timeout_s * 2, producer or self._producer
        self._watchdog.transactional("init_transactions", timeout_s,
                                     lambda: producer.init_transactions(timeout_s))

    def abort(self) -> None:
        timeout_s, producer = self._timeout_s, self._producer
        self._watchdog.transactional("abort_transaction", timeout_s,
                                     lambda: producer.abort_transaction(timeout_s))

    def produce(self, emits: list[Emit]) -> None:
        """Records of the open transaction (waiting for room in the client's queue when it is full)."""
        produce = self._producer.produce
        by_topic = self._counters.emitted_by_topic
        for emit in emits:
            by_topic[emit.topic] = by_topic.get(emit.topic, 0) + 1
            try:
                if emit.partition is None:
                    produce(emit.topic, emit.value, emit.key)
                else:
                    produce(emit.topic, emit.value, emit.key, partition=emit.partition)
            except BufferError:
                produce_when_room(self._producer, self._timeout_s, emit.topic, emit.value, emit.key,
                                  emit.partition)
        self._counters.emitted += len(emits)

    def commit(self, batch: list[Message], states: dict[int, BatchState],
               consumer: Consumer) -> dict[int, int]:
        """Changelog, offsets and outputs in one transaction; returns each shard's changelog end."""
        changelog_ends: dict[int, int] = {}

        def remember(err: KafkaError | None, msg: Message) -> None:
            partition, offset = msg.partition(), msg.offset()
            if err is None and partition is not None and offset is not None:
                changelog_ends[partition] = offset

        for partition, state in states.items():
            items = list(state.writes.items())
            for index, (key, value) in enumerate(items):
                on_delivery = remember if index == len(items) - 1 else None
                try:
                    self._producer.produce(self._changelog, value, key, partition=partition,
                                           on_delivery=on_delivery)
                except BufferError:
                    produce_when_room(self._producer, self._timeout_s, self._changelog, value, key, partition,
                                      on_delivery)
        timeout_s, producer = self._timeout_s, self._producer
        committed = offsets(batch)
        if committed:  # a transaction of scheduled callbacks alone consumed nothing
            group = consumer.consumer_group_metadata()
            send = producer.send_offsets_to_transaction
            self._watchdog.transactional("send_offsets_to_transaction", timeout_s,
                                         lambda: send(committed, group, timeout_s))
        self._watchdog.transactional("commit_transaction", timeout_s,
                                     lambda: producer.commit_transaction(timeout_s))
        producer.poll(0)  # serve any delivery report commit_transaction left queued
        self._lifecycle.committed([(tp.topic, tp.partition, tp.offset) for tp in committed])
        return changelog_ends


def offsets(batch: list[Message]) -> list[TopicPartition]:
    """The offsets a batch commits: a partition's records are in offset order, so the last one seen
    gives its next offset."""
    last = {(message.topic(), message.partition()): message.offset() for message in batch}
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]  # type: ignore[arg-type,operator]


def apply(states: dict[int, BatchState], changelog_ends: dict[int, int]) -> None:
    """Step 4: the committed writes to each store, with the changelog offset they reach."""
    for partition, state in states.items():
        if state.writes:
            state.store.apply(state.writes, changelog_ends.get(partition))
