"""What a stage gives the runtime: a router for input topics and a processor for its shards.

A stage is two pure steps (after the Kafka Streams repartition idea):

1. ``route`` runs on records of the input topics (whatever their partitioning): decode, validate,
   compute the state key, and emit the record to the stage's shard topic keyed by that key. A bad
   record raises :class:`~streams.errors.RecordRejected` and becomes a dead letter.
2. ``process`` runs on records of the shard topic, whose partition *i* owns state store *i*; it
   reads and writes :class:`BatchState` and returns what to emit.

The runtime wraps both in one Kafka transaction per batch, so the emitted records, the state
changes (as changelog records) and the consumed offsets are committed together or not at all.

Everything else a stage asks of the runtime it declares in one :class:`Needs` (returned by
``needs()``), and receives in one :class:`StageContext` (``bind``): the engine reads the
declaration once and never probes a stage for capabilities. The engine builds one context per
worker; ``--offline`` builds one over a single local store, so a stage never knows which drives it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from streams import records
from streams.errors import StreamsError
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.counters import Counters
from streams.runtime.moves import StateMove
from streams.runtime.rocks_tables import MEMTABLE_MB
from streams.runtime.routing import RoutingMemory
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


class InputReader(Protocol):
    """Reads an input record back by position (:class:`streams.runtime.kafka_io.RecordReader`)."""

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The value at ``offset``; None when the record is gone."""
        ...


@dataclass(frozen=True)
class StateIdentity:
    """What a shard's state was built with (versions, settings): ``entries``, state keys and values.

    The runtime writes them into a shard with the first record it decides there (so they are
    changelogged with it), and compares them whenever the worker opens the shard and before it
    first uses it: a shard holding other values is refused with ``refusal(partition, found)``, the
    stage's own explanation of how to upgrade, instead of mixing two kinds of state silently.
    """

    entries: Mapping[bytes, bytes]
    refusal: Callable[[int, Mapping[bytes, bytes | None]], StreamsError]


@dataclass(frozen=True)
class Needs:
    """What a stage asks of the runtime beyond routing and processing; nothing by default.

    - ``identity``: what its shards' state must have been built with (:class:`StateIdentity`).
    - ``input_reader``: it may need an input record again after routing it (the page stage: a
      unique page's body, when the worker that routed it kept it no longer).
    - ``routing_memory_keys``: its router remembers up to this many keys it routed, in a
      :class:`~streams.runtime.routing.RoutingMemory` that commits and aborts with the transactions
      (the URL stage: a repeat of a URL it routed needs no trip through the shard topic).
    - ``point_read_prefix_bytes``: it reads its state key by key, never by range, over stores larger
      than the CPU caches (the page stage): its shards are kept in RocksDB's PlainTable format,
      hashed on each key's first that many bytes (:mod:`streams.runtime.rocks_tables` says why).
    - ``prepare`` and ``ready_for_input``: it sees a batch's input records before routing them, to
      do the CPU-heavy part of ``route`` for all at once (in parallel) and to take no more than it
      has room for; ``prepare`` returns how many, the first ones, to route in the next batch. Input
      records not taken are not lost: the engine rewinds their partitions and pauses them until
      ``ready_for_input()``, the pattern of Kafka Streams' ``buffered.records.per.partition``
      (:mod:`streams.runtime.inflow`).
    - ``end_of_part``: it tells its shards how far the input has been routed (the page stage: a page
      waits until the input that could race it has been probed,
      :mod:`streams.stages.content_seen.horizon`). The engine calls it last in every transaction
      with this worker's :class:`InputPositions` when they moved since the last committed report
      (else None) and the shard states the transaction wrote, and once more in a transaction of its
      own when they moved while no input came.
    - ``revoked``: it keeps something per shard that must go when the shard goes elsewhere.
    - ``open_store(path, shards, block_cache_mb, memtable_mb)``: its shards are not plain RocksDB
      stores (the URL stage keeps a Bloom filter in front of its set, or a Bloom filter alone);
      every shard of it, offline too, is opened through this.
    - ``state_move(old_shards, shards)``: how its state moves from ``old_shards`` shards to
      ``shards`` (:mod:`streams.runtime.moves`); a stage without one cannot be resharded.
    """

    identity: StateIdentity | None = None
    input_reader: bool = False
    routing_memory_keys: int = 0
    point_read_prefix_bytes: int | None = None
    prepare: Callable[[Sequence[Message]], int] | None = None
    ready_for_input: Callable[[], bool] = field(default=lambda: True)
    end_of_part: Callable[[InputPositions | None, Mapping[int, BatchState]], list[Emit]] | None = None
    revoked: Callable[[Sequence[int]], None] | None = None
    open_store: Callable[[Path, int, int, int], PartitionStore] | None = None
    state_move: Callable[[int, int], StateMove] | None = None


