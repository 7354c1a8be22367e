"""The runtime's batch steps with stubs instead of a broker: routing, state, dead letters, offsets.

The Kafka clients are replaced by recording stubs (librdkafka objects are never contacted), so
these tests pin the commit logic; tests/test_crash_kafka.py then proves it against the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from streams.config import RuntimeSettings
from streams.errors import RecordRejected, StateError
from streams.runtime.batch import BatchState, Emit
from streams.runtime.counters import Counters
from streams.runtime.engine import Engine
from streams.runtime.inflow import InputFlow
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.offline import LineMessage
from streams.runtime.recovery import start_offset
from streams.runtime.stage import Message
from streams.runtime.store import MemoryStore


@dataclass
class StubProducer:
    produced: list[tuple[str, bytes | None, bytes | None, int | None]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                on_delivery: Any = None) -> None:
        self.produced.append((topic, value, key, partition))


@dataclass
class StubConsumer:
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def pause(self, positions: list[Any]) -> None:
        self.calls.append(("pause", sorted((tp.topic, tp.partition) for tp in positions)))

    def seek(self, position: Any) -> None:
        self.calls.append(("seek", (position.topic, position.partition, position.offset)))

    def resume(self, positions: list[Any]) -> None:
        self.calls.append(("resume", sorted((tp.topic, tp.partition) for tp in positions)))

    def consume(self, limit: int, timeout: float) -> list[Any]:
        return []


class EchoStage:
    """Routes ``{"k": ...}`` records by key; emits each key's first sighting."""

    name = "echo"
    route_topics = ["in"]
    state_topic = "shards"

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


@pytest.fixture
def engine() -> Engine:
    stores = {0: MemoryStore(), 1: MemoryStore()}
    made = Engine(EchoStage(), KafkaConfig("127.0.0.1:1"), RuntimeSettings(worker_id="w"), "g", "changelog",
                  "dlq", store_factory=stores.__getitem__)
    made._stores.update(stores)  # as if both shards were assigned
    made._producer = StubProducer()  # type: ignore[assignment]
    return made


def _produced(engine: Engine) -> list[tuple[str, bytes | None, bytes | None, int | None]]:
    return engine._producer.produced  # type: ignore[attr-defined, no-any-return]


def test_route_sends_records_to_the_shard_topic_keyed_by_state_key(engine: Engine) -> None:
    engine._process([LineMessage("in", 10, b'{"k": "a"}', None, 3)])  # type: ignore[list-item]
    assert _produced(engine) == [("shards", b'{"k": "a"}', b"a", None)]


def test_process_emits_first_sighting_and_keeps_writes_in_the_batch(engine: Engine) -> None:
    batch = [LineMessage("shards", i, b"v", b"a", 0) for i in range(3)]
    batch.append(LineMessage("shards", 0, b"v", b"b", 1))
    states = engine._process(batch)  # type: ignore[arg-type]
    assert [p[2] for p in _produced(engine)] == [b"a", b"b"]
    assert states[0].writes == {b"a": b"1"} and states[1].writes == {b"b": b"1"}
    assert engine._stores[0].get(b"a") is None  # applied only after the commit


@pytest.mark.parametrize(("value", "reason"), [(b"{nope", "processing_error"), (b'{"x": 1}', "schema"),
                                              (b'{"k": "boom"}', "processing_error")])
def test_bad_records_become_dead_letters(engine: Engine, value: bytes, reason: str) -> None:
    engine._process([LineMessage("in", 7, value, b"orig", 2)])  # type: ignore[list-item]
    [(topic, letter, key, _)] = _produced(engine)
    assert (topic, key) == ("dlq", b"orig")
    record = orjson.loads(letter or b"")
    assert (record["reason"], record["source_partition"], record["source_offset"]) == (reason, 2, 7)
    assert engine.counters.dead_letters == 1


@dataclass
class SmallQueueProducer(StubProducer):
    """A producer whose local queue holds ``capacity`` records until ``poll`` delivers them, as
    librdkafka's ``queue.buffering.max.messages`` does."""

    capacity: int = 3
    queued: int = 0
    polls: int = 0

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                on_delivery: Any = None) -> None:
        if self.queued >= self.capacity:
            raise BufferError("Local: Queue full")
        self.queued += 1
        super().produce(topic, value, key, partition, on_delivery)

    def poll(self, timeout: float) -> int:
        self.polls += 1
        delivered, self.queued = self.queued, 0
        return delivered


