"""The runtime's local path (streams/runtime/local_path.py): a record for a shard this worker owns
is decided at once by the same processor, in the open transaction; one for a shard not owned, not
settled, or of a topic without a local path goes through its topic. Pure logic over stub processors,
then the engine on the in-memory Kafka: outputs, state, changelog and offsets commit together, and
a refused local record is a dead letter of its own."""

from __future__ import annotations

import orjson
import pytest

from streams.errors import ConfigError, RecordRejected
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.local_path import NO_TIMESTAMP, NOT_WRITTEN, LocalPath, LocalRecord
from streams.runtime.message import Message
from streams.runtime.offline import LineMessage
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore
from streams.runtime.topology import InternalTopic
from testing.stages import EchoStage, plain_topology, running

ORIGIN = LineMessage("in", 7, b"{}")
SHARDS = 2


def _forward(to: str) -> object:
    """A processor that records what it saw and sends each record on to shard 1 of ``to``."""
    def handle(message: Message, state: BatchState) -> list[Emit]:
        state.set(b"saw:" + (message.value() or b""), b"1")
        return [Emit(to, message.value(), b"k", 1)]
    return handle


def _out(message: Message, state: BatchState) -> list[Emit]:
    state.set(b"saw:" + (message.value() or b""), b"1")
    if message.value() == b"bad":
        raise RecordRejected("schema", "bad record")
    if message.value() == b"bug":
        raise ValueError("a bug in the processor")
    if message.value() == b"misconfigured":
        raise ConfigError("the worker is wrong")
    return [Emit("out", message.value(), message.key())]


def _path(owned: OwnedShards, local: frozenset[str] = frozenset({"a", "b"}),
          refused: list[LocalRecord] | None = None) -> LocalPath:
    def refuse(record: LocalRecord, error: Exception) -> list[Emit]:
        assert refused is not None
        refused.append(record)
        return [Emit("dlq", record.value(), record.key())]
    handlers = {"a": _forward("b"), "b": _out}
    return LocalPath(handlers, local, SHARDS, owned, None if refused is None else refuse)  # type: ignore[arg-type]


@pytest.mark.parametrize(("owned", "local", "emits", "left"), [
    # Both shards owned: a's record is decided, sends one to b, decided too: only the output is left.
    ({0, 1}, {"a", "b"}, [Emit("a", b"x", b"k", 0)], [("out", b"x")]),
    # b's shard 1 is not owned: a decides, its record for b goes through the topic.
    ({0}, {"a", "b"}, [Emit("a", b"x", b"k", 0)], [("b", b"x")]),
    # Nothing owned: the record goes as it came.
    (set(), {"a", "b"}, [Emit("a", b"x", b"k", 0)], [("a", b"x")]),
    # b has no local path: a's record for it goes through the topic.
    ({0, 1}, {"a"}, [Emit("a", b"x", b"k", 0)], [("b", b"x")]),
    # Outputs and records of other topics pass untouched; what a record caused comes after the
    # records sent with it (first in, first out, as offline always did).
    ({0, 1}, {"a", "b"}, [Emit("out", b"1"), Emit("b", b"2", b"k", 1), Emit("c", b"3", b"k", 1)],
     [("out", b"1"), ("c", b"3"), ("out", b"2")]),
    # No partition: the key's shard (partition_for); neither: where the producer sends it.
    ({partition_for(b"k", SHARDS)}, {"a", "b"}, [Emit("b", b"x", b"k")], [("out", b"x")]),
    ({0, 1}, {"a", "b"}, [Emit("b", b"x")], [("b", b"x")]),
])
def test_records_for_owned_shards_of_local_topics_are_decided_and_the_rest_is_left(
        owned: set[int], local: set[str], emits: list[Emit], left: list[tuple[str, bytes]]) -> None:
    shards = OwnedShards({shard: MemoryStore() for shard in owned})
    shards.begin()
    out = _path(shards, frozenset(local)).run(emits, ORIGIN)
    assert [(emit.topic, emit.value) for emit in out] == left


