"""An in-memory Kafka for unit tests of the runtime: transactions, read_committed, a group.

It models what the engine's exactly-once argument rests on, and nothing more: records appended
inside a transaction become visible to read_committed readers when it commits and never when it
aborts; a partition is read only up to its last stable offset (the first record of a transaction
still open); offsets sent with a transaction become the group's committed offsets when it commits;
``init_transactions`` with a ``transactional.id`` aborts that id's open transaction and fences the
producer that opened it. Each group member is assigned its share of the partitions of its subscription,
at the group's committed offsets, on its first ``consume`` and after each :meth:`rebalance`.
Membership is static (KIP-345), as the engine configures it: a member's share of the partitions
is a function of the set of ``group.instance.id`` values ever seen and a rotation that
:meth:`MemoryKafka.rebalance` advances, so a killed member's partitions wait for its restart.

Faults are injected by name (:meth:`MemoryKafka.fail_at`): a :class:`Crash` (the process dies:
nothing after it runs) or an abortable :class:`KafkaException` at the n-th time a point is passed.
Integration tests use the real broker; this one lets a property test drive thousands of crashes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from streams.runtime.describe import AdminDescriber
from streams.runtime.partitioner import partition_for
from streams.runtime.placement import range_owners

OFFSET_INVALID = -1001


class Crash(BaseException):
    """The worker process died here (a SIGKILL): the engine must not catch it."""


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    txn: Transaction | None  # None: written outside any transaction


@dataclass
class Transaction:
    state: str = "open"  # open, committed, aborted
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)


@dataclass
class FakeError:
    """The part of ``confluent_kafka.KafkaError`` a consumer's error message carries."""

    code_: int

    def code(self) -> int:
        return self.code_

    def fatal(self) -> bool:
        return False


@dataclass
class FakeMessage:
    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None = None
    value_: bytes | None = None
    error_: FakeError | None = None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self.offset_)

    def error(self) -> FakeError | None:
        return self.error_


def _visible(record: Record) -> bool:
    return record.txn is None or record.txn.state == "committed"


class MemoryKafka:
    """The broker, and the client factories a :class:`streams.runtime.engine.Engine` takes."""

    def __init__(self) -> None:
        self.logs: dict[str, list[list[Record]]] = {}
        self.groups: dict[str, dict[tuple[str, int], int]] = {}
        self.epochs: dict[str, int] = {}
        self.open: dict[str, Transaction] = {}
        self.events: list[str] = []  # what producers did, in order ("produce out", "commit"...)
        self.commits: list[dict[tuple[str, int], int]] = []  # each commit's offsets, in order
        self._faults: dict[str, tuple[int, Callable[[], BaseException]]] = {}
        self._members: list[MemoryConsumer] = []
        self.instances: dict[str, set[str]] = {}  # group -> every group.instance.id seen
        self.rotation = 0
        self.fixed_shares: dict[str, list[tuple[str, int]]] = {}  # instance -> its partitions, always
        self.range_assignor = False  # True: shares as librdkafka's range assignor gives them (no rotation)

    # -- administration --------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        self.logs.setdefault(name, [[] for _ in range(partitions)])

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               txn: Transaction | None = None) -> int:
        log = self.logs[topic][partition]
        log.append(Record(len(log), key, value, txn))
        return len(log) - 1

    def committed_records(self, topic: str) -> list[FakeMessage]:
        """What a read_committed reader of ``topic`` sees, partition by partition."""
        return [FakeMessage(topic, p, r.offset, r.key, r.value) for p, log in enumerate(self.logs[topic])
                for r in log[:self.stable_end(topic, p)] if _visible(r)]

    def stable_end(self, topic: str, partition: int) -> int:
        """The last stable offset: where the first record of a transaction still open is."""
        log = self.logs[topic][partition]
        return next((r.offset for r in log if r.txn is not None and r.txn.state == "open"), len(log))

    def rebalance(self) -> None:
        """Partitions move to other members: each member is revoked all its partitions and assigned
        its new share, on its next consume."""
        self.rotation += 1
        for member in self._members:
            member.rebalance_pending = True

    def share(self, group: str, instance: str, topics: Sequence[str]) -> list[tuple[str, int]]:
        """The partitions of ``topics`` member ``instance`` of ``group`` owns now."""
        if instance in self.fixed_shares:
            return [tp for tp in self.fixed_shares[instance] if tp[0] in topics]
        if self.range_assignor:
            return [(topic, p) for topic in topics for p, owner in
                    range_owners(self.instances[group], len(self.logs[topic])).items() if owner == instance]
        members = sorted(self.instances[group])
        mine = members.index(instance)
        return [(topic, p) for topic in topics for p in range(len(self.logs[topic]))
                if (p + self.rotation) % len(members) == mine]

    def fail_at(self, point: str, after: int, error: Callable[[], BaseException] = Crash) -> None:
        """Raise ``error()`` the ``after``-th next time (1 = the next) ``point`` is passed."""
        self._faults[point] = (after, error)

    def clear_faults(self) -> None:
        self._faults.clear()

    def passing(self, point: str) -> None:
        fault = self._faults.get(point)
        if fault is None:
            return
        after, error = fault
        if after > 1:
            self._faults[point] = (after - 1, error)
            return
        del self._faults[point]
        raise error()

    def expire(self, group: str, instance: str) -> None:
        """Member ``instance`` of ``group`` missed its session: it leaves the group, which rebalances."""
        self.instances[group].discard(instance)
        self.rebalance()

    def kill_clients(self, instance: str) -> None:
        """The process of group member ``instance`` died: its consumers do nothing from now on (its
        producer is fenced when the restarted worker initialises its transactions)."""
        for member in self._members:
            member.dead = member.dead or member.instance == instance
        self._members = [member for member in self._members if not member.dead]

    # -- client factories (:class:`streams.runtime.clients.KafkaClients`) ------------------------

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        member = MemoryConsumer(self, config)
        self._members.append(member)
        return member

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        return MemoryProducer(self, config)

    def describer(self, config: dict[str, Any], group: str, timeout_s: float) -> AdminDescriber:
        return AdminDescriber(MemoryAdmin(self), group, timeout_s)

    def describe(self, group: str) -> SimpleNamespace:
        """The group as ``DescribeConsumerGroups`` answers: its live subscribed members and their
        shares (a killed member is a member until :attr:`instances` forgets it: static membership)."""
        live = {member.instance: member for member in self._members
                if member.group == group and member.callbacks and not member.dead}
        members = []
        for instance in sorted(self.instances.get(group, set())):
            subscription = live[instance].subscription if instance in live else []
            share = self.share(group, instance, subscription) if subscription else []
            members.append(SimpleNamespace(group_instance_id=instance, member_id=instance,
                                           assignment=SimpleNamespace(topic_partitions=[
                                               TopicPartition(t, p) for t, p in share])))
        return SimpleNamespace(members=members, state=ConsumerGroupState.STABLE)


