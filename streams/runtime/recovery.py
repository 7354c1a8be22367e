"""Bring shard stores up to date from their changelog partitions.

Each store records the offset of the last changelog record it reflects (written in the same
WriteBatch as the data). Recovery reads each changelog partition from the next offset to its end
with ``isolation.level=read_committed`` and applies what it reads in chunks, each chunk with its
offset. "End" is librdkafka's partition EOF, which under read_committed is the last stable offset:
records of a transaction still open (a fenced predecessor's) are waited for, and aborted ones are
never applied. A restart with an intact store therefore replays at most the last committed batch,
and a store deleted by the operator is rebuilt whole. All partitions assigned together are
recovered together by one consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Final, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.errors import RuntimeFailure, StateError
from streams.runtime.clients import CONFLUENT, KafkaClients
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.store import PartitionStore

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Partition states a broker passes through after a restart or a leader election.
_TRANSIENT = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
                        KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._UNKNOWN_PARTITION})
# A group coordinator's, while it moves or loads its partition of __consumer_offsets.
_COORDINATOR = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                          KafkaError.COORDINATOR_LOAD_IN_PROGRESS})

APPLY_CHUNK = 20_000
_NO_VALUE: Final = object()
# How long the broker holds a fetch that finds nothing new. librdkafka's default, 500 ms, is what a
# recovery with nothing left to replay took before it saw the partitions' end: every assignment of a
# takeover paid it. A recovery fetches until the end and stops, so asking again sooner costs little.
END_WAIT_MS = 10
# What a recovery's consumer fetches at once: librdkafka's defaults (1 MB a partition a request, and
# a prefetch of 100,000 messages a partition) kept a plain reader of a changelog waiting on its
# fetches; with these it reads twice as fast (docs/restore.md). The prefetch stays under
# librdkafka's queued.max.messages.kbytes (64 MB a consumer).
FETCH_SETTINGS: Final = {"fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                         "queued.min.messages": 1_000_000}
# How long a store ahead of its changelog's stable end waits for the commit markers of the last
# transaction that wrote it (see _stable_ends) before the changelog is taken for recreated.
MARKERS_WAIT_S = 10.0


class RecoveryWatcher(Protocol):
    def recovering(self, positions: Mapping[int, tuple[int, int, int]]) -> None:
        """shard -> (start, reached, end) changelog offsets, once per consumed chunk."""


@dataclass
class RecoveryResult:
    records: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.records.values())


def start_offset(store: PartitionStore, low: int, high: int, where: str) -> int | None:
    """Offset to resume from, or ``None`` when the store is already at the changelog's end."""
    stored = store.changelog_offset()
    if stored is not None and stored >= high:
        raise StateError(
            f"local state of {where} is at offset {stored} but the changelog ends at {high}: "
            "the changelog was deleted and recreated, and the state it held with it: rebuild the "
            "stage's state from its input (docs/reliability.md, 'Hostile cluster events')"
        )
    start = max(low, 0 if stored is None else stored + 1)
    return None if start >= high else start


class Replay:
    """Writes read from one changelog partition, not yet applied (recovery's and a standby's)."""

    def __init__(self, store: PartitionStore, start: int, end: int) -> None:
        self.store = store
        self.start, self.end = start, end
        self.writes: dict[bytes, bytes | None] = {}
        self.last_offset: int | None = None
        self.applied = 0

    def add(self, message: Message) -> None:
        key = message.key()
        if key is not None:
            self.writes[key] = message.value()
            self.last_offset = message.offset()
        if len(self.writes) >= APPLY_CHUNK:
            self.flush()

    def take(self, keys: list[bytes | None], values: list[bytes | None], messages: Sequence[Message]) -> None:
        """A run of this partition's records, in order: their keys, values and messages."""
        writes: dict[Any, bytes | None] = self.writes  # a None key is taken out again at once
        writes.update(zip(keys, values, strict=True))
        if writes.pop(None, _NO_VALUE) is _NO_VALUE:
            self.last_offset = messages[-1].offset()
        else:  # records without a key (never a stage's) are not state: the last keyed one counts
            keyed = [index for index, key in enumerate(keys) if key is not None]
            if keyed:
                self.last_offset = messages[keyed[-1]].offset()
        if len(writes) >= APPLY_CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.writes:
            self.store.apply(self.writes, self.last_offset)
            self.applied += len(self.writes)
            self.writes = {}

    @property
    def reached(self) -> int:
        """The next offset to read (at least): the last keyed record's plus one."""
        return self.start if self.last_offset is None else self.last_offset + 1


