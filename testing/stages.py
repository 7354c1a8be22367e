"""A stage run by the real engine on the in-memory Kafka (:mod:`testing.memory_kafka`), or
initialised with no Kafka at all, for unit tests of the runtime and of a stage's processors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import cast

import orjson

from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.clients import KafkaClients
from streams.runtime.context import StageContext
from streams.runtime.counters import Counters
from streams.runtime.engine import Engine
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.local_path import LocalPath
from streams.runtime.message import InputReader, Message, Unreadable
from streams.runtime.stage import Stage
from streams.runtime.store import MemoryStore
from streams.runtime.store_spec import StoreSpec
from streams.runtime.topology import InternalTopic, Processors, Topology, shard_handlers
from testing.memory_kafka import MemoryKafka


class EchoStage:
    """Routes ``{"k": ...}`` records by key; emits each key's first sighting; counts its closes."""

    state_topic = "shards"
    closes = 0

    def store(self) -> StoreSpec:
        return StoreSpec()

    def close(self) -> None:
        self.closes += 1

    def init(self, context: StageContext) -> Processors:
        self.context = context
        return Processors(route=self.route, shards={"shards": self.process})

    def route(self, message: Message) -> list[Emit]:
        record = orjson.loads(message.value() or b"null")
        if not isinstance(record, dict) or "k" not in record:
            raise RecordRejected("schema", "no k")
        if record["k"] == "boom":
            raise ValueError("a bug in the stage")
        return [Emit(self.state_topic, message.value(), record["k"].encode())]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key() or b""
        if state.get(key) is not None:
            return []
        state.set(key, b"1")
        return [Emit("out", message.value(), key)]


def plain_topology(inputs: Sequence[str] = ("in",), outputs: Sequence[str] = ("out",),
                   internal: Sequence[InternalTopic] = (InternalTopic("shards", local=False),),
                   stage: str = "echo") -> Topology:
    """A stage's topics named as it declares them, with a ``changelog``, a ``dlq`` and a group ``g``.
    Its internal topic has no local path by default: the engine's tests follow records through
    the topic (``tests/runtime/test_local_path.py`` the local path)."""
    return Topology(stage, tuple((name, name) for name in inputs), tuple((name, name) for name in outputs),
                    tuple((each, each.name) for each in internal), "changelog", "dlq", "g")


def bind(stage: Stage, topology: Topology, shards: int, owned: OwnedShards | None = None,
         reader: InputReader | None = None) -> tuple[StageContext, Processors]:
    """``stage`` initialised as a worker of ``shards`` shards owning ``owned`` (none by default)
    initialises it, with no Kafka: its context (the services it asked for) and its processors."""
    context = StageContext(topology, shards, owned if owned is not None else OwnedShards({}),
                           reader or Unreadable(), Counters(), 512 * 1024)
    return context, stage.init(context)


def local_path(topology: Topology, context: StageContext, processors: Processors) -> LocalPath:
    """The engine's local path for a stage :func:`bind` bound: its records for the owned, settled
    shards decided at once (a refusal raised, not made a dead letter)."""
    handlers = shard_handlers(topology, processors)
    return LocalPath(handlers, topology.local_topics, context.shards, context.owned, tags=topology.local_tags)


def create_topics(broker: MemoryKafka, topology: Topology, shards: int, input_partitions: int) -> None:
    """``topology``'s topics: inputs, internal topics and changelog (one partition a shard), outputs."""
    for topic in topology.input_topics:
        broker.create_topic(topic, input_partitions)
    for topic in [*topology.shard_topics, topology.changelog]:
        broker.create_topic(topic, shards)
    broker.create_topic(topology.dead_letters, 1)
    for topic in topology.output_topics:
        broker.create_topic(topic, 2)


@contextmanager
def running(stage: Stage, topology: Topology | None = None, *, shards: int = 2, input_partitions: int = 4,
            settings: RuntimeSettings | None = None, limits: Mapping[str, int] | None = None,
            ) -> Iterator[tuple[Engine, MemoryKafka, dict[int, MemoryStore]]]:
    """An engine started on a fresh in-memory Kafka with ``topology``'s topics (by default
    :func:`plain_topology`'s), each shard in a :class:`MemoryStore`; closed afterwards."""
    topology = topology or plain_topology()
    broker = MemoryKafka()
    create_topics(broker, topology, shards, input_partitions)
    stores: dict[int, MemoryStore] = {}
    engine = Engine(stage, topology, KafkaConfig("memory"),
                    settings or RuntimeSettings(worker_id="w", shards=shards),
                    store_factory=lambda p: stores.setdefault(p, MemoryStore()),
                    output_limits=limits, clients=cast(KafkaClients, broker))
    engine.start()
    try:
        yield engine, broker, stores
    finally:
        engine.close()