class MemoryAdmin:
    """The one admin call the runtime makes of a group (its view, :mod:`streams.runtime.group_view`)."""

    def __init__(self, broker: MemoryKafka) -> None:
        self.broker = broker

    def describe_consumer_groups(self, groups: list[str],
                                 request_timeout: float = 0) -> dict[str, Future[Any]]:
        answers: dict[str, Future[Any]] = {}
        for group in groups:
            answers[group] = Future()
            answers[group].set_result(self.broker.describe(group))
        return answers


def abortable() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._STATE, "injected abortable error", txn_requires_abort=True))


def fenced() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer producer", fatal=True))


class MemoryProducer:
    def __init__(self, broker: MemoryKafka, config: dict[str, Any]) -> None:
        self.broker = broker
        self.txid: str | None = config.get("transactional.id")
        self.epoch = -1
        self.txn: Transaction | None = None
        self.reports: list[tuple[Callable[..., None], FakeMessage]] = []

    def _check(self) -> None:
        if self.txid is not None and self.broker.epochs.get(self.txid) != self.epoch:
            raise fenced()

    def init_transactions(self, timeout: float = 0) -> None:
        assert self.txid is not None
        previous = self.broker.open.pop(self.txid, None)
        if previous is not None:
            previous.state = "aborted"
        self.epoch = self.broker.epochs[self.txid] = self.broker.epochs.get(self.txid, 0) + 1

    def begin_transaction(self) -> None:
        self._check()
        assert self.txn is None, "a transaction is open already"
        self.txn = self.broker.open[self.txid or ""] = Transaction()
        self.broker.events.append("begin")

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int | None = None, on_delivery: Callable[..., None] | None = None) -> None:
        self._check()
        self.broker.passing("produce")
        count = len(self.broker.logs[topic])
        if partition is None:
            partition = partition_for(key, count) if key is not None else 0
        offset = self.broker.append(topic, partition, key, value, self.txn)
        self.broker.events.append(f"produce {topic}")
        if on_delivery is not None:
            self.reports.append((on_delivery, FakeMessage(topic, partition, offset, key, value)))

    def poll(self, timeout: float = 0) -> int:
        served, self.reports = self.reports, []
        for callback, message in served:
            callback(None, message)
        return len(served)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0

    def send_offsets_to_transaction(self, offsets: Sequence[TopicPartition], group: Any,
                                    timeout: float = 0) -> None:
        self._check()
        assert self.txn is not None
        self.broker.passing("send_offsets")
        self.txn.offsets.setdefault(group, {}).update({(tp.topic, tp.partition): tp.offset for tp in offsets})
        self.broker.events.append("offsets")

    def commit_transaction(self, timeout: float = 0) -> None:
        self._check()
        assert self.txn is not None
        self.broker.passing("commit")
        txn, self.txn = self.txn, None
        txn.state = "committed"
        self.broker.open.pop(self.txid or "", None)
        for group, offsets in txn.offsets.items():
            self.broker.groups.setdefault(group, {}).update(offsets)
        self.broker.commits.append({tp: o for offsets in txn.offsets.values() for tp, o in offsets.items()})
        self.broker.events.append("commit")
        self.broker.passing("after_commit")

    def abort_transaction(self, timeout: float = 0) -> None:
        self._check()
        if self.txn is not None:
            self.txn.state = "aborted"
            self.broker.open.pop(self.txid or "", None)
        self.txn, self.reports = None, []
        self.broker.events.append("abort")


