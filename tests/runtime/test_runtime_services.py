"""The runtime's general services on an in-memory Kafka: typed records on named internal topics,
scheduled callbacks, revocation, co-partitioned shards, a stage whose input is keyed already."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import pytest

from streams.errors import ConfigError, RecordRejected, RuntimeFailure
from streams.runtime.api import (
    BatchState,
    Emit,
    InternalTopic,
    On,
    Processors,
    StageContext,
    StoreSpec,
)
from streams.runtime.batch import OwnedShards
from streams.runtime.offline import LineMessage, OfflineDriver, run_offline
from streams.runtime.store import MemoryStore
from streams.runtime.topology import InternalStream, ShardRecord, TypedHandler, shard_handlers
from testing.memory_kafka import abortable
from testing.stages import EchoStage, bind, plain_topology, running


@dataclass(frozen=True)
class Ping:
    text: bytes

    def encode(self) -> bytes:
        return self.text

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls(raw)


@dataclass(frozen=True)
class Pong:
    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls()


GATHER = InternalTopic("gather", {0: Ping, 7: Pong})   # tags need not follow one another


def test_a_typed_record_is_framed_by_its_type_and_handed_to_its_processor() -> None:
    got: list[object] = []
    stream = InternalStream(GATHER, "t.gather", 4)
    handler = TypedHandler(GATHER, [On(Ping, lambda r, m, s: got.append(r) or []),
                                    On(Pong, lambda r, m, s: got.append(r) or [])])
    for record in (Ping(b"hello"), Pong()):
        emit = stream.send(record, b"k")
        handler(LineMessage(emit.topic, 0, emit.value or b"", emit.key), BatchState(MemoryStore()))
    assert got == [Ping(b"hello"), Pong()]
    assert stream.frame(Pong()) == b"\x07" and stream.shard_of(b"k") in range(4)


@pytest.mark.parametrize("value", [b"", b"\x01", b"\x08", b"\xff..."])
def test_a_record_of_no_declared_type_is_refused(value: bytes) -> None:
    handler = TypedHandler(GATHER, [On(Ping, lambda r, m, s: []), On(Pong, lambda r, m, s: [])])
    with pytest.raises(RecordRejected, match="no declared type"):
        handler(LineMessage("t.gather", 0, value), BatchState(MemoryStore()))


@pytest.mark.parametrize("records", [{0: Ping, 1: Ping}, {0: Ping, 256: Pong}, {-1: Ping}],
                         ids=["a-type-twice", "not-a-byte", "negative"])
def test_tags_that_are_not_one_byte_a_type_are_refused(records: dict[int, type[ShardRecord]]) -> None:
    with pytest.raises(ConfigError, match="tag"):
        InternalStream(InternalTopic("gather", records), "t.gather", 4)


@pytest.mark.parametrize("handlers", [
    {"gather": [On(Ping, lambda r, m, s: [])]},  # Pong has none
    {"gather": lambda m, s: []},  # a raw handler for a typed topic
    {"gather": [On(Ping, lambda r, m, s: []), On(Pong, lambda r, m, s: [])], "elsewhere": lambda m, s: []},
    {},  # the topic has no processor
], ids=["a-type-unprocessed", "raw-for-typed", "undeclared-topic", "no-processor"])
def test_processors_that_do_not_match_the_declaration_are_refused(handlers: dict[str, object]) -> None:
    topology = plain_topology(internal=(GATHER,))
    with pytest.raises(ConfigError):
        shard_handlers(topology, Processors(shards=handlers))  # type: ignore[arg-type]


class Listening(EchoStage):
    """The echo stage with a transaction listener that writes down what it hears."""

    def __init__(self) -> None:
        self.heard: list[str] = []
        self.gone: list[list[int]] = []

    def init(self, context: StageContext) -> Processors:
        context.listen(self)
        return super().init(context)

    def committed(self) -> None:
        self.heard.append("committed")

    def aborted(self) -> None:
        self.heard.append("aborted")

    def refused(self) -> None:
        self.heard.append("refused")

    def revoked(self, shards: Sequence[int]) -> None:
        self.gone.append(list(shards))


def test_a_listener_hears_each_commit_abort_and_refused_record_once() -> None:
    stage = Listening()
    with running(stage, shards=1, input_partitions=1) as (engine, broker, _):
        broker.append("in", 0, None, b'{"k": "a"}')
        broker.append("in", 0, None, b'{"x": "no k"}')   # a dead letter
        assert engine.step() == "batch"
        broker.append("in", 0, None, b'{"k": "b"}')
        broker.fail_at("commit", 1, abortable)
        engine.step()   # aborted
        engine.step()   # the same record again
    assert stage.heard == ["refused", "committed", "aborted", "committed"]


def test_a_stage_is_told_which_shards_went_elsewhere() -> None:
    stage = Listening()
    with running(stage, shards=2, input_partitions=1) as (engine, broker, _):
        engine.step()
        broker.rebalance()
        engine.step()
    assert stage.gone[:1] == [[0, 1]]


class TwoTopics:
    def store(self) -> StoreSpec:
        return StoreSpec()

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        return Processors(shards={"scatter": lambda m, s: [], "gather": lambda m, s: []})


def test_an_assignment_that_splits_a_shard_between_workers_is_refused() -> None:
    """Partition i of every internal topic belongs to shard i: one worker must own all of them."""
    topology = plain_topology(internal=(InternalTopic("scatter"), InternalTopic("gather")))
    with pytest.raises(RuntimeFailure, match="splits shards"), \
            running(TwoTopics(), topology, shards=2) as (engine, broker, _):
        broker.fixed_shares["w"] = [("scatter", 0), ("gather", 1)]
        broker.rebalance()
        engine.step()


def test_offline_the_same_services_run_one_line_at_a_time() -> None:
    """A scheduled callback offline sees each line's position, once, and what it sends is processed."""
    seen: list[object] = []

    class Reporting(EchoStage):
        def init(self, context: StageContext) -> Processors:
            context.each_transaction(lambda positions: seen.append(positions) or [])
            return Processors(route=lambda message: [Emit("shards", b"v", message.value())],
                              shards={"shards": lambda m, s: [Emit("out", m.key(), m.key())]})

    driver = OfflineDriver(plain_topology(), Reporting(), MemoryStore())
    assert [emit.value for emit in driver.decide(driver.message(7, b"x"))] == [b"x"]
    [positions] = seen
    assert positions.routed == {("in", 0): 8} and positions.partitions == {"in": 1}  # type: ignore[attr-defined]


def test_a_stage_that_asks_for_nothing_gets_services_that_do_nothing() -> None:
    context, _ = bind(EchoStage(), plain_topology(), 1, OwnedShards({}))
    services = context.services
    assert services.prepare([]) == 0 and services.ready_for_input() and services.listeners == []
    assert services.punctuators.run(None) == []


@pytest.mark.parametrize(("lines", "raises"), [([b'{"k": "a"}', b'{"no": "k"}'], None),
                                                ([b'{"k": "a"}', b'{"k": "boom"}'], ValueError)],
                         ids=["to-the-end", "a-bug-in-the-stage"])
def test_offline_the_stage_is_closed_once_however_the_input_ends(lines: list[bytes],
                                                                 raises: type[Exception] | None) -> None:
    stage, out = EchoStage(), io.BytesIO()
    if raises is None:
        assert run_offline(plain_topology(), stage, MemoryStore(), lines, out) == 1
    else:
        with pytest.raises(raises):
            run_offline(plain_topology(), stage, MemoryStore(), lines, out)
    assert stage.closes == 1
