"""A stage's topics as the runtime wires them, and the processors it runs on each.

A stage declares its topics by name (:class:`streams.spec.StageSpec`); the runtime names, creates,
changelogs and reshards them, as Kafka Streams names a topology's repartition and changelog
topics. :class:`Topology` is that declaration resolved for one application: the input topics,
the named outputs, the internal topics, the changelog, the dead-letter topic and the group.

Internal topics carry a stage's records between its processors (after the Kafka Streams
repartition idea): each is keyed by a state key and has one partition per state shard, and they
are co-partitioned, so one worker owns partition *i* of every one of them and shard *i*'s store.
An :class:`InternalTopic` carries raw values (the bytes a stage produced: one kind of record), or
typed records (:class:`ShardRecord`): the runtime frames each with its type's tag, the byte the
declaration gives it (kept for good, so that records of an earlier version decode; a type's place
in a list would renumber them all when one is taken out), and hands it, decoded, to the processor
registered for its type (:class:`On`), so no stage tells record kinds apart itself.

A stage's processors (:class:`Processors`, returned by ``Stage.init``) are its ``route`` step
(records of its input topics: decode, validate, send on keyed by state key) and one handler per
internal topic (raw) or record type (typed), each deciding records of one shard against that
shard's :class:`~streams.runtime.batch.BatchState`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, Self, TypeVar

from streams.errors import ConfigError, RecordRejected
from streams.runtime.batch import BatchState, Emit
from streams.runtime.message import Message
from streams.runtime.partitioner import partition_for
from streams.topics import Topics

R = TypeVar("R", bound="ShardRecord")

ShardHandler = Callable[[Message, BatchState], list[Emit]]  # a record of an internal topic, at its shard
Route = Callable[[Message], list[Emit]]  # a record of an input topic


class ShardRecord(Protocol):
    """A typed record of an internal topic: its own bytes, and back."""

    def encode(self) -> bytes: ...

    @classmethod
    def decode(cls, raw: bytes) -> Self: ...


@dataclass(frozen=True)
class InternalTopic:
    """An internal topic a stage declares: its name (``shards``, ``probes``...) and what it carries:
    raw values when ``records`` is empty, else these typed records by tag (0 to 255), or the
    ``"module:NAME"`` of such a mapping (imported when the stage runs, not when it is declared).

    ``local``: a record for a shard this worker owns is decided at once by the same processor, in
    the open transaction, instead of through the topic (:mod:`streams.runtime.local_path`). False
    sends every record through the topic; a set of tags, the typed records of those types only:
    for a stage some of whose decisions need more than each worker's records in the order it sent
    them (the page stage's arrivals, probes and vouched progress take the local path; its replies,
    notices, marks and progress records go as its tokens' vouching says,
    :mod:`streams.stages.content_seen.local`)."""

    name: str
    records: Mapping[int, type[ShardRecord]] | str = field(default_factory=dict, hash=False)
    local: bool | frozenset[int] = True

    def tagged(self) -> Mapping[int, type[ShardRecord]]:
        """Its record types by tag; refuses a tag that is not a byte, or a type tagged twice."""
        found: Mapping[int, type[ShardRecord]]
        if isinstance(self.records, str):
            module, _, name = self.records.partition(":")
            found = getattr(importlib.import_module(module), name)
        else:
            found = self.records
        if any(not 0 <= tag <= 255 for tag in found) or len(set(found.values())) != len(found):
            kinds = [kind.__name__ for kind in found.values()]
            raise ConfigError(f"internal topic {self.name}: tags {sorted(found)} of {kinds}: "
                              "a tag is a byte, one type one tag")
        if isinstance(self.local, frozenset) and not self.local <= found.keys():
            unknown = sorted(self.local - found.keys())
            raise ConfigError(f"internal topic {self.name}: local names tags {unknown} of no record type "
                              "it carries")
        return found


@dataclass(frozen=True)
class On(Generic[R]):
    """The processor of one record type of a typed internal topic: ``handle(record, message, state)``."""

    record: type[R]
    handle: Callable[[R, Message, BatchState], list[Emit]]


def _no_route(message: Message) -> list[Emit]:
    raise RecordRejected("unexpected_input", f"this stage routes no records of {message.topic()}")


@dataclass(frozen=True)
class Processors:
    """What a stage does with each record it reads (``Stage.init`` returns them).

    ``route``: a record of an input topic. ``shards``: by internal topic name (or, for a stage whose
    input is keyed already, by input name), a :data:`ShardHandler` for a raw topic, or an :class:`On`
    for each record type of a typed one.
    """

    route: Route = _no_route
    shards: Mapping[str, ShardHandler | Sequence[On[Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    """One stage's topics in one application (see the module docstring)."""

    stage: str
    inputs: tuple[tuple[str, str], ...]  # (declared name, topic)
    outputs: tuple[tuple[str, str], ...]  # (declared name, topic); the first is what --offline writes
    internal: tuple[tuple[InternalTopic, str], ...]  # (declaration, topic)
    changelog: str
    dead_letters: str
    group: str

    @classmethod
    def of(cls, stage: str, topics: Topics, app_id: str, inputs: Sequence[str], outputs: Sequence[str],
           internal: Sequence[InternalTopic] = (InternalTopic("shards"),)) -> Topology:
        """The topology of ``stage`` under ``topics`` (its generation's internal topics)."""
        return cls(stage, tuple((name, topics.named(name)) for name in inputs),
                   tuple((name, topics.named(name)) for name in outputs),
                   tuple((each, topics.internal(app_id, stage, each.name)) for each in internal),
                   topics.changelog(app_id, stage), topics.dead_letters, topics.group(app_id, stage))

    @property
    def input_topics(self) -> list[str]:
        return [topic for _, topic in self.inputs]

    @property
    def output_topics(self) -> list[str]:
        return [topic for _, topic in self.outputs]

    def output(self, name: str) -> str:
        """The topic of the output declared as ``name``."""
        for each, topic in self.outputs:
            if each == name:
                return topic
        raise ConfigError(f"stage {self.stage} declares no output {name!r}")

    @property
    def shard_topics(self) -> list[str]:
        """The topics whose partition *i* belongs to shard *i*: the internal topics."""
        return [topic for _, topic in self.internal]

    @property
    def local_topics(self) -> frozenset[str]:
        """The shard topics with a local path (:attr:`InternalTopic.local`), for some of their records
        at least."""
        return frozenset(topic for declared, topic in self.internal if declared.local)

    @property
    def local_tags(self) -> dict[str, frozenset[int]]:
        """The local topics whose path takes the typed records of some types only: their tags."""
        return {topic: declared.local for declared, topic in self.internal
                if isinstance(declared.local, frozenset) and declared.local}

    def internal_topic(self, name: str) -> tuple[InternalTopic, str]:
        """The internal topic declared as ``name``, and its topic."""
        for each, topic in self.internal:
            if each.name == name:
                return each, topic
        raise ConfigError(f"stage {self.stage} declares no internal topic {name!r}")


