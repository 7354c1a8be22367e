"""Kafka clients: the one place that builds confluent-kafka configurations, and the small reads and
writes tools and tests make with them (creating topics: :mod:`streams.runtime.topic_admin`).

Every producer uses the ``murmur2_random`` partitioner, the Java client's (and aiokafka's)
partitioner: librdkafka's default, ``consistent_random``, hashes keys with CRC32, so a record keyed
by host would land on a different partition than a Java fetcher's record with the same key
(librdkafka's CONFIGURATION.md, ``partitioner``). Security and tuning properties from
:func:`streams.config.kafka_client_settings` are laid over every configuration.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.errors import BrokerError, ConfigError, RuntimeFailure
from streams.runtime.client_log import CLIENT_LOG
from streams.runtime.clients import CONFLUENT, KafkaClients

log = logging.getLogger(__name__)

PARTITIONER = "murmur2_random"
# What the broker counts beyond a lone record's key and value when it compares a batch with a topic's
# max.message.bytes: the batch header (61 bytes) and the record's varints, rounded up generously.
# librdkafka sends a batch uncompressed when compression would grow it, so compression adds nothing.
RECORD_OVERHEAD = 1024
CLIENT_MAX_MESSAGE_BYTES = 1_000_000   # librdkafka's default message.max.bytes
TOPIC_MAX_MESSAGE_BYTES = 1_048_588    # the broker's default max.message.bytes
LIBRDKAFKA_MAX_MESSAGE_BYTES = 1_000_000_000  # the largest message.max.bytes librdkafka accepts
READ_AHEAD_RECORDS = 100  # what RecordReader keeps of a fetch beyond the record asked for
TRANSACTION_RETRY_BACKOFF_MS = 10  # a transactional producer's first retry: see transactional_producer


@dataclass(frozen=True)
class KafkaConfig:
    """Bootstrap address plus pass-through client properties (SASL, TLS...)."""

    bootstrap_servers: str
    client: Mapping[str, str] = field(default_factory=dict)

    def _base(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, "logger": CLIENT_LOG, **self.client}

    def producer(self, **extra: Any) -> dict[str, Any]:
        # lz4 runs in librdkafka's threads, beside Python: pages (and changelogged page state) shrink
        # several times on the wire and on disk for little CPU. Pass-through settings override it.
        return {"partitioner": PARTITIONER, "linger.ms": 5, "compression.type": "lz4",
                **self._base(), **extra}

    def transactional_producer(self, transactional_id: str, timeout_s: float,
                               max_message_bytes: int | None = None) -> dict[str, Any]:
        """``max_message_bytes`` raises librdkafka's ``message.max.bytes`` (1 MB by default, past
        which ``produce`` refuses a record), unless the pass-through settings set it themselves."""
        extra: dict[str, Any] = {
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": int(timeout_s * 1000),
            # A worker writes only topics it created (or checked) at start; a deleted one must not
            # come back by auto-creation with the broker's defaults (a changelog not compacted).
            "allow.auto.create.topics": False,
        }
        if "retry.backoff.ms" not in self.client:
            # A transaction begun right after the last one committed finds the broker still
            # writing that one's markers: its first produce to a partition (AddPartitionsToTxn) is
            # refused with CONCURRENT_TRANSACTIONS and retried after retry.backoff.ms, 100 ms by
            # default, which made one commit in ten take about 100 ms more (a URL worker at 200
            # URLs/s: commit p90 97 ms, p99 122 ms; with 10 ms: 7 and 24 ms). The Java client
            # retries that error after 20 ms for the same reason (KAFKA-5477). Other retries back
            # off exponentially from here to retry.backoff.max.ms (1 s) as before.
            extra["retry.backoff.ms"] = TRANSACTION_RETRY_BACKOFF_MS
        if max_message_bytes is not None and "message.max.bytes" not in self.client:
            extra["message.max.bytes"] = min(max_message_bytes, LIBRDKAFKA_MAX_MESSAGE_BYTES)
        return self.producer(**extra)

    def client_max_message_bytes(self) -> int | None:
        """The pass-through ``message.max.bytes``, if the operator set one (it caps every record)."""
        value = self.client.get("message.max.bytes")
        try:
            return int(value) if value is not None else None
        except ValueError as error:
            raise ConfigError(f"message.max.bytes must be an integer, not {value!r}") from error

    def consumer(self, group_id: str, **extra: Any) -> dict[str, Any]:
        """Pass-through settings may tune a consumer but not loosen exactly-once: the group, manual
        commits and ``read_committed`` are laid over them."""
        return {
            "auto.offset.reset": "earliest",
            **self._base(),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            **extra,
        }

    def admin(self) -> dict[str, Any]:
        return self._base()


def produce_when_room(producer: Producer, timeout_s: float, topic: str, value: bytes | None,
                      key: bytes | None, partition: int | None = None,
                      on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
    """Produce one record once the client's local queue has room for it (after ``produce`` raised
    ``BufferError``), serving deliveries meanwhile.

    A transaction may produce more records than the queue holds (``queue.buffering.max.messages``,
    100,000 by default: a URL batch of 80,000 new URLs produces as many outputs and as many
    changelog records); records produced so far stay in the transaction, so waiting loses nothing.
    Raises :class:`~streams.errors.BrokerError` when no room appears within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        producer.poll(0.05)
        try:
            if partition is None:
                producer.produce(topic, value, key, on_delivery=on_delivery)
            else:
                producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise BrokerError(f"the producer's queue stayed full for {timeout_s} s") from None


