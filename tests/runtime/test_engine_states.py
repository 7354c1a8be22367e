"""The engine's exactly-once argument as a Hypothesis state machine, with no broker.

Two workers run the URL stage (the stage that answers at routing, from memory and from the shards
it owns) on an in-memory Kafka (``testing/memory_kafka.py``) through the engine's public steps.
Hypothesis interleaves new input, batches, crashes (at a produce, at the offsets, before or after
the commit, at the store's apply), abortable errors, kills between batches, restarts and
rebalances, and checks after every step:

- no URL is emitted twice (read_committed);
- a shard's store is never ahead of its changelog: what it holds is exactly the committed changelog
  records up to the offset it says it reflects;

and at the end, once every worker is restarted and has drained its input, that every distinct URL
was emitted exactly once: so no answer given at routing (a repeat answered from memory, a URL of
an owned shard decided there) outlived the transaction that stood for it, and every restart
resumed at the offsets its last commit left. tests/kafka/test_crash_kafka.py proves the same against the
real broker with SIGKILLs.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streams.config import RuntimeSettings
from streams.runtime.clients import KafkaClients
from streams.runtime.engine import Engine
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.store import MemoryStore, PartitionStore
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.stages.url_dedup.spec import SPEC
from streams.stages.url_dedup.stage import UrlDedupStage
from streams.topics import Topics
from testing.memory_kafka import Crash, MemoryKafka, abortable

TOPICS = Topics("t.")
APP = "app"
TOPOLOGY = SPEC.topology(TOPICS, APP)
SHARDS = 4
FRONTIER_PARTITIONS = 3
WORKERS = ("w0", "w1")
CRASH_POINTS = ("produce", "send_offsets", "commit", "after_commit", "apply")
ABORT_POINTS = ("produce", "send_offsets", "commit")


class Disk(MemoryStore):
    """A shard store that outlives its worker's process (a RocksDB directory), whose apply may be
    where the process dies: the atomic WriteBatch is then either fully written or not at all."""

    def __init__(self, broker: MemoryKafka) -> None:
        super().__init__()
        self.broker = broker

    def apply(self, writes: dict[bytes, bytes | None], changelog_offset: int | None) -> None:  # type: ignore[override]
        self.broker.passing("apply")
        super().apply(writes, changelog_offset)

    def close(self) -> None:
        pass  # the files stay


def _url(number: int) -> str:
    return f"http://h{number % 3}.example/p{number}"


class EngineStates(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker = MemoryKafka()
        self.state_topic = TOPICS.shards(APP, SPEC.name)
        self.changelog = TOPOLOGY.changelog
        self.group = TOPOLOGY.group
        for topic, partitions in [(TOPICS.frontier, FRONTIER_PARTITIONS), (self.state_topic, SHARDS),
                                  (self.changelog, SHARDS), (TOPICS.new_urls, 2), (TOPICS.dead_letters, 1)]:
            self.broker.create_topic(topic, partitions)
        self.disks: dict[str, dict[int, Disk]] = {worker: {} for worker in WORKERS}
        self.engines: dict[str, Engine | None] = dict.fromkeys(WORKERS)
        self.sent: set[str] = set()
        for worker in WORKERS:
            self._start(worker)

    def _start(self, worker: str) -> None:
        disks = self.disks[worker]

        def store(partition: int) -> PartitionStore:
            return disks.setdefault(partition, Disk(self.broker))

        stage = UrlDedupStage(UrlDedupSettings(route_cache_urls=16))
        settings_ = RuntimeSettings(worker_id=worker, shards=SHARDS, batch_max_messages=5,
                                    batch_max_wait_s=0.0)
        engine = Engine(stage, TOPOLOGY, KafkaConfig("memory"), settings_, store_factory=store,
                        clients=cast(KafkaClients, self.broker))
        self.engines[worker] = engine
        try:
            engine.start()  # may recover shards (a warm-up before joining): a crash point too
        except Crash:
            self._crashed(worker)

    def _crashed(self, worker: str) -> None:
        engine = self.engines[worker]
        assert engine is not None
        self.broker.kill_clients(worker)
        self.broker.clear_faults()
        engine.close()  # stops its watchdog thread; the dead clients and the disks do nothing
        self.engines[worker] = None

    # -- rules -----------------------------------------------------------------------------------

    @rule(numbers=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=8),
          partition=st.integers(min_value=0, max_value=FRONTIER_PARTITIONS - 1))
    def crawler_finds(self, numbers: list[int], partition: int) -> None:
        for number in numbers:
            self.broker.append(TOPICS.frontier, partition, None, orjson.dumps({"url": _url(number)}))
            self.sent.add(_url(number))

    @rule(worker=st.sampled_from(WORKERS))
    def step(self, worker: str) -> None:
        engine = self.engines[worker]
        if engine is None:
            return
        try:
            engine.step()
        except Crash:
            self._crashed(worker)

    @rule(point=st.sampled_from(CRASH_POINTS), after=st.integers(min_value=1, max_value=6))
    def crash_soon(self, point: str, after: int) -> None:
        self.broker.fail_at(point, after)

    @rule(point=st.sampled_from(ABORT_POINTS), after=st.integers(min_value=1, max_value=6))
    def abort_soon(self, point: str, after: int) -> None:
        self.broker.fail_at(point, after, abortable)

    @rule(worker=st.sampled_from(WORKERS))
    def kill(self, worker: str) -> None:
        if self.engines[worker] is not None:
            self._crashed(worker)

    @rule(worker=st.sampled_from(WORKERS))
    def restart(self, worker: str) -> None:
        if self.engines[worker] is None:
            self._start(worker)

    @precondition(lambda self: all(self.engines.values()))
    @rule()
    def rebalance(self) -> None:
        self.broker.rebalance()

    # -- what must hold ----------------------------------------------------------------------------

    def _emitted(self) -> Counter[str]:
        return Counter(orjson.loads(message.value() or b"")["canonical"]
                       for message in self.broker.committed_records(TOPICS.new_urls))

    @invariant()
    def no_url_is_emitted_twice(self) -> None:
        doubled = [url for url, count in self._emitted().items() if count > 1]
        assert not doubled, f"emitted twice: {doubled}"

    @invariant()
    def no_store_is_ahead_of_its_changelog(self) -> None:
        for worker, disks in self.disks.items():
            for partition, disk in disks.items():
                reflected = disk.changelog_offset()
                committed = {r.offset: r for r in self.broker.logs[self.changelog][partition]
                             if r.txn is None or r.txn.state == "committed"}
                if reflected is None:
                    assert not list(disk.items()), f"{worker} shard {partition} has state and no offset"
                    continue
                assert reflected in committed, f"{worker} shard {partition} reflects an uncommitted record"
                expected: dict[bytes, bytes] = {}
                for offset in sorted(o for o in committed if o <= reflected):
                    record = committed[offset]
                    if record.key is not None and record.value is not None:
                        expected[record.key] = record.value
                assert dict(disk.items()) == expected, f"{worker} shard {partition}: not its changelog"

    def teardown(self) -> None:
        """Every URL is emitted once, after the workers restart and drain their input."""
        self.broker.clear_faults()
        for worker in WORKERS:
            if self.engines[worker] is None:
                self._start(worker)
        idle_rounds = 0
        for _ in range(500):
            done = [engine.step() for engine in self.engines.values() if engine is not None]
            idle_rounds = idle_rounds + 1 if all(each == "idle" for each in done) else 0
            if idle_rounds == 2:
                break
        try:
            assert idle_rounds == 2, "the workers did not drain their input"
            assert self._emitted() == Counter(self.sent), "a URL was lost or doubled"
            assert not self.broker.committed_records(TOPICS.dead_letters)
        finally:
            for engine in self.engines.values():
                if engine is not None:
                    engine.close()


EngineStates.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_engine_states = EngineStates.TestCase