def test_a_batch_larger_than_the_producer_queue_waits_for_room(engine: Engine) -> None:
    """A full local queue (BufferError) is waited out inside the transaction, never a crash."""
    engine._producer = SmallQueueProducer()  # type: ignore[assignment]
    engine._process([LineMessage("shards", i, b"v", f"k{i}".encode(), i % 2)  # type: ignore[list-item]
                     for i in range(10)])
    assert [p[2] for p in _produced(engine)] == [f"k{i}".encode() for i in range(10)]
    assert engine._producer.polls >= 3  # type: ignore[attr-defined]


def test_offsets_are_one_past_the_last_record_of_each_partition() -> None:
    batch = [LineMessage("in", 5, b"", None, 0), LineMessage("in", 9, b"", None, 0),
             LineMessage("shards", 2, b"", None, 1)]
    offsets = Engine._offsets(batch)  # type: ignore[arg-type]
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in offsets) == [("in", 0, 10), ("shards", 1, 3)]


@pytest.mark.parametrize(
    ("stored", "low", "high", "expected"),
    [(None, 0, 0, None), (None, 0, 10, 0), (None, 4, 10, 4), (8, 0, 10, 9), (9, 0, 10, None), (2, 5, 10, 5)],
)
def test_recovery_starts_after_the_stored_offset(stored: int | None, low: int, high: int,
                                                 expected: int | None) -> None:
    store = MemoryStore()
    if stored is not None:
        store.apply({}, stored)
    assert start_offset(store, low, high, "t[0]") == expected


def test_a_store_ahead_of_its_changelog_is_refused() -> None:
    store = MemoryStore()
    store.apply({}, 50)
    with pytest.raises(StateError, match="recreated"):
        start_offset(store, 0, 10, "t[0]")


class PreparingStage(EchoStage):
    """EchoStage that records what it was handed to prepare and in what order records came."""

    def __init__(self) -> None:
        self.prepared: list[int] = []
        self.seen: list[tuple[str, int]] = []

    def prepare(self, messages: list[Message]) -> int:
        self.prepared = [message.offset() or 0 for message in messages]
        return len(messages)

    def ready_for_input(self) -> bool:
        return True

    def route(self, message: Message) -> list[Emit]:
        self.seen.append((message.topic() or "", message.offset() or 0))
        return super().route(message)

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        self.seen.append((message.topic() or "", message.offset() or 0))
        return super().process(message, state)


def test_a_preparing_stage_routes_its_inputs_a_batch_after_preparing_them(engine: Engine) -> None:
    """Shard records first (decided while the inputs are prepared elsewhere), each topic in order;
    a batch's input records are routed in the next batch, and its offsets count only what it routed."""
    stage = PreparingStage()
    engine.stage = stage  # type: ignore[assignment]
    engine._inflow = InputFlow(stage, StubConsumer(), "shards", engine.counters)  # type: ignore[arg-type]
    first = [LineMessage("in", 1, b'{"k": "a"}', None, 0), LineMessage("shards", 7, b"v", b"b", 0),
             LineMessage("in", 2, b'{"k": "c"}', None, 0), LineMessage("shards", 8, b"v", b"d", 0)]
    second = [LineMessage("shards", 9, b"v", b"e", 0)]
    processed = [engine._prepare(batch) for batch in (first, second)]  # type: ignore[arg-type]
    assert stage.prepared == []  # the second batch brought no input
    assert [[(m.topic(), m.offset()) for m in each] for each in processed] == [
        [("shards", 7), ("shards", 8)], [("shards", 9), ("in", 1), ("in", 2)]]
    assert [{(tp.topic, tp.partition, tp.offset) for tp in engine._offsets(each)}  # type: ignore[arg-type]
            for each in processed] == [{("shards", 0, 9)}, {("shards", 0, 10), ("in", 0, 3)}]