def recover(kafka: KafkaConfig, stores: Mapping[int, PartitionStore], topic: str,
            patience_s: float = 600.0, clients: KafkaClients = CONFLUENT,
            watcher: RecoveryWatcher | None = None) -> RecoveryResult:
    """Apply every changelog record after each store's offset; return counts per partition."""
    began = time.monotonic()
    consumer = clients.consumer(kafka.consumer(
        f"{topic}.recovery",
        **{"enable.partition.eof": True, **FETCH_SETTINGS, "fetch.wait.max.ms": END_WAIT_MS}))
    try:
        pending = _assign(consumer, stores, topic)
        _replay(consumer, pending, topic, patience_s, watcher)
    finally:
        consumer.close()
    result = RecoveryResult({p: job.applied for p, job in pending.items()}, time.monotonic() - began)
    if result.total:
        log.debug("recovered %s: %d records in %.1f s", topic, result.total, result.seconds)
    return result


def _assign(consumer: Consumer, stores: Mapping[int, PartitionStore], topic: str) -> dict[int, Replay]:
    pending: dict[int, Replay] = {}
    assignment = []
    for partition, store in stores.items():
        low, high = _stable_ends(consumer, TopicPartition(topic, partition), store.changelog_offset())
        offset = start_offset(store, low, high, f"{topic}[{partition}]")
        if offset is not None:
            pending[partition] = Replay(store, offset, high)
            assignment.append(TopicPartition(topic, partition, offset))
    if assignment:
        consumer.assign(assignment)
    return pending


def _stable_ends(consumer: Consumer, partition: TopicPartition, stored: int | None) -> tuple[int, int]:
    """The partition's offsets, its end once past what the store holds, or as they are after
    ``MARKERS_WAIT_S``.

    A store holds only what committed, yet its end (the last stable offset) can be behind it for a
    moment: ``commit_transaction`` returns once the coordinator has recorded the commit, and the
    commit markers reach the partitions after that. A shard revoked and given back by a rebalance
    right after a commit (seen in a reshard's drain, the eager rebalance revokes every shard) is
    recovered in that moment; it waits for the markers instead of taking the changelog for one
    deleted and recreated (:func:`start_offset`)."""
    low, high = watermarks(consumer, partition)
    deadline = time.monotonic() + MARKERS_WAIT_S
    while stored is not None and stored >= high and time.monotonic() < deadline:
        time.sleep(0.05)
        low, high = watermarks(consumer, partition)
    return low, high


def watermarks(consumer: Consumer, partition: TopicPartition, timeout_s: float = 60.0) -> tuple[int, int]:
    """The changelog partition's offsets, retried through transient broker states.

    Right after a restart or a leader move the broker answers ``NOT_LEADER_FOR_PARTITION`` or
    ``LEADER_NOT_AVAILABLE`` for a moment; failing there killed the worker on its way up (seen in
    the SIGKILL test, 1 run in about 10).
    """
    what = f"changelog {partition.topic}[{partition.partition}]"
    low, high = _retried(lambda: consumer.get_watermark_offsets(partition, timeout=10), _TRANSIENT,
                         what, "has no leader", timeout_s)
    return low, high


