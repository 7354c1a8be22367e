"""The page stage on a simulated cluster: partitions, workers, transactions, crashes, rebalances.

Drives :class:`~streams.stages.content_seen.stage.ContentSeenStage` objects as the engine does,
without Kafka, so that a property test can try arrival orders and interleavings the real broker
seldom produces:

- an input topic of ``input_partitions`` partitions and the stage's internal topics of ``shards``
  partitions each, each partition an append-only log; a record emitted to an internal topic lands
  in its ``Emit.partition``, else in ``partition_for(key)`` (the producer's murmur2 partitioner);
- workers, each owning some input partitions and some shards (its stage sees only its own shards'
  stores; a shard is partition *i* of every internal topic). A step of a worker is one transaction:
  the next records of its shards, then of its inputs (a random number of each), processed in an
  interleaving that keeps each partition's order, then the stage's per-transaction callbacks; then
  either a commit (emits appended, state applied, offsets and reported positions advanced) or an
  abort (all of it dropped);
- a crash replaces a worker's stage object (its memory is gone; committed state stays) and a
  rebalance deals the partitions out again, as the engine's callbacks would;
- the runtime's local path (:mod:`streams.runtime.local_path`) as the engine runs it: records for
  a shard the worker owns, of the types the topology lets take it, decided at once after the
  record that sent them; a shard taken with records still in its logs is pending until a step
  starts with them decided (:mod:`streams.runtime.backlog`).

Only what committed is visible: verdicts are read from the committed outputs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.context import StageContext
from streams.runtime.counters import Counters
from streams.runtime.identity import ShardIdentities
from streams.runtime.local_path import LocalPath
from streams.runtime.message import InputPositions
from streams.runtime.offline import LineMessage
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore
from streams.runtime.topology import ShardHandler, Topology, shard_handlers
from streams.stages.content_seen.stage import ContentSeenStage
from streams.topics import Topics

StageFactory = Callable[[], ContentSeenStage]


@dataclass
class Worker:
    stage: ContentSeenStage
    inputs: list[int] = field(default_factory=list)
    shards: list[int] = field(default_factory=list)
    reported: InputPositions | None = None
    owned: OwnedShards = field(default_factory=lambda: OwnedShards({}))
    context: StageContext | None = None
    route: Callable[[Any], list[Emit]] = lambda message: []
    handlers: dict[str, ShardHandler] = field(default_factory=dict)
    local: LocalPath | None = None
    backlog: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, shard) -> end when taken


class Cluster:
    """Topics, committed offsets, shard stores and workers (module docstring)."""

    def __init__(self, make_stage: StageFactory, topology: Topology, inputs: Sequence[Sequence[bytes]],
                 shards: int, workers: int, rng: random.Random,
                 check_outputs: Callable[[list[Emit]], None] = lambda emits: None) -> None:
        """``check_outputs``: the topics' size limits as a stage's context applies them (none by
        default: it raises RecordRejected for a record over its topic's limit); what the processors
        return is delivered unchecked here, where the engine would check it once more."""
        self._make = make_stage
        self._check_outputs = check_outputs
        self.topology = topology
        self.rng = rng
        self.topic = topology.input_topics[0]
        self.internal = topology.shard_topics
        self.input_logs: list[list[bytes]] = [list(values) for values in inputs]
        self.shard_logs = {topic: [[] for _ in range(shards)] for topic in self.internal}
        self.input_done = [0] * len(self.input_logs)
        self.shard_done = {topic: [0] * shards for topic in self.internal}
        self.shards = shards
        self.stores = [MemoryStore() for _ in range(shards)]
        self.outputs: list[Emit] = []
        self.workers = [Worker(self._new_stage()) for _ in range(workers)]
        self.rebalance()

    # -- the cluster ---------------------------------------------------------------------------

    def _new_stage(self) -> ContentSeenStage:
        return self._make()

    def rebalance(self) -> None:
        """Deal every partition to a worker again (each worker's stage hears of what it lost)."""
        for worker in self.workers:
            if worker.context is not None:
                for listener in worker.context.services.listeners:
                    listener.revoked(worker.shards)
            worker.inputs, worker.shards, worker.reported = [], [], None
        for partition in range(len(self.input_logs)):
            self.rng.choice(self.workers).inputs.append(partition)
        for shard in range(self.shards):
            self.rng.choice(self.workers).shards.append(shard)
        for worker in self.workers:
            self._attach(worker)

    def crash(self, index: int) -> None:
        """The worker's process dies: a new stage object, the same committed state."""
        worker = self.workers[index]
        worker.stage, worker.reported = self._new_stage(), None
        self._attach(worker)

    def _attach(self, worker: Worker) -> None:
        """The worker's stage initialised over the shards it owns now (the engine's assignment)."""
        owned = {shard: self.stores[shard] for shard in worker.shards}
        identities = ShardIdentities(worker.stage.store().identity)
        for shard, store in owned.items():
            identities.opened(shard, store)
        worker.owned = OwnedShards(owned, identities.first_use)
        worker.context = StageContext(self.topology, self.shards, worker.owned, self, Counters(), 512 * 1024,
                                      self._check_outputs)
        processors = worker.stage.init(worker.context)
        worker.route, worker.handlers = processors.route, shard_handlers(self.topology, processors)
        worker.local = LocalPath(worker.handlers, self.topology.local_topics, self.shards, worker.owned,
                                 tags=self.topology.local_tags)
        worker.backlog = {(topic, shard): len(self.shard_logs[topic][shard]) for topic in self.internal
                          for shard in worker.shards
                          if self.shard_done[topic][shard] < len(self.shard_logs[topic][shard])}
        worker.owned.pending.update(shard for _, shard in worker.backlog)

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The input reader a stage is given: any committed input record by position."""
        log = self.input_logs[partition]
        return log[offset] if topic == self.topic and offset < len(log) else None

    def close(self) -> None:
        pass

    def produce(self, partition: int, value: bytes) -> None:
        """A record appended to the input topic (pages arriving while the stage runs)."""
        self.input_logs[partition].append(value)

    def settled(self) -> bool:
        logs = [*zip(self.input_done, self.input_logs, strict=True),
                *((done, log) for topic in self.internal
                  for done, log in zip(self.shard_done[topic], self.shard_logs[topic], strict=True))]
        return (all(done == len(log) for done, log in logs)
                and all(self._positions(worker, {}) is None for worker in self.workers))

    # -- one transaction of one worker ---------------------------------------------------------

    def step(self, index: int, max_records: int, abort: bool = False) -> None:
        worker = self.workers[index]
        rng = self.rng
        shard_runs = [_run(topic, shard, self.shard_done[topic][shard], len(self.shard_logs[topic][shard]),
                           rng.randint(0, max_records))
                      for topic in self.internal for shard in worker.shards]
        input_runs = [_run(self.topic, partition, self.input_done[partition], len(self.input_logs[partition]),
                           rng.randint(0, max_records))
                      for partition in worker.inputs]
        self._settle(worker)
        states: dict[int, BatchState] = worker.owned.begin()
        emits: list[Emit] = []
        taken = {(run[0][0], run[0][1]): len(run) for run in shard_runs if run}
        local = worker.local
        assert local is not None
        for topic, shard, at in _interleave(rng, shard_runs):
            key, value = self.shard_logs[topic][shard][at]
            state = worker.owned.state(shard)
            assert state is not None
            message = LineMessage(topic, at, value, key, shard)
            emits += local.run(worker.handlers[topic](message, state), message)
        routed = {partition: self.input_done[partition] for partition in worker.inputs}
        for _, partition, at in _interleave(rng, input_runs):
            message = LineMessage(self.topic, at, self.input_logs[partition][at], None, partition)
            emits += local.run(worker.route(message), message)
            routed[partition] = at + 1
        positions = self._positions(worker, routed)
        assert worker.context is not None
        emits += local.run(worker.context.services.punctuators.run(positions), None)  # as the engine
        listeners = worker.context.services.listeners
        if abort:
            for listener in listeners:
                listener.aborted()
            return
        for emit in emits:
            self._deliver(emit)
        for shard, state in states.items():
            self.stores[shard].apply(state.writes, None)
        for (topic, shard), count in taken.items():
            self.shard_done[topic][shard] += count
        for partition, offset in routed.items():
            self.input_done[partition] = offset
        if positions is not None:
            worker.reported = positions
        for listener in listeners:
            listener.committed()

    def _settle(self, worker: Worker) -> None:
        """The shards whose backlog the steps before decided settle (the engine's batch start)."""
        done = self.shard_done
        worker.backlog = {key: end for key, end in worker.backlog.items() if done[key[0]][key[1]] < end}
        worker.owned.pending.clear()
        worker.owned.pending.update(shard for _, shard in worker.backlog)

    def _positions(self, worker: Worker, routed: dict[int, int]) -> InputPositions | None:
        done = {(self.topic, p): routed.get(p, self.input_done[p]) for p in worker.inputs}
        ends = {(self.topic, p): len(self.input_logs[p]) for p in worker.inputs}
        positions = InputPositions(done, ends, {self.topic: len(self.input_logs)})
        return None if positions == worker.reported or not worker.inputs else positions

    def _deliver(self, emit: Emit) -> None:
        if emit.topic not in self.shard_logs:
            self.outputs.append(emit)
            return
        key = emit.key or b""
        shard = emit.partition if emit.partition is not None else partition_for(key, self.shards)
        self.shard_logs[emit.topic][shard].append((key, emit.value or b""))

    def verdicts(self, topics: Topics) -> list[dict[str, Any]]:
        return [orjson.loads(emit.value or b"{}") for emit in self.outputs
                if emit.topic == topics.page_verdicts]


def _run(topic: str, partition: int, done: int, end: int, count: int) -> list[tuple[str, int, int]]:
    """The next ``count`` records of a partition (fewer at its end)."""
    return [(topic, partition, at) for at in range(done, min(end, done + count))]


def _interleave(rng: random.Random, runs: list[list[tuple[str, int, int]]]) -> list[tuple[str, int, int]]:
    """The runs merged in a random order that keeps each run's own order."""
    pending = [list(run) for run in runs if run]
    merged = []
    while pending:
        run = rng.choice(pending)
        merged.append(run.pop(0))
        if not run:
            pending.remove(run)
    return merged


def run(cluster: Cluster, max_records: int, abort_share: float = 0.0, crash_share: float = 0.0,
        rebalance_share: float = 0.0, trouble_steps: int = 500, max_steps: int = 100_000) -> None:
    """Random steps of random workers until every record is processed and every report made: for
    the first ``trouble_steps``, each step may instead crash a worker or deal the partitions out
    again, and a transaction may abort; then the cluster runs in peace (as a run with a given
    number of kills does), so that it can settle."""
    rng = cluster.rng
    for step in range(max_steps):
        if cluster.settled():
            return
        trouble = step < trouble_steps
        roll = rng.random()
        if trouble and roll < crash_share:
            cluster.crash(rng.randrange(len(cluster.workers)))
        elif trouble and roll < crash_share + rebalance_share:
            cluster.rebalance()
        else:
            cluster.step(rng.randrange(len(cluster.workers)), max_records,
                         abort=trouble and rng.random() < abort_share)
    raise AssertionError(f"not settled after {max_steps} steps")
