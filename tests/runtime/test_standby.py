"""Standby replicas on the in-memory Kafka: what a standby applies, how it hands a shard over, how a
joining worker warms up, and the takeover that fences a lost owner (streams/runtime/standby.py,
warmth.py, takeover.py). tests/kafka/test_standby_kafka.py proves the same against the broker,
with SIGKILLs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import pytest
from confluent_kafka import KafkaException, TopicPartition

from streams.config import RuntimeSettings
from streams.errors import StateError
from streams.runtime.clients import KafkaClients
from streams.runtime.engine import Engine
from streams.runtime.group_view import GroupView
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.standby import Standbys
from streams.runtime.store import MemoryStore, PartitionStore
from streams.runtime.takeover import Takeover
from testing.memory_kafka import MemoryConsumer, MemoryKafka, MemoryProducer
from testing.stages import EchoStage, create_topics, plain_topology

KAFKA = KafkaConfig("memory")


def _changelog(broker: MemoryKafka, partition: int, writes: dict[bytes, bytes], commit: bool = True,
               txid: str = "owner") -> MemoryProducer:
    producer = broker.producer({"transactional.id": txid})
    producer.init_transactions()
    producer.begin_transaction()
    for key, value in writes.items():
        producer.produce("changelog", value, key, partition=partition)
    if commit:
        producer.commit_transaction()
    return producer


def _standbys(broker: MemoryKafka, stores: dict[int, MemoryStore]) -> Standbys:
    return Standbys("changelog", lambda shard: stores.setdefault(shard, MemoryStore()), KAFKA,
                    cast(KafkaClients, broker), replicas=1)


def test_a_standby_of_an_empty_or_applied_changelog_is_at_its_end_without_a_fetch() -> None:
    """One request a partition: a new application's worker warms no empty shard for fetch rounds."""
    broker, stores = MemoryKafka(), {}
    broker.create_topic("changelog", 3)
    _changelog(broker, 1, {b"a": b"1"})
    _changelog(broker, 2, {b"b": b"2"})
    stores[2] = MemoryStore()
    stores[2].apply({b"b": b"2"}, 0)  # holds the record: at the end once the end is asked
    standbys = _standbys(broker, stores)
    standbys.keep({0, 2})
    assert standbys.behind
    standbys.mark_caught_up()
    assert not standbys.behind and standbys.warm
    standbys.keep({0, 1, 2})
    standbys.mark_caught_up()
    assert standbys.behind  # shard 1 has a record to apply
    standbys.catch_up(1.0)
    assert not standbys.behind and stores[1].get(b"a") == b"1"


def test_a_standby_applies_only_committed_changelog_records() -> None:
    broker, stores = MemoryKafka(), {}
    broker.create_topic("changelog", 2)
    standbys = _standbys(broker, stores)
    standbys.keep({1})
    _changelog(broker, 1, {b"a": b"1", b"b": b"2"})
    _changelog(broker, 0, {b"x": b"9"})  # another shard's: not kept here
    open_one = _changelog(broker, 1, {b"c": b"3"}, commit=False, txid="other")
    assert standbys.catch_up(1.0) == 2
    assert (stores[1].get(b"a"), stores[1].get(b"c"), stores[1].changelog_offset()) == (b"1", None, 1)
    assert 0 not in stores and not standbys.behind  # at the stable end: the open transaction's start
    open_one.commit_transaction()
    standbys.catch_up(1.0)
    assert stores[1].get(b"c") == b"3" and stores[1].changelog_offset() == 2


def test_a_taken_standby_store_is_the_warm_one_and_parked_stores_close_when_not_wanted() -> None:
    broker, stores = MemoryKafka(), {}
    broker.create_topic("changelog", 4)
    standbys = _standbys(broker, stores)
    standbys.keep({2, 3})
    _changelog(broker, 2, {b"k": b"v"})
    standbys.catch_up(1.0)
    taken = standbys.take(2)
    assert taken is stores[2] and taken.get(b"k") == b"v"
    assert set(standbys.stores) == {3}
    standbys.park(0, MemoryStore())
    assert standbys.take(0) is not None  # a revoked shard that came straight back
    standbys.park(1, stores.setdefault(1, MemoryStore()))
    standbys.keep({3})
    assert not standbys.parked and set(standbys.stores) == {3}