def committed_offsets(consumer: Consumer, partitions: list[TopicPartition],
                      timeout_s: float = 60.0) -> list[TopicPartition]:
    """The group's committed offsets of ``partitions``, retried through a coordinator's and a
    broker's transient states, as :func:`watermarks`.

    Asked in a rebalance callback (a taken shard's backlog, a page worker's input positions), an
    error there leaves ``consume`` and stopped the worker: seen on a loaded broker, whose
    coordinator answered ``NOT_COORDINATOR`` for a moment.
    """
    found: list[TopicPartition] = _retried(lambda: consumer.committed(partitions, timeout=10),
                                           _TRANSIENT | _COORDINATOR,
                                           f"committed offsets of {partitions[0].topic}", "not answered",
                                           timeout_s)
    return found


def _retried(call: Callable[[], _T], transient: frozenset[int], what: str, failing: str,
             timeout_s: float) -> _T:
    """``call()``, asked again every half second while it fails with a retriable error or one of
    ``transient``, for up to ``timeout_s``; any other error is raised at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as error:
            kafka_error: KafkaError = error.args[0]
            if not kafka_error.retriable() and kafka_error.code() not in transient:
                raise
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"{what} {failing} after {timeout_s:.0f} s: {kafka_error}") from error
            log.warning("%s: %s; retrying", what, kafka_error)
            time.sleep(0.5)


def _replay(consumer: Consumer, pending: dict[int, Replay], topic: str, patience_s: float,
            watcher: RecoveryWatcher | None) -> None:
    """Read every pending partition to its end. Fails only when nothing at all arrived for
    ``patience_s``: a large state replays for as long as it takes while it advances."""
    open_partitions = set(pending)
    last_news = time.monotonic()
    while open_partitions:
        if watcher is not None:
            watcher.recovering({partition: (job.start, job.end if partition not in open_partitions
                                            else job.reached, job.end) for partition, job in pending.items()})
        messages = consumer.consume(10_000, timeout=0.1)
        if messages:
            last_news = time.monotonic()
        elif time.monotonic() - last_news > patience_s:
            raise RuntimeFailure(f"recovery of {topic} read nothing for {patience_s:.0f} s before the end "
                                 f"of partitions {sorted(open_partitions)}")
        _take(messages, pending, open_partitions, topic)


def _take(messages: list[Message], pending: dict[int, Replay], open_partitions: set[int], topic: str) -> None:
    """One batch of the consumer: its records, and its errors (a partition's end) in their places."""
    if not messages:
        return
    errors = list(map(type(messages[0]).error, messages))
    if not any(errors):  # an error is an object, never false (nor compared: KafkaError's == raises)
        _take_records(messages, pending)
        return
    start = 0
    for index, error in enumerate(errors):
        if error is not None:
            _take_records(messages[start:index], pending)
            _take_error(messages[index], error, pending, open_partitions, topic)
            start = index + 1
    _take_records(messages[start:], pending)


def _take_records(messages: list[Message], pending: dict[int, Replay]) -> None:
    """Records, run by run of one partition. Their keys and values are taken by ``map`` over the
    batch, a loop in C: a Python loop doing the same a record cost a tenth of a replay's CPU."""
    if not messages:
        return
    kind = type(messages[0])
    partitions = list(map(kind.partition, messages))
    keys: list[bytes | None] = list(map(kind.key, messages))
    values: list[bytes | None] = list(map(kind.value, messages))
    start = 0
    for partition, run in groupby(partitions):
        end = start + len(list(run))
        pending[partition or 0].take(keys[start:end], values[start:end], messages[start:end])
        start = end


def _take_error(message: Message, error: KafkaError, pending: dict[int, Replay], open_partitions: set[int],
                topic: str) -> None:
    if error.code() == KafkaError._PARTITION_EOF:
        pending[message.partition() or 0].flush()
        open_partitions.discard(message.partition() or 0)
    elif error.fatal():
        raise RuntimeFailure(f"reading changelog {topic}[{message.partition()}]: {error}")
    else:  # librdkafka retries these itself (a leader move); the patience bounds the wait
        log.warning("reading changelog %s[%s]: %s", topic, message.partition(), error)
