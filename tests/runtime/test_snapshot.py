"""What a worker publishes for ops/ (streams/runtime/snapshot.py): frozen copies of what the engine
holds, handed to an observer in place of the engine."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from streams.runtime.counters import Counters
from streams.runtime.lifecycle import Lifecycle
from streams.runtime.snapshot import EngineSnapshot, Published, observing
from streams.runtime.store import MemoryStore


def _engine() -> Any:
    topology = SimpleNamespace(stage="url-dedup", input_topics=["frontier"], shard_topics=["app.shards"])
    return SimpleNamespace(topology=topology, settings=SimpleNamespace(worker_id="w0", shards=4),
                           group="app.url-dedup", kafka=object(), stage=object(), counters=Counters(),
                           stores={1: MemoryStore()}, lifecycle=Lifecycle("url-dedup", ["app.shards"], 5.0))


class _Seen:
    def __init__(self) -> None:
        self.snapshots: list[tuple[str, EngineSnapshot]] = []

    def started(self, snapshot: EngineSnapshot) -> None:
        self.snapshots.append(("started", snapshot))

    def batch_done(self, snapshot: EngineSnapshot) -> None:
        self.snapshots.append(("batch_done", snapshot))

    def stopped(self, snapshot: EngineSnapshot) -> None:
        self.snapshots.append(("stopped", snapshot))


def test_an_observer_is_handed_copies_not_the_engine() -> None:
    engine, seen = _engine(), _Seen()
    made: list[Published] = []
    observer = observing(lambda worker: made.append(worker) or seen)(engine)
    (worker,) = made
    assert (worker.facts.stage, worker.facts.group, worker.facts.shards, worker.facts.input_topics,
            worker.facts.shard_topics, worker.facts.behaviour) == (
        "url-dedup", "app.url-dedup", 4, ("frontier",), ("app.shards",), engine.stage)
    engine.counters.consumed_by_topic["frontier"] = 3
    engine.counters.decisions.update({"new": 2})
    observer.batch_done(engine)
    engine.counters.consumed_by_topic["frontier"] = 5
    del engine.stores[1]
    (kind, first), = seen.snapshots
    assert kind == "batch_done" and first.consumed_by_topic == {"frontier": 3} and set(first.stores) == {1}
    assert first.decisions == {"new": 2} and worker.stores() == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.batches = 1  # type: ignore[misc]


def test_the_lifecycle_snapshot_is_the_lifecycle_now() -> None:
    engine = _engine()
    worker = Published(engine)
    before = worker.lifecycle()
    engine.lifecycle.assigned_now([("app.shards", 0)])
    engine.lifecycle.recovered(0, 0.0)
    engine.lifecycle.turned()
    after = worker.lifecycle()
    assert (before.phase, before.ready, before.assigned) == ("starting", False, False)
    assert (after.phase, after.ready, after.owned, set(after.recovery)) == (
        "running", True, frozenset({("app.shards", 0)}), {0})
    assert after.ready == engine.lifecycle.ready
