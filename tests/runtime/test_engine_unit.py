"""The runtime's batch steps on an in-memory Kafka: routing, state, dead letters, offsets.

The engine is driven through its public steps with its clients made by ``testing/memory_kafka.py``
(librdkafka is never contacted), so these tests pin the commit logic; tests/runtime/test_engine_states.py
interleaves crashes, aborts and rebalances, and tests/kafka/test_crash_kafka.py proves the same against
the broker.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pytest

from streams.errors import StateError
from streams.runtime import inflow
from streams.runtime.api import Message, Processors, StageContext
from streams.runtime.batch import BatchState, Emit
from streams.runtime.clients import KafkaClients
from streams.runtime.counters import Counters
from streams.runtime.extras import InputPositions
from streams.runtime.inflow import InputFlow
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.offline import LineMessage
from streams.runtime.partitioner import partition_for
from streams.runtime.recovery import recover, start_offset
from streams.runtime.store import MemoryStore
from testing.memory_kafka import Crash, MemoryKafka
from testing.stages import EchoStage, running


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


def _values(broker: MemoryKafka, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(message.key(), message.value()) for message in broker.committed_records(topic)]


def test_the_engine_closes_its_stage_once_when_it_closes() -> None:
    stage = EchoStage()
    with running(stage):
        assert stage.closes == 0
    assert stage.closes == 1


def test_route_sends_records_to_the_shard_topic_keyed_by_state_key() -> None:
    with running(EchoStage()) as (engine, broker, _):
        broker.append("in", 3, None, b'{"k": "a"}')
        assert engine.step() == "batch"
        [routed] = broker.committed_records("shards")
        assert (routed.key(), routed.value()) == (b"a", b'{"k": "a"}')
        assert routed.partition() == partition_for(b"a", 2)


def test_process_emits_first_sightings_and_commits_state_changelog_and_offsets_together() -> None:
    with running(EchoStage()) as (engine, broker, stores):
        for key, partition in [(b"a", 0), (b"a", 0), (b"a", 0), (b"b", 1)]:
            broker.append("shards", partition, key, b"v")
        engine.step()
        assert [key for key, _ in _values(broker, "out")] == [b"a", b"b"]
        assert _values(broker, "changelog") == [(b"a", b"1"), (b"b", b"1")]
        assert (stores[0].get(b"a"), stores[0].changelog_offset()) == (b"1", 0)
        assert broker.groups["g"] == {("shards", 0): 3, ("shards", 1): 1}  # one past each partition's last


def test_a_crash_between_commit_and_apply_leaves_the_store_one_batch_behind_its_changelog() -> None:
    """Step 4 runs only after the commit: a worker killed between the two has output, changelog and
    offsets committed and its store untouched, which recovery then brings up to date."""
    with running(EchoStage()) as (engine, broker, stores):
        broker.append("shards", 0, b"a", b"v")
        broker.fail_at("after_commit", 1)
        with pytest.raises(Crash):
            engine.step()
        assert _values(broker, "changelog") == [(b"a", b"1")] and stores[0].get(b"a") is None
        recover(KafkaConfig("memory"), {0: stores[0]}, "changelog", clients=cast(KafkaClients, broker))
        assert (stores[0].get(b"a"), stores[0].changelog_offset()) == (b"1", 0)


@pytest.mark.parametrize(("value", "reason"), [(b"{nope", "processing_error"), (b'{"x": 1}', "schema"),
                                              (b'{"k": "boom"}', "processing_error")])
def test_bad_records_become_dead_letters(value: bytes, reason: str) -> None:
    with running(EchoStage()) as (engine, broker, _):
        broker.append("in", 2, b"other", b'{"k": "fine"}')
        broker.append("in", 2, b"orig", value)
        engine.step()
        [(key, letter)] = _values(broker, "dlq")
        record = orjson.loads(letter or b"")
        assert (key, record["reason"], record["source_partition"], record["source_offset"]) == (
            b"orig", reason, 2, 1)
        assert engine.counters.dead_letters == 1


def test_a_batch_larger_than_the_producer_queue_waits_for_room() -> None:
    """A full local queue (librdkafka's ``queue.buffering.max.messages``: BufferError) is waited out
    inside the transaction, never a crash."""
    with running(EchoStage()) as (engine, broker, _):
        for i in range(10):
            broker.append("shards", 0, f"k{i}".encode(), b"v")
        broker.fail_at("produce", 4, lambda: BufferError("Local: Queue full"))
        engine.step()
        emitted = sorted(key or b"" for key, _ in _values(broker, "out"))
        assert emitted == [f"k{i}".encode() for i in range(10)]


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


def test_a_store_ahead_of_the_stable_end_waits_for_the_commit_markers() -> None:
    """Right after a commit the partition's stable end can lag the store (the markers are written
    after ``commit_transaction`` returns): recovery waits for them, nothing to replay, no error."""
    broker = MemoryKafka()
    broker.create_topic("changelog", 1)
    producer = broker.producer({"transactional.id": "owner"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce("changelog", b"1", b"a", partition=0)
    store = MemoryStore()
    store.apply({b"a": b"1"}, 0)  # as after the commit, its markers not yet in the partition
    markers = threading.Timer(0.3, producer.commit_transaction)
    markers.start()
    result = recover(KafkaConfig("memory"), {0: store}, "changelog", clients=cast(KafkaClients, broker))
    markers.join()
    assert result.total == 0 and store.changelog_offset() == 0


class PreparingStage(EchoStage):
    """EchoStage that records what it was handed to prepare and in what order records came."""

    def __init__(self) -> None:
        self.prepared: list[int] = []
        self.seen: list[tuple[str, int]] = []

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        context.prepare_input(self.prepare, self.ready_for_input)
        return super().init(context)

    def prepare(self, messages: Sequence[Message]) -> int:
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


def test_a_preparing_stage_routes_its_inputs_a_batch_after_preparing_them(monkeypatch: pytest.MonkeyPatch,
                                                                          ) -> None:
    """Shard records first (decided while the inputs are prepared elsewhere), each topic in order;
    a batch's input records are routed in the next batch, and its offsets count only what it routed
    (a backlog's batches: a light load's few records are routed at once, below)."""
    monkeypatch.setattr(inflow, "ROUTE_AT_ONCE_MAX", 0)
    stage = PreparingStage()
    with running(stage, shards=1, input_partitions=1) as (engine, broker, _):
        broker.append("in", 0, None, b'{"k": "a"}')
        broker.append("in", 0, None, b'{"k": "c"}')
        broker.append("shards", 0, b"b", b"v")
        broker.append("shards", 0, b"d", b"v")
        engine.step()
        assert (stage.prepared, stage.seen) == ([0, 1], [("shards", 0), ("shards", 1)])
        assert broker.commits == [{("shards", 0): 2}]
        broker.append("shards", 0, b"e", b"v")
        engine.step()
        assert stage.seen[2:] == [("shards", 2), ("in", 0), ("in", 1)]
        assert broker.commits[1] == {("shards", 0): 3, ("in", 0): 2}


class RoomyStage(PreparingStage):
    """Takes at most ``room`` input records a batch; ready for more once told."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room, self.ready = room, False

    def prepare(self, messages: Sequence[Message]) -> int:
        super().prepare(messages)
        return min(self.room, len(messages))

    def ready_for_input(self) -> bool:
        return self.ready