class RoomyStage(PreparingStage):
    """Takes at most ``room`` input records a batch; ready for more once told."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room, self.ready = room, False

    def prepare(self, messages: list[Message]) -> int:
        super().prepare(messages)
        return min(self.room, len(messages))

    def ready_for_input(self) -> bool:
        return self.ready


def test_inputs_a_stage_has_no_room_for_are_consumed_again_once_it_has() -> None:
    """Deferred: each partition rewound to its first deferred record and paused until the stage is
    ready; the records taken are held for the next batch."""
    stage, consumer, counters = RoomyStage(room=1), StubConsumer(), Counters()
    flow = InputFlow(stage, consumer, "shards", counters)  # type: ignore[arg-type]
    batch = [LineMessage("in", 1, b'{"k": "a"}', None, 0), LineMessage("in", 5, b'{"k": "b"}', None, 1),
             LineMessage("in", 2, b'{"k": "c"}', None, 0), LineMessage("shards", 7, b"v", b"d", 0)]
    assert flow.arrange(batch) == [batch[3]] and flow.holding  # type: ignore[arg-type]
    assert counters.deferred_records == 2
    assert consumer.calls == [("pause", [("in", 0), ("in", 1)]),
                              ("seek", ("in", 1, 5)), ("seek", ("in", 0, 2))]
    flow.resume_if_ready()
    assert consumer.calls[-1][0] == "seek"  # not ready: still paused
    stage.ready = True
    flow.resume_if_ready()
    assert consumer.calls[-1] == ("resume", [("in", 0), ("in", 1)])
    assert flow.arrange([]) == [batch[0]] and not flow.holding


def test_an_abort_rewinds_the_held_inputs_and_a_revoke_forgets_them() -> None:
    consumer = StubConsumer()
    flow = InputFlow(RoomyStage(room=9), consumer, "shards", Counters())  # type: ignore[arg-type]
    held = [LineMessage("in", 4, b"{}", None, 0), LineMessage("in", 6, b"{}", None, 1)]
    flow.arrange(held)  # type: ignore[arg-type]
    flow.revoked({("in", 1)})
    flow.rewind([LineMessage("in", 2, b"{}", None, 0), LineMessage("shards", 3, b"v", b"k", 0)])  # type: ignore[list-item]
    assert consumer.calls == [("seek", ("in", 0, 2)), ("seek", ("shards", 0, 3))] and not flow.holding


class ReportingStage(EchoStage):
    """Echo, and a record to its shard topic last in every transaction, saying what it was told."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, list[int]]] = []

    def end_of_part(self, inputs: Any, states: dict[int, BatchState]) -> list[Emit]:
        self.told.append((inputs, sorted(states)))
        return [Emit(self.state_topic, b"mark", b"m", 0)]


@dataclass
class TransactionalStub(StubProducer):
    log: list[str] = field(default_factory=list)

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                on_delivery: Any = None) -> None:
        super().produce(topic, value, key, partition, on_delivery)
        self.log.append(f"produce {topic}")

    def begin_transaction(self) -> None:
        self.log.append("begin")

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.log.append("offsets")

    def commit_transaction(self, *args: Any) -> None:
        self.log.append("commit")

    def poll(self, *args: Any) -> int:
        return 0


@dataclass
class StubTracker:
    """Input positions that move once per batch routed, and what was taken as reported."""

    pending: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)

    def after(self, part: list[Any]) -> str | None:
        return self.pending.pop(0) if self.pending else None

    def committed(self, positions: str) -> None:
        self.reported.append(positions)


def _reporting_engine() -> tuple[Engine, ReportingStage, TransactionalStub, StubTracker]:
    stage = ReportingStage()
    stores = {0: MemoryStore()}
    made = Engine(stage, KafkaConfig("127.0.0.1:1"), RuntimeSettings(worker_id="w"), "g", "changelog",
                  "dlq", store_factory=stores.__getitem__)
    made._stores.update(stores)
    producer, tracker = TransactionalStub(), StubTracker()
    made._producer = producer  # type: ignore[assignment]
    made._inputs = tracker  # type: ignore[assignment]
    made._consumer = StubConsumer()  # type: ignore[assignment]
    made._consumer.consumer_group_metadata = lambda: None  # type: ignore[attr-defined]
    return made, stage, producer, tracker


def test_a_reporting_stage_speaks_last_in_each_transaction_and_its_report_counts_once_committed() -> None:
    engine, stage, producer, tracker = _reporting_engine()
    tracker.pending = ["routed through 1"]
    engine._run_batch([LineMessage("in", 0, b'{"k": "a"}'), LineMessage("shards", 0, b'{"k": "b"}', b"b")])
    assert stage.told == [("routed through 1", [0])]
    assert producer.log == ["begin", "produce shards", "produce out", "produce shards", "produce changelog",
                            "offsets", "commit"]
    assert producer.produced[-2] == ("shards", b"mark", b"m", 0)  # then the changelog
    assert tracker.reported == ["routed through 1"]


def test_positions_that_moved_with_no_input_are_reported_in_a_transaction_of_their_own() -> None:
    engine, stage, producer, tracker = _reporting_engine()
    tracker.pending = ["assigned"]
    assert engine._report_moved_positions()
    assert producer.log == ["begin", "produce shards", "commit"] and tracker.reported == ["assigned"]
    assert not engine._report_moved_positions()  # nothing moved since
