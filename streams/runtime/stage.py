"""What a stage gives the runtime: a router for input topics and a processor for its shards.

A stage is two pure steps (after the Kafka Streams repartition idea):

1. ``route`` runs on records of the input topics (whatever their partitioning): decode, validate,
   compute the state key, and emit the record to the stage's shard topic keyed by that key. A bad
   record raises :class:`~streams.errors.RecordRejected` and becomes a dead letter.
2. ``process`` runs on records of the shard topic, whose partition *i* owns state store *i*; it
   reads and writes :class:`BatchState` and returns what to emit.

The runtime wraps both in one Kafka transaction per batch, so the emitted records, the state
changes (as changelog records) and the consumed offsets are committed together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.store import PartitionStore, RocksStore


class Message(Protocol):
    """The part of ``confluent_kafka.Message`` the stages use (stubbed in unit tests)."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since the epoch) as librdkafka reports it."""
        ...


class Stage(Protocol):
    """A stateful stage as the runtime drives it."""

    name: str

    @property
    def route_topics(self) -> Sequence[str]:
        """Input topics: their records are routed to the shard topic."""
        ...

    @property
    def state_topic(self) -> str:
        """The shard topic: its partition i owns state shard i."""
        ...

    def open_shard(self, partition: int, store: PartitionStore) -> None:
        """Called once a shard's store is recovered, before its first record; may refuse it."""
        ...

    def route(self, message: Message) -> list[Emit]:
        """Validate an input record and send it to its shard. May raise RecordRejected."""
        ...

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        """Decide on a record of shard ``message.partition()``. May raise RecordRejected."""
        ...


@runtime_checkable
class Preparing(Protocol):
    """A stage that sees a batch's input records before routing them: to do the CPU-heavy part of
    ``route`` for all of them at once (in parallel), and to take no more of them than it has room
    for (a stage that keeps what it routed in memory until its shard records come back).

    Input records a stage does not take are not lost: the engine rewinds their partitions to the
    first of them and pauses those partitions until :meth:`ready_for_input`, the pattern of Kafka
    Streams' ``buffered.records.per.partition``, with the stage's own measure of what is in flight.
    """

    def prepare(self, messages: Sequence[Message]) -> int:
        """Called with a batch's input-topic records before ``route`` sees them one by one; returns
        how many of them, the first ones, to route in this batch."""
        ...

    def ready_for_input(self) -> bool:
        """Whether the stage has room for input again (the engine then resumes paused inputs)."""
        ...


@runtime_checkable
class ShardAware(Protocol):
    """A stage whose router looks at the shards its worker owns (the URL stage decides a URL of an
    owned shard at routing; the page stage keeps a page in memory when it owns the page's gather
    shard). The engine tells it what it owns."""

    def attach_shards(self, owned: OwnedShards, shards: int) -> None:
        """Called once, before any record: the shards this worker owns, live, each as the open
        transaction sees it (the same state its shard records are decided against), and the
        shard count."""
        ...

    def revoked(self, shards: Sequence[int]) -> None:
        """This worker no longer owns ``shards`` (called before their stores close)."""
        ...


@runtime_checkable
class TracksRouting(Protocol):
    """A stage whose router remembers what it routed (the URL stage: a repeat of a URL it routed
    needs no trip through the shard topic). The engine tells it when its routing became final."""

    def routed(self, emits: Sequence[Emit]) -> None:
        """What ``route`` returned for one record is in the open transaction (its sizes checked:
        an output refused as too large became a dead letter instead and is not reported)."""
        ...

    def committed(self) -> None:
        """The transaction holding everything routed since the last call committed."""
        ...

    def aborted(self) -> None:
        """That transaction was aborted: forget what was routed in it."""
        ...


@runtime_checkable
class PointReadState(Protocol):
    """A stage that reads its state key by key, never by range, over a store larger than the CPU
    caches (the page stage: 10 random buckets of its block tables per page). Its shards are kept in
    RocksDB's PlainTable format, hashed on each key's first ``state_key_prefix_bytes``
    (:mod:`streams.runtime.rocks_tables` says why)."""

    @property
    def state_key_prefix_bytes(self) -> int: ...


def shard_store(stage: Stage, path: Path, block_cache_mb: int) -> RocksStore:
    """A shard's RocksDB store at ``path``: PlainTable for a :class:`PointReadState` stage, else
    block-based tables with a ``block_cache_mb`` block cache."""
    prefix_bytes = stage.state_key_prefix_bytes if isinstance(stage, PointReadState) else None
    return RocksStore(path, block_cache_mb, plain_table_prefix_bytes=prefix_bytes)


class InputReader(Protocol):
    """Reads an input record back by position (:class:`streams.runtime.kafka_io.RecordReader`)."""

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The value at ``offset``; None when the record is gone."""
        ...


@runtime_checkable
class RereadsInputs(Protocol):
    """A stage that may need an input record again after routing it (the page stage: a unique
    page's body, when the worker that routed it kept it no longer). The engine gives it a reader."""

    def attach_input_reader(self, reader: InputReader) -> None: ...


@dataclass(frozen=True)
class InputPositions:
    """How far a worker has routed its input partitions, by ``(topic, partition)``.

    ``routed``: the next offset to route (every record before it is routed, in a committed or the
    open transaction); ``log_ends``: each partition's log-end offset as last fetched; ``partitions``:
    each input topic's partition count.
    """

    routed: Mapping[tuple[str, int], int]
    log_ends: Mapping[tuple[str, int], int]
    partitions: Mapping[str, int]


@runtime_checkable
class ReportsProgress(Protocol):
    """A stage that tells its shards how far the input has been routed (the page stage: a page waits
    until the input that could race it has been probed, :mod:`streams.pages.horizon`).

    The engine calls :meth:`end_of_part` last in every transaction, with this worker's input
    positions when they moved since the last committed report (else None), and once more in a
    transaction of its own when they moved while no input came (a new assignment)."""

    def end_of_part(self, inputs: InputPositions | None, states: Mapping[int, BatchState]) -> list[Emit]:
        """Records to emit last in the transaction; ``states``: the shard states it wrote."""
        ...