def produce_all(kafka: KafkaConfig, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> int:
    """Produce every ``(key, value)`` and wait for delivery (demo, benchmarks, tests)."""
    producer = Producer(kafka.producer(**{"linger.ms": 50, "batch.size": 1_000_000,
                                          "queue.buffering.max.messages": 1_000_000}))
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        count += 1
        if count % 50_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"records to {topic} left unflushed"))
    return count


def read_to_end(kafka: KafkaConfig, topic: str, idle_s: float = 0.0) -> Iterator[Message]:
    """Every committed record of ``topic`` (read_committed, from offset 0), until each partition
    reached its end and nothing new arrived for ``idle_s``."""
    consumer = Consumer(kafka.consumer(f"reader-{uuid.uuid4().hex[:10]}", **{"enable.partition.eof": True}))
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int | None] = set()
        last = time.monotonic()
        while len(at_end) < len(partitions) or time.monotonic() - last < idle_s:
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    at_end.discard(message.partition())
                    last = time.monotonic()
                    yield message
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise KafkaException(error)
    finally:
        consumer.close()


def partition_count(kafka: KafkaConfig, topic: str, timeout_s: float = 30.0) -> int | None:
    """How many partitions ``topic`` has; None when it does not exist (asked of the cluster's
    metadata as a whole: asking for one topic by name could create it where auto-creation is on)."""
    found = AdminClient(kafka.admin()).list_topics(timeout=timeout_s).topics.get(topic)
    return None if found is None else len(found.partitions)


def read_from(kafka: KafkaConfig, positions: list[TopicPartition],
              timeout_s: float = 600.0) -> Iterator[Message]:
    """Every committed record from ``positions`` (-2: the beginning) to each partition's end."""
    if not positions:
        return
    consumer = Consumer(kafka.consumer(f"reader-{uuid.uuid4().hex[:10]}", **{
        "enable.partition.eof": True, "fetch.max.bytes": 64 * 1024 * 1024}))
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign(positions)
        open_partitions = {tp.partition for tp in positions}
        while open_partitions:
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"could not read {positions[0].topic} to its end in {timeout_s:.0f} s")
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    yield message
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                elif error.fatal():
                    raise RuntimeFailure(f"reading {message.topic()}: {error}")
    finally:
        consumer.close()