def test_a_topic_that_names_record_types_takes_those_on_the_local_path_and_sends_the_rest() -> None:
    """``InternalTopic.local`` as a set of tags: a typed record of one of them is decided here, one of
    another tag goes through the topic (the page stage's probes, and its marks)."""
    shards = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    shards.begin()
    path = LocalPath({"a": _out}, frozenset({"a"}), SHARDS, shards, tags={"a": frozenset({1})})
    emits = [Emit("a", b"\x01probe", b"k", 0), Emit("a", b"\x04mark", b"k", 0), Emit("a", b"", b"k", 0)]
    assert [(emit.topic, emit.value) for emit in path.run(emits, ORIGIN)] == [
        ("a", b"\x04mark"), ("a", b""), ("out", b"\x01probe")]  # what a record caused comes last
    topology = plain_topology(internal=(InternalTopic("a", {1: object, 4: int}, local=frozenset({1})),  # type: ignore[dict-item]
                                        InternalTopic("b"), InternalTopic("c", local=False)))
    assert (topology.local_topics, topology.local_tags) == (frozenset({"a", "b"}), {"a": frozenset({1})})
    with pytest.raises(ConfigError, match=r"local names tags \[7\]"):
        InternalTopic("a", {1: object}, local=frozenset({1, 7})).tagged()  # type: ignore[dict-item]


def test_records_are_decided_first_in_first_out_each_before_what_it_caused() -> None:
    seen: list[bytes] = []

    def note(message: Message, state: BatchState) -> list[Emit]:
        seen.append(message.value() or b"")
        return [Emit("b", (message.value() or b"") + b"'", b"k", 0)] if message.topic() == "a" else []
    shards = OwnedShards({0: MemoryStore()})
    shards.begin()
    path = LocalPath({"a": note, "b": note}, frozenset({"a", "b"}), 1, shards)
    path.run([Emit("a", b"1", b"k", 0), Emit("a", b"2", b"k", 0), Emit("b", b"3", b"k", 0)], ORIGIN)
    assert seen == [b"1", b"2", b"3", b"1'", b"2'"]


def test_a_local_record_reads_as_its_topic_shard_key_and_value_with_no_offset() -> None:
    found: list[LocalRecord] = []

    def keep(message: Message, state: BatchState) -> list[Emit]:
        assert isinstance(message, LocalRecord)
        found.append(message)
        return []
    shards = OwnedShards({1: MemoryStore()})
    shards.begin()
    LocalPath({"b": keep}, frozenset({"b"}), SHARDS, shards).run([Emit("b", b"v", b"k", 1)], ORIGIN)
    [record] = found
    assert (record.topic(), record.partition(), record.key(), record.value(), record.offset()) == (
        "b", 1, b"k", b"v", NOT_WRITTEN)
    assert record.timestamp() == ORIGIN.timestamp() and record.origin is ORIGIN


def test_a_record_a_shard_sends_itself_goes_through_its_topic_but_offline() -> None:
    """How a processor goes on in a later transaction (a forget's next part): never decided at once
    by a worker, whatever it owns; offline, where the line is decided whole, it is."""
    def again(message: Message, state: BatchState) -> list[Emit]:
        return [Emit("a", b"next", b"k", message.partition())] if message.value() == b"first" else []
    shards = OwnedShards({1: MemoryStore()})
    shards.begin()
    routed, from_topic = LineMessage("in", 0, b"x"), LineMessage("a", 5, b"first", b"k", 1)
    worker = LocalPath({"a": again}, frozenset({"a"}), SHARDS, shards)
    # "first", routed from an input, is decided at once; the record it sends its own shard is not
    first = [Emit("a", b"first", b"k", 1)]
    assert [(e.topic, e.value) for e in worker.run(first, routed)] == [("a", b"next")]
    state = shards.state(1)
    assert state is not None  # nor is the one a shard's record read from its topic sends it
    assert [(e.topic, e.value) for e in worker.run(again(from_topic, state), from_topic)] == [("a", b"next")]
    offline = LocalPath({"a": again}, frozenset({"a"}), SHARDS, shards, offline=True)
    assert offline.run(first, routed) == []