@dataclass
class _Topics:
    topics: dict[str, Any]


@dataclass
class _Topic:
    partitions: dict[int, None]


class MemoryConsumer:
    def __init__(self, broker: MemoryKafka, config: dict[str, Any]) -> None:
        self.broker = broker
        self.group: str = config["group.id"]
        self.instance: str = config.get("group.instance.id", "solo")
        self.eof: bool = bool(config.get("enable.partition.eof", False))
        self.committed_only = config.get("isolation.level", "read_committed") == "read_committed"
        self.subscription: list[str] = []
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self.at_eof: set[tuple[str, int]] = set()
        self.rebalance_pending = False
        self.dead = False
        self.closing = False

    def subscribe(self, topics: list[str], on_assign: Callable[..., None], on_revoke: Callable[..., None],
                  on_lost: Callable[..., None] | None = None) -> None:
        self.subscription = list(topics)
        self.callbacks = {"assign": on_assign, "revoke": on_revoke}
        self.rebalance_pending = True
        known = self.broker.instances.setdefault(self.group, set())
        if self.instance not in known:
            known.add(self.instance)
            self.broker.rebalance()  # a new member: everybody's share changes

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.positions[(tp.topic, tp.partition)] = max(tp.offset, 0)

    def _rebalance(self) -> None:
        self.rebalance_pending = False
        if self.positions:
            self.callbacks["revoke"](self, [TopicPartition(t, p) for t, p in sorted(self.positions)])
            self.positions, self.paused = {}, set()
        committed = self.broker.groups.get(self.group, {})
        assigned = self.broker.share(self.group, self.instance, self.subscription)
        self.positions = {tp: committed.get(tp, 0) for tp in assigned}
        self.callbacks["assign"](self, [TopicPartition(t, p) for t, p in assigned])

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[FakeMessage]:
        if self.dead:
            return []
        if self.rebalance_pending and self.callbacks:
            self._rebalance()
        out: list[FakeMessage] = []
        for (topic, partition), position in sorted(self.positions.items()):
            if (topic, partition) in self.paused:
                continue
            end = self.broker.stable_end(topic, partition)
            log = self.broker.logs[topic][partition]
            while position < end and len(out) < num_messages:
                record = log[position]
                position += 1
                if _visible(record):
                    out.append(FakeMessage(topic, partition, record.offset, record.key, record.value))
            self.positions[(topic, partition)] = position
            if position >= end and self.eof and (topic, partition) not in self.at_eof:
                self.at_eof.add((topic, partition))
                eof = FakeError(KafkaError._PARTITION_EOF)
                out.append(FakeMessage(topic, partition, position, error_=eof))
            elif position < end:
                self.at_eof.discard((topic, partition))
        return out

    def seek(self, tp: TopicPartition) -> None:
        self.positions[(tp.topic, tp.partition)] = tp.offset
        self.at_eof.discard((tp.topic, tp.partition))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def committed(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        if self.closing:  # librdkafka asked from a callback that close() serves
            raise KafkaException(KafkaError(KafkaError._DESTROY))
        offsets = self.broker.groups.get(self.group, {})
        return [TopicPartition(tp.topic, tp.partition, offsets.get((tp.topic, tp.partition), OFFSET_INVALID))
                for tp in partitions]

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        """For "latest" (-1) only, what the runtime asks: each partition's end, as below."""
        assert all(tp.offset == -1 for tp in partitions)
        return [TopicPartition(tp.topic, tp.partition, self.get_watermark_offsets(tp)[1])
                for tp in partitions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition,
                               self.positions.get((tp.topic, tp.partition), OFFSET_INVALID))
                for tp in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        """The partition's end as librdkafka reports it: the last stable offset to a read_committed
        consumer (ListOffsets honours the isolation level), the high watermark otherwise."""
        if self.committed_only:
            return 0, self.broker.stable_end(tp.topic, tp.partition)
        return 0, len(self.broker.logs[tp.topic][tp.partition])

    def list_topics(self, topic: str, timeout: float = 0) -> _Topics:
        return _Topics({topic: _Topic(dict.fromkeys(range(len(self.broker.logs[topic]))))})

    def consumer_group_metadata(self) -> str:
        return self.group

    def close(self) -> None:
        """As librdkafka's: a rebalance still pending is served first (its callbacks run inside
        ``close``, where asking the broker anything answers ``_DESTROY``), then everything is revoked."""
        self.closing = True
        if self.rebalance_pending and self.callbacks and not self.dead:
            self._rebalance()
        if self.positions and self.callbacks and not self.dead:
            self.callbacks["revoke"](self, [TopicPartition(t, p) for t, p in sorted(self.positions)])
            self.positions = {}
        self.dead = True