class Counted(MemoryStore):
    """A store that counts how often it was closed (each close of a RocksDB store flushes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


class FailingClose(MemoryStore):
    def close(self) -> None:
        raise StateError("disk full")


def test_shards_held_for_this_worker_stay_open_and_the_rest_close_on_threads_of_their_own() -> None:
    broker, stores = MemoryKafka(), {shard: Counted() for shard in range(4)}
    broker.create_topic("changelog", 4)
    standbys = Standbys("changelog", stores.__getitem__, KAFKA, cast(KafkaClients, broker), replicas=1)
    standbys.keep({2, 3})
    standbys.park(0, stores[0])
    standbys.park(1, stores[1])
    standbys.keep(set(), held={0, 3})  # the owner of 3 left; 0 comes back at the assignment
    _changelog(broker, 3, {b"k": b"v"})
    standbys.catch_up(1.0)
    assert stores[3].get(b"k") == b"v"  # still followed until it is taken
    standbys.settle(1)
    standbys.settle(2)
    assert [store.closes for store in stores.values()] == [0, 1, 1, 0]
    assert standbys.take(0) is stores[0] and standbys.take(3) is stores[3]
    standbys.keep({2})  # opened again once closed
    assert set(standbys.stores) == {2} and stores[2].closes == 1
    standbys.close()
    assert [store.closes for store in stores.values()] == [0, 1, 2, 0]


def test_a_store_that_failed_to_close_stops_the_worker_at_the_next_turn() -> None:
    broker = MemoryKafka()
    broker.create_topic("changelog", 2)
    standbys = Standbys("changelog", lambda shard: FailingClose(), KAFKA, cast(KafkaClients, broker),
                        replicas=1)
    standbys.keep({1})
    standbys.keep(set())
    with pytest.raises(StateError, match="disk full"):
        standbys.settle(1)
        standbys.catch_up(0.1)


def _engine(broker: MemoryKafka, worker: str, stores: dict[int, MemoryStore], replicas: int = 1) -> Engine:
    settings = RuntimeSettings(worker_id=worker, shards=4, standby_replicas=replicas)
    return Engine(EchoStage(), plain_topology(), KAFKA, settings,
                  store_factory=lambda shard: stores.setdefault(shard, Counted()),
                  clients=cast(KafkaClients, broker))


def _feed(broker: MemoryKafka, keys: range) -> None:
    for number in keys:
        broker.append("in", number % 4, None, b'{"k": "key%d"}' % number)


def _steps(*engines: Engine, turns: int = 12) -> None:
    for _ in range(turns):
        for engine in engines:
            engine.step()


def test_a_lost_owners_shards_are_taken_warm_and_decided_once() -> None:
    broker = MemoryKafka()
    broker.range_assignor = True
    create_topics(broker, plain_topology(), 4, 4)
    stores0: dict[int, MemoryStore] = {}
    stores1: dict[int, MemoryStore] = {}
    w0, w1 = _engine(broker, "w0", stores0), _engine(broker, "w1", stores1)
    w0.start()
    w1.start()
    _feed(broker, range(200))
    _steps(w0, w1)
    assert sorted(w0.stores) == [0, 1] and sorted(w1.stores) == [2, 3]
    for shard in (2, 3):  # w0 keeps w1's shards warm, at the offset w1's stores reached
        assert stores0[shard].changelog_offset() == stores1[shard].changelog_offset() is not None
        assert dict(stores0[shard].items()) == dict(stores1[shard].items())
    # w1 is killed in a transaction (one its id holds open), and its session expires
    w1_last = broker.producer({"transactional.id": "g.w1"})
    w1_last.init_transactions()
    w1_last.begin_transaction()
    w1_last.produce("out", b"half-done", b"x")
    w1_last.produce("changelog", b"1", b"half-done", partition=2)  # what it decided, as a worker does
    broker.kill_clients("w1")
    w1.close()  # its watchdog thread; its dead clients do nothing
    broker.expire("g", "w1")
    recovered_before = w0.counters.recovered_records
    _feed(broker, range(200, 300))
    _steps(w0, turns=8)
    assert sorted(w0.stores) == [0, 1, 2, 3]
    assert w0.counters.recovered_records - recovered_before == 0  # only the tail: nothing
    assert broker.epochs["g.w1"] > w1_last.epoch and "g.w1" not in broker.open  # fenced, aborted
    keys = Counter(message.key() for message in broker.committed_records("out"))
    assert set(keys) == {b"key%d" % n for n in range(300)} and max(keys.values()) == 1
    w0.close()


def test_a_lost_owner_seen_before_the_rebalance_leaves_its_standbys_open() -> None:
    """The group view may see the owner gone before the rebalance gives its shards: the standby
    copies are held open, not closed and opened again (a flush of each memtable, seconds a store)."""
    broker = MemoryKafka()
    broker.range_assignor = True
    create_topics(broker, plain_topology(), 4, 4)
    stores0: dict[int, MemoryStore] = {}
    w0, w1 = _engine(broker, "w0", stores0), _engine(broker, "w1", {})
    w0.start()
    w1.start()
    _feed(broker, range(100))
    _steps(w0, w1)
    broker.kill_clients("w1")
    w1.close()
    broker.instances["g"].discard("w1")  # gone from the group; the rebalance not yet begun
    warmth = w0._warmth
    warmth._view.refresh()
    warmth.tick(frozenset(w0.stores), None)
    broker.rebalance()
    _feed(broker, range(100, 150))
    _steps(w0, turns=8)
    assert sorted(w0.stores) == [0, 1, 2, 3]
    assert [cast(Counted, stores0[shard]).closes for shard in range(4)] == [0, 0, 0, 0]
    keys = Counter(message.key() for message in broker.committed_records("out"))
    assert len(keys) == 150 and max(keys.values()) == 1
    w0.close()


def test_a_joining_worker_warms_its_shards_before_it_joins() -> None:
    broker = MemoryKafka()
    broker.range_assignor = True
    create_topics(broker, plain_topology(), 4, 4)
    stores0: dict[int, MemoryStore] = {}
    stores1: dict[int, MemoryStore] = {}
    w0 = _engine(broker, "w0", stores0, replicas=0)
    w0.start()
    _feed(broker, range(100))
    _steps(w0)
    w1 = _engine(broker, "w1", stores1, replicas=0)
    w1.start()  # warms 2 and 3 from the changelog before subscribing
    assert {shard: dict(stores1[shard].items()) for shard in (2, 3)} == \
        {shard: dict(stores0[shard].items()) for shard in (2, 3)}
    recovered = w1.counters.recovered_records
    _feed(broker, range(100, 150))
    _steps(w0, w1)
    assert sorted(w1.stores) == [2, 3] and w1.counters.recovered_records == recovered
    assert [cast(Counted, stores1[shard]).closes for shard in (2, 3)] == [0, 0]  # taken as warmed
    keys = Counter(message.key() for message in broker.committed_records("out"))
    assert len(keys) == 150 and max(keys.values()) == 1
    w0.close()
    w1.close()


def test_takeover_fences_the_owners_that_left_the_group() -> None:
    broker = MemoryKafka()
    broker.range_assignor = True
    broker.create_topic("in", 4)
    broker.create_topic("changelog", 4)
    for worker in ("w0", "w1", "w2", "w3"):
        consumer = broker.consumer({"group.id": "g", "group.instance.id": worker})
        consumer.subscribe(["in"], on_assign=lambda *_: None, on_revoke=lambda *_: None)
    view = GroupView(broker.describer({}, "g", 1.0), "g", "w0", 1.0, 1.0)
    view.refresh()  # w0 to w3 own in[0] to in[3]
    left_open = _changelog(broker, 1, {b"k": b"v"}, commit=False, txid="g.w1")  # killed in a transaction
    between = _changelog(broker, 2, {b"k": b"v"}, txid="g.w2")  # killed between two transactions
    stayed = _changelog(broker, 3, {b"k": b"v"}, txid="g.w3")
    broker.expire("g", "w1")
    broker.expire("g", "w2")
    view.refresh()  # w0 owns in[0], in[1]; w3 in[2], in[3]
    takeover = Takeover(view, KAFKA, cast(KafkaClients, broker), "g", "w0", 1.0)
    takeover([("in", 0), ("in", 1), ("in", 3)])  # in[3] as if it had come from w3, still a member
    assert takeover.fenced == ["w1"]  # w2's partition went to w3: w3 fences it
    assert broker.epochs["g.w1"] > left_open.epoch and "g.w1" not in broker.open
    assert broker.epochs["g.w2"] == between.epoch and broker.epochs["g.w3"] == stayed.epoch
    assert [message.value() for message in broker.committed_records("changelog")] == [b"v", b"v"]


def test_a_worker_fenced_while_it_warmed_up_joins_with_its_own_transactions() -> None:
    broker = MemoryKafka()
    broker.range_assignor = True
    create_topics(broker, plain_topology(), 4, 4)
    stores: dict[int, MemoryStore] = {}
    w0 = _engine(broker, "w0", stores, replicas=0)
    fenced_during_warm_up = broker.producer({"transactional.id": "g.w0"})
    real_bring_up = w0._shards.bring_up

    def bring_up(shards: Sequence[int]) -> dict[int, PartitionStore]:
        fenced_during_warm_up.init_transactions()  # another worker's takeover, while w0 was not a member
        return real_bring_up(shards)

    w0._warmth._bring_up = bring_up
    w0.start()
    _feed(broker, range(20))
    _steps(w0)
    keys = Counter(message.key() for message in broker.committed_records("out"))
    assert len(keys) == 20
    w0.close()


def test_a_fence_before_the_first_assignment_is_forgotten() -> None:
    """The takeover's fence landing after the warm-up, as the worker joins (its old session ended
    just then): its producer is initialised in its first assignment, after the fence."""
    broker = MemoryKafka()
    create_topics(broker, plain_topology(), 4, 4)
    w0 = _engine(broker, "w0", {}, replicas=0)
    consumer = cast(MemoryConsumer, w0._consumer)  # the engine's methods are compiled: not patched
    subscribe = consumer.subscribe

    def fenced_then_subscribe(*args: Any, **kwargs: Any) -> None:
        broker.producer({"transactional.id": "g.w0"}).init_transactions()  # the takeover's fence
        subscribe(*args, **kwargs)

    consumer.subscribe = fenced_then_subscribe  # type: ignore[method-assign]
    w0.start()
    _feed(broker, range(8))
    _steps(w0)
    assert len(broker.committed_records("out")) == 8
    w0.close()


def test_a_worker_fenced_before_its_first_commit_restarts_in_place() -> None:
    """Should a fence still come between the producer's initialisation and the first commit, the
    worker, having committed nothing, restarts in place (the watchdog's action)."""
    broker = MemoryKafka()
    create_topics(broker, plain_topology(), 4, 4)
    w0 = _engine(broker, "w0", {}, replicas=0)
    acted: list[str] = []
    w0._watchdog._on_wedged = lambda: acted.append("restart")
    assigned = w0._shards.assigned

    def assigned_then_fenced(partitions: Sequence[TopicPartition]) -> None:
        assigned(partitions)
        broker.producer({"transactional.id": "g.w0"}).init_transactions()

    w0._shards.assigned = assigned_then_fenced  # type: ignore[method-assign]
    _feed(broker, range(4))
    with pytest.raises(KafkaException, match="fenced"):
        w0.run(idle_exit_s=5.0)
    assert acted == ["restart"]
    assert broker.committed_records("out") == []