def test_a_shard_with_a_backlog_is_left_to_its_topic_until_it_settles() -> None:
    shards = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    shards.begin()
    shards.pending.add(1)
    path = _path(shards)
    assert [emit.topic for emit in path.run([Emit("b", b"x", b"k", 1)], ORIGIN)] == ["b"]
    assert shards.detours == 1  # owned, sent around: counted for a stage that vouches (the page stage)
    shards.pending.clear()
    assert [emit.topic for emit in path.run([Emit("b", b"x", b"k", 1)], ORIGIN)] == ["out"]
    assert shards.detours == 1


@pytest.mark.parametrize("value", [b"bad", b"bug"])
def test_a_refused_local_record_is_its_own_dead_letter_and_the_others_stand(value: bytes) -> None:
    shards = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    shards.begin()
    refused: list[LocalRecord] = []
    out = _path(shards, refused=refused).run([Emit("b", b"ok", b"k", 1), Emit("b", value, b"k", 1)], ORIGIN)
    assert [(emit.topic, emit.value) for emit in out] == [("out", b"ok"), ("dlq", value)]
    assert [record.value() for record in refused] == [value]


def test_a_callback_s_records_are_decided_with_no_origin_and_no_time() -> None:
    """A per-transaction callback's records (origin None) take the path as a processor's do; one
    refused reaches the refusal with no record to name (the engine logs it), and none of them is
    taken for a shard's record to itself."""
    shards = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    shards.begin()
    refused: list[LocalRecord] = []
    out = _path(shards, refused=refused).run([Emit("a", b"ok", b"k", 0), Emit("b", b"bad", b"k", 1)], None)
    left = [(emit.topic, emit.value) for emit in out]
    assert left == [("dlq", b"bad"), ("out", b"ok")]  # first in, first out: a's record for b after b's
    assert [(record.origin, record.timestamp(), record.offset()) for record in refused] == [
        (None, NO_TIMESTAMP, NOT_WRITTEN)]


def test_without_a_dead_letter_writer_a_refusal_is_raised_and_so_is_a_worker_error() -> None:
    """Offline refuses the line whole; a worker whose configuration is wrong stops."""
    shards = OwnedShards({1: MemoryStore()})
    shards.begin()
    with pytest.raises(RecordRejected):
        _path(shards).run([Emit("b", b"bad", b"k", 1)], ORIGIN)
    with pytest.raises(ConfigError):
        _path(shards, refused=[]).run([Emit("b", b"misconfigured", b"k", 1)], ORIGIN)


LOCAL = plain_topology(internal=(InternalTopic("shards"),))


def test_the_engine_decides_a_record_of_an_owned_shard_in_the_routing_transaction() -> None:
    """Nothing goes through the shard topic; output, state, changelog and offsets commit together."""
    with running(EchoStage(), LOCAL) as (engine, broker, stores):
        broker.append("in", 3, None, b'{"k": "a"}')
        broker.append("in", 3, None, b'{"k": "a"}')
        assert engine.step() == "batch"
        assert broker.committed_records("shards") == []
        assert [message.value() for message in broker.committed_records("out")] == [b'{"k": "a"}']
        shard = partition_for(b"a", 2)
        assert stores[shard].get(b"a") == b"1"
        assert [(m.key(), m.value()) for m in broker.committed_records("changelog")] == [(b"a", b"1")]
        assert broker.groups["g"] == {("in", 3): 2}


class Picky(EchoStage):
    """Refuses the key ``bad`` at its shard, not at routing."""

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        if message.key() == b"bad":
            raise RecordRejected("schema", "not at this shard")
        return super().process(message, state)


def test_the_engine_writes_the_dead_letter_of_the_input_whose_local_record_was_refused() -> None:
    """The letter carries the input record, which can be replayed; the detail names the record refused."""
    with running(Picky(), LOCAL) as (engine, broker, _):
        broker.append("in", 1, None, b'{"k": "bad"}')
        broker.append("in", 1, None, b'{"k": "good"}')
        engine.step()
        [letter] = [orjson.loads(message.value() or b"") for message in broker.committed_records("dlq")]
        assert (letter["reason"], letter["source_topic"], letter["source_offset"]) == ("schema", "in", 0)
        shard = partition_for(b"bad", 2)
        assert f"its record for shards[{shard}], decided at once" in letter["detail"]
        assert [message.key() for message in broker.committed_records("out")] == [b"good"]
        assert engine.counters.dead_letters == 1