class StageContext:
    """What a stage may use besides its two steps' arguments.

    - ``shards``: the shard count; 0 offline, where one store holds every key.
    - ``owned``: the shards this worker owns, each as the open transaction sees it (the state its
      shard records are decided against), live across rebalances; read it, never keep a shard's
      state beyond the record at hand.
    - ``input_reader``: reads an input record back by position (when the stage needs it).
    - ``routing``: the routing memory (when the stage asked for one).
    - :meth:`dead_letter`: a dead letter of the stage's own making.
    - ``decisions``: what the stage decided, counted by name (``new``, ``near``...): the metrics
      endpoint exports it as ``crawl_dedup_decisions_total``; ``race_matches``, the same for the
      page stage's racing copies.
    """

    __slots__ = ("_dead_letter_max_value_bytes", "_dead_letter_topic", "_stage_name", "decisions",
                 "input_reader", "owned", "race_matches", "routing", "shards")

    def __init__(self, stage_name: str, shards: int, owned: OwnedShards, dead_letter_topic: str,
                 dead_letter_max_value_bytes: int, input_reader: InputReader | None = None,
                 routing: RoutingMemory | None = None, counters: Counters | None = None) -> None:
        self.shards: Final = shards
        self.owned: Final = owned
        self.input_reader: Final = input_reader
        self.routing: Final = routing
        counted = Counters() if counters is None else counters
        self.decisions: Final[Counter[str]] = counted.decisions
        self.race_matches: Final[Counter[str]] = counted.race_matches
        self._stage_name = stage_name
        self._dead_letter_topic = dead_letter_topic
        self._dead_letter_max_value_bytes = dead_letter_max_value_bytes

    def dead_letter(self, *, reason: str, detail: str, topic: str, partition: int, offset: int,
                    key: bytes | None = None, value: bytes | None = None) -> Emit:
        """A dead letter the stage writes itself beside a decision that stands (the page stage's
        ``page_unavailable``); the runtime counts it by its reason once the record's outputs are
        accepted. A bad record is not one of these: raise RecordRejected."""
        letter = records.dead_letter(reason=reason, detail=detail, stage=self._stage_name, topic=topic,
                                     partition=partition, offset=offset, key=key, value=value,
                                     max_value_bytes=self._dead_letter_max_value_bytes)
        return Emit(self._dead_letter_topic, letter, key)


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

    def needs(self) -> Needs:
        """What the stage asks of the runtime (read once, before :meth:`bind`)."""
        ...

    def bind(self, context: StageContext) -> None:
        """Called once, before any record, with what the runtime gives the stage."""
        ...

    def route(self, message: Message) -> list[Emit]:
        """Validate an input record and send it to its shard. May raise RecordRejected."""
        ...

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        """Decide on a record of shard ``message.partition()``. May raise RecordRejected."""
        ...


def shard_store(needs: Needs, path: Path, shards: int, block_cache_mb: int,
                memtable_mb: int = MEMTABLE_MB) -> PartitionStore:
    """A shard's store at ``path`` (one of ``shards``): the stage's own (``Needs.open_store``), or a
    RocksDB store, in PlainTable format for a stage that reads its state point by point
    (``Needs.point_read_prefix_bytes``), else in block-based tables with a block cache."""
    if needs.open_store is not None:
        return needs.open_store(path, shards, block_cache_mb, memtable_mb)
    return RocksStore(path, block_cache_mb, plain_table_prefix_bytes=needs.point_read_prefix_bytes,
                      memtable_mb=memtable_mb)


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