def pending_records(kafka: KafkaConfig, group: str, topic: str, partitions: int,
                    at_most: int | None = None) -> int:
    """How many committed records of ``topic`` lie past ``group``'s committed offsets (read, not
    computed: past a transactional partition's last record come commit markers), up to ``at_most``."""
    reader = Consumer(kafka.consumer(group))  # reads the group's offsets; never joins it
    try:
        committed = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        reader.close()
    count = 0
    positions = [TopicPartition(tp.topic, tp.partition, max(tp.offset, -2)) for tp in committed]
    for _ in read_from(kafka, positions):
        count += 1
        if at_most is not None and count >= at_most:
            break
    return count


class RecordReader:
    """Reads committed records back by position (read_committed), for a stage that needs an input
    record again after routing it: the page stage reads a unique page's body back from the input
    topic when the worker that routed it kept it no longer (:mod:`streams.stages.content_seen.waiting`).

    A fetch brings the records after the one asked for too, and the pages read back are mostly
    neighbours read in order, partition by partition interleaved (a queue of pages decided in the
    order they arrived), so what a fetch brought beyond the record asked for is kept per partition
    (at most :data:`READ_AHEAD_RECORDS` each) for the next reads. One consumer, made on first use,
    assigned only: it joins no group and commits nothing.
    """

    def __init__(self, kafka: KafkaConfig, timeout_s: float = 30.0,
                 clients: KafkaClients = CONFLUENT) -> None:
        self._kafka = kafka
        self._clients = clients
        self._timeout_s = timeout_s
        self._consumer: Consumer | None = None
        self._ahead: dict[tuple[str, int], dict[int, bytes]] = {}

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The value at ``offset``; None when the record is gone (deleted by retention, or never
        there). :class:`BrokerError` when it cannot be read in time."""
        ahead = self._ahead.get((topic, partition), {})
        if offset in ahead:
            return ahead.pop(offset)
        consumer = self._consumer
        if consumer is None:
            group = f"record-reader-{uuid.uuid4().hex[:10]}"  # required by the client, never joined
            # A fetch long-polls the broker for fetch.wait.max.ms (500 ms by default) when it finds
            # nothing new, and holds the connection meanwhile: every read after the first waited
            # that long behind the previous partition's fetch.
            consumer = self._clients.consumer(self._kafka.consumer(
                group, **{"enable.partition.eof": True, "fetch.wait.max.ms": 10}))
            self._consumer = consumer
        consumer.assign([TopicPartition(topic, partition, offset)])
        fetched = self._fetch(consumer, topic, partition, offset)
        self._ahead[(topic, partition)] = {at: value for at, value in fetched.items()
                                           if offset < at <= offset + READ_AHEAD_RECORDS}
        # Past the offset without it (a gone record: the consumer started from the first one kept),
        # or at the end: None. An aborted or compacted-away record is never a committed one.
        return fetched.get(offset)

    def _fetch(self, consumer: Consumer, topic: str, partition: int, offset: int) -> dict[int, bytes]:
        """Records from ``offset`` on, until past it (or the partition's end), in short polls: a poll
        with a timeout returns early only once it has all the records it asks for."""
        fetched: dict[int, bytes] = {}
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            at_end = False
            for message in consumer.consume(READ_AHEAD_RECORDS + 1, timeout=0.05):
                error = message.error()
                if error is not None:
                    at_end = at_end or error.code() == KafkaError._PARTITION_EOF
                elif message.topic() == topic and message.partition() == partition:
                    fetched[message.offset() or 0] = message.value() or b""
            if offset in fetched or at_end or any(at > offset for at in fetched):
                return fetched
        raise BrokerError(f"{topic}[{partition}]@{offset} not read in {self._timeout_s} s")

    def close(self) -> None:
        self._ahead = {}
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