def test_inputs_a_stage_has_no_room_for_are_consumed_again_once_it_has(monkeypatch: pytest.MonkeyPatch,
                                                                       ) -> None:
    """Deferred: each partition rewound to its first deferred record and paused until the stage is
    ready; the records taken are held for the next batch."""
    monkeypatch.setattr(inflow, "ROUTE_AT_ONCE_MAX", 0)
    stage, consumer, counters = RoomyStage(room=1), StubConsumer(), Counters()
    flow = InputFlow(stage.prepare, stage.ready_for_input, consumer, frozenset({"in"}), counters)  # type: ignore[arg-type]
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


def test_the_held_inputs_are_settled_before_the_next_consume(monkeypatch: pytest.MonkeyPatch) -> None:
    """With records held for routing, the stage's preparation of them is waited for before the next
    batch is consumed (what was fetched meanwhile then goes to it before they are routed), and only
    then."""
    monkeypatch.setattr(inflow, "ROUTE_AT_ONCE_MAX", 0)
    settled: list[int] = []
    stage = RoomyStage(room=9)
    flow = InputFlow(stage.prepare, stage.ready_for_input, StubConsumer(), frozenset({"in"}),  # type: ignore[arg-type]
                     Counters(), settle=lambda: settled.append(len(settled)))
    flow.resume_if_ready()
    assert settled == []  # nothing held
    flow.arrange([LineMessage("in", 4, b"{}", None, 0)])  # type: ignore[list-item]
    flow.resume_if_ready()
    assert settled == [0]
    flow.arrange([])
    flow.resume_if_ready()
    assert settled == [0]  # routed: nothing held any more


