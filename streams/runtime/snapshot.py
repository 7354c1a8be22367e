"""What a running worker publishes for ``ops/``: the one public module of the runtime that the
metrics endpoint, the probes and ``/status`` read a worker through.

Why not the engine itself: they used to read the :class:`~streams.runtime.engine.Engine` object's
attributes (its counters, lifecycle, stores, topology, settings, Kafka settings and stage), which
made every one of them part of the engine's interface, and left which thread may read which
attribute to the readers' docstrings. The runtime now says what it publishes, as frozen values
built here, and from which thread each may be asked for:

- :class:`WorkerFacts` (:attr:`Published.facts`): fixed for the engine's life; any thread;
- :class:`EngineSnapshot` (:meth:`Published.snapshot`): the running totals and the stores owned,
  in the engine's own thread only (an observer's ``batch_done``): the engine updates the totals
  without a lock;
- :class:`LifecycleSnapshot` (:meth:`Published.lifecycle`): phase, readiness, recovery and
  standbys; any thread (the lifecycle rebinds its fields whole);
- :meth:`Published.stores`: the stores of the shards owned now; any thread (``/status``).

A :class:`WorkerObserver` (the metrics endpoint) is made from the :class:`Published` worker and
handed an :class:`EngineSnapshot` at start, after each batch and at the stop; :func:`observing`
turns its maker into the engine observer :func:`~streams.runtime.runner.run_stage` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.lifecycle import LifecycleSnapshot, ShardRecovery
from streams.runtime.stage import Stage
from streams.runtime.store import PartitionStore

if TYPE_CHECKING:
    from streams.runtime.engine import Engine, EngineObserver

__all__ = ["EngineSnapshot", "LifecycleSnapshot", "Published", "ShardRecovery", "WorkerFacts",
           "WorkerObserver", "observing"]


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    """What stays the same while a worker runs."""

    stage: str  # its name
    group: str
    worker_id: str
    shards: int
    input_topics: tuple[str, ...]
    shard_topics: tuple[str, ...]
    kafka: KafkaConfig
    behaviour: Stage  # the stage object itself: /status asks it, when it answers status


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """A worker's running totals since it started, and the stores of the shards it owns."""

    consumed_by_topic: Mapping[str, int]
    emitted_by_topic: Mapping[str, int]
    at_once_by_topic: Mapping[str, int]  # records for an owned shard decided at once (local_path)
    dead_letters_by_reason: Mapping[str, int]
    decisions: Mapping[str, int]
    labelled: Mapping[str, Mapping[str, int]]  # a stage's counts by label value, by series
    events: Mapping[str, int]
    aborted_batches: int
    recovered_records: int
    deferred_records: int
    batches: int
    last_batch_s: float
    last_batch_oldest_ms: int | None  # the earliest record timestamp of the last batch
    stores: Mapping[int, PartitionStore]


def snapshot(engine: Engine) -> EngineSnapshot:
    """``engine``'s totals and stores now; in the engine's thread only (see the module docstring)."""
    counters = engine.counters
    labelled = {series: dict(counts) for series, counts in counters.labelled.items()}
    return EngineSnapshot(dict(counters.consumed_by_topic), dict(counters.emitted_by_topic),
                          dict(counters.at_once_by_topic), dict(counters.dead_letters_by_reason),
                          dict(counters.decisions),
                          labelled, dict(counters.events), counters.aborted_batches,
                          counters.recovered_records, counters.deferred_records, counters.batches,
                          counters.last_batch_s, counters.last_batch_oldest_ms, dict(engine.stores))


class Published:
    """One running worker as ``ops/`` sees it (see the module docstring for the threads)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        topology, settings = engine.topology, engine.settings
        self.facts = WorkerFacts(topology.stage, engine.group, settings.worker_id, settings.shards,
                                 tuple(topology.input_topics), tuple(topology.shard_topics), engine.kafka,
                                 engine.stage)

    def snapshot(self) -> EngineSnapshot:
        return snapshot(self._engine)

    def lifecycle(self) -> LifecycleSnapshot:
        return self._engine.lifecycle.snapshot()

    def stores(self) -> Mapping[int, PartitionStore]:
        """The shard stores owned now: a copy of the engine's map, made in one step."""
        return dict(self._engine.stores)


class WorkerObserver(Protocol):
    """Watches a running worker from the engine's thread, through its snapshots."""

    def started(self, snapshot: EngineSnapshot) -> None: ...

    def batch_done(self, snapshot: EngineSnapshot) -> None: ...

    def stopped(self, snapshot: EngineSnapshot) -> None: ...


class _Observing:
    """The engine's observer that hands a :class:`WorkerObserver` snapshots instead of the engine."""

    def __init__(self, observer: WorkerObserver, published: Published) -> None:
        self._observer, self._published = observer, published

    def started(self, engine: Engine) -> None:
        self._observer.started(self._published.snapshot())

    def batch_done(self, engine: Engine) -> None:
        self._observer.batch_done(self._published.snapshot())

    def stopped(self, engine: Engine) -> None:
        self._observer.stopped(self._published.snapshot())


def observing(make: Callable[[Published], WorkerObserver]) -> Callable[[Engine], EngineObserver]:
    """The observer maker :func:`~streams.runtime.runner.run_stage` takes, from one of a
    :class:`WorkerObserver` made from the published worker (the metrics endpoint)."""

    def made(engine: Engine) -> EngineObserver:
        published = Published(engine)
        return _Observing(make(published), published)

    return made