class InternalStream:
    """What a stage sends to one of its internal topics (``context.internal(name)``).

    ``topic`` and ``shards`` for a raw topic (the stage makes its own :class:`Emit`, keyed by state
    key); :meth:`send` (or :meth:`frame`) for a typed one, which frames the record for the
    processor of its type.
    """

    __slots__ = ("_tags", "shards", "topic")

    def __init__(self, declared: InternalTopic, topic: str, shards: int) -> None:
        self.topic: Final = topic
        self.shards: Final = shards
        self._tags: Final = {kind: bytes([tag]) for tag, kind in declared.tagged().items()}

    def send(self, record: ShardRecord, key: bytes, partition: int | None = None) -> Emit:
        """``record`` to the shard of ``key`` (or to ``partition``)."""
        return Emit(self.topic, self._tags[type(record)] + record.encode(), key, partition)

    def frame(self, record: ShardRecord) -> bytes:
        """``record`` as its value on this topic, for one record sent to several shards."""
        return self._tags[type(record)] + record.encode()

    def shard_of(self, key: bytes) -> int:
        """The shard a record keyed ``key`` goes to (Kafka's default partitioner)."""
        return partition_for(key, self.shards)


class TypedHandler:
    """The processors of a typed internal topic: each record decoded and given to its type's."""

    __slots__ = ("_table", "_topic")

    def __init__(self, declared: InternalTopic, handlers: Sequence[On[Any]]) -> None:
        tagged = declared.tagged()
        kinds = list(tagged.values())
        by_type = {each.record: each.handle for each in handlers}
        missing = [kind.__name__ for kind in kinds if kind not in by_type]
        extra = [kind.__name__ for kind in by_type if kind not in kinds]
        if missing or extra or len(by_type) != len(handlers):
            raise ConfigError(f"internal topic {declared.name}: records without a processor {missing}, "
                              f"processors of undeclared records {extra}, or one record processed twice")
        self._topic = declared.name
        self._table: list[tuple[type[ShardRecord], Callable[..., list[Emit]]] | None]
        self._table = [None] * (max(tagged, default=-1) + 1)
        for tag, kind in tagged.items():
            self._table[tag] = (kind, by_type[kind])

    def __call__(self, message: Message, state: BatchState) -> list[Emit]:
        value = message.value() or b""
        found = self._table[value[0]] if value and value[0] < len(self._table) else None
        if found is None:
            raise RecordRejected("invalid_shard_record", f"a record of {self._topic} of no declared type")
        kind, handle = found
        return handle(kind.decode(value[1:]), message, state)


def shard_handlers(topology: Topology, processors: Processors) -> dict[str, ShardHandler]:
    """Each shard topic's handler, by topic; refuses processors that do not match the declaration."""
    found: dict[str, ShardHandler] = {}
    sources = topology.internal
    unknown = sorted(set(processors.shards) - {declared.name for declared, _ in sources})
    if unknown:
        raise ConfigError(f"stage {topology.stage} has processors of undeclared topics {unknown}")
    for declared, topic in sources:
        given = processors.shards.get(declared.name)
        if given is None:
            raise ConfigError(f"stage {topology.stage} has no processor of its topic {declared.name}")
        if declared.records:
            if callable(given):
                raise ConfigError(f"{declared.name} carries typed records: give one On(...) per type")
            found[topic] = TypedHandler(declared, given)
        elif callable(given):
            found[topic] = given
        else:
            raise ConfigError(f"{declared.name} carries raw values: give one handler, not On(...)")
    return found