def test_a_few_input_records_with_none_held_are_routed_in_their_own_batch(monkeypatch: pytest.MonkeyPatch,
                                                                          ) -> None:
    """A light load's batch routes its few input records itself, after its shard records; a larger
    batch is held, and while records are held every batch holds its own (a backlog's pipeline)."""
    monkeypatch.setattr(inflow, "ROUTE_AT_ONCE_MAX", 2)
    stage = RoomyStage(room=9)
    flow = InputFlow(stage.prepare, stage.ready_for_input, StubConsumer(), frozenset({"in"}),  # type: ignore[arg-type]
                     Counters())
    few = [LineMessage("in", 4, b"{}", None, 0), LineMessage("shards", 7, b"v", b"d", 0)]
    assert flow.arrange(few) == [few[1], few[0]] and not flow.holding  # type: ignore[arg-type]
    many = [LineMessage("in", offset, b"{}", None, 0) for offset in (5, 6, 7)]
    assert flow.arrange(many) == [] and flow.holding  # type: ignore[arg-type]
    assert flow.arrange(few[:1]) == many and flow.holding  # type: ignore[arg-type]
    assert flow.arrange([]) == few[:1] and not flow.holding


def test_an_abort_rewinds_the_held_inputs_and_a_revoke_forgets_them() -> None:
    consumer = StubConsumer()
    stage = RoomyStage(room=9)
    flow = InputFlow(stage.prepare, stage.ready_for_input, consumer, frozenset({"in"}),  # type: ignore[arg-type]
                     Counters())
    held = [LineMessage("in", 4, b"{}", None, 0), LineMessage("in", 6, b"{}", None, 1)]
    flow.arrange(held)  # type: ignore[arg-type]
    flow.revoked({("in", 1)})
    flow.rewind([LineMessage("in", 2, b"{}", None, 0), LineMessage("shards", 3, b"v", b"k", 0)])  # type: ignore[list-item]
    assert consumer.calls == [("seek", ("in", 0, 2)), ("seek", ("shards", 0, 3))] and not flow.holding


class ReportingStage(EchoStage):
    """Echo, and a record to its shard topic last in a transaction whose input positions moved."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, list[int]]] = []

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        context.each_transaction(self.end_of_part)
        return super().init(context)

    def end_of_part(self, inputs: InputPositions | None) -> list[Emit]:
        self.told.append((inputs, sorted(self.context.owned.states)))
        return [] if inputs is None else [Emit(self.state_topic, b"mark", b"m", 0)]


def test_a_reporting_stage_speaks_last_in_each_transaction_and_its_report_counts_once_committed() -> None:
    stage = ReportingStage()
    with running(stage, shards=1, input_partitions=1) as (engine, broker, _):
        broker.append("in", 0, None, b'{"k": "a"}')
        broker.append("shards", 0, b"b", b'{"k": "b"}')
        assert engine.step() == "batch"
        [(positions, written)] = stage.told
        assert positions.routed == {("in", 0): 1} and written == [0]
        assert broker.events == ["begin", "produce shards", "produce out", "produce shards",
                                 "produce changelog", "offsets", "commit"]
        assert engine.step() == "batch"  # the shard records it routed and reported; nothing moved since
        assert stage.told[-1][0] is None


def test_positions_that_moved_with_no_input_are_reported_in_a_transaction_of_their_own() -> None:
    stage = ReportingStage()
    with running(stage, shards=1, input_partitions=1) as (engine, broker, _):
        assert engine.step() == "report"  # the assignment moved them
        assert broker.events == ["begin", "produce shards", "commit"]
        assert stage.told[0][0].routed == {("in", 0): 0}
        assert engine.step() == "batch"  # its own mark, on its shard
        assert engine.step() == "idle"


def test_an_assignment_served_while_closing_is_not_taken_up() -> None:
    """A rebalance still under way when the worker is told to stop is served inside ``close()``,
    where librdkafka answers any question with ``_DESTROY``: the worker stopped with exit 2 on it
    (seen in a reshard test's SIGTERM right after a rebalance). A closing worker takes nothing up."""
    with running(EchoStage()) as (engine, broker, stores):
        broker.append("shards", 0, b"a", b"v")
        engine.step()
        broker.rebalance()
        engine.close()  # must not raise
        assert engine.assignment == () and engine.stores == {}
