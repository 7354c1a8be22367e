"""The metrics layer without a broker: lag arithmetic, counter deltas, stale series removed, the
standard collectors, the build series, the endpoint's port taken exactly."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streams.errors import ConfigError
from streams.ops.health import Endpoint, serve
from streams.ops.lag import PartitionLag
from streams.ops.lag_command import over_limit
from streams.ops.metrics import WorkerMetrics
from streams.runtime.counters import Counters
from streams.runtime.snapshot import snapshot
from streams.runtime.store import MemoryStore


@pytest.mark.parametrize(("committed", "start", "end", "lag"), [
    (None, 0, 10, 10),   # never committed: everything from the log start
    (None, 4, 10, 6),    # ... which may have been deleted by retention
    (10, 0, 10, 0),
    (9, 0, 10, 1),       # one transaction marker after the last record
    (2, 5, 10, 5),       # committed offset fell off the log: counted from the start
    (12, 0, 10, 0),      # end measured before a concurrent commit: never negative
])
def test_partition_lag(committed: int | None, start: int, end: int, lag: int) -> None:
    assert PartitionLag("g", "t", 0, committed, start, end).lag == lag


@dataclass
class _Stage:
    name: str = "url-dedup"


class _BloomStore(MemoryStore):
    def measurements(self) -> dict[str, float]:
        return {"state_bytes": 100.0, "bloom_fill_ratio": 0.25, "bloom_false_positive_rate": 0.001}


@dataclass
class _Engine:
    stage: _Stage = field(default_factory=_Stage)
    counters: Counters = field(default_factory=Counters)
    stores: dict[int, Any] = field(default_factory=dict)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_counters_follow_the_engine_totals() -> None:
    metrics, engine = WorkerMetrics("url-dedup"), _Engine()
    engine.counters.consumed_by_topic["f"] = 5
    engine.counters.decisions.update({"new": 3, "seen": 1})
    metrics.batch_done(snapshot(engine))  # type: ignore[arg-type]
    engine.counters.consumed_by_topic["f"] = 8
    engine.counters.dead_letters_by_reason["json"] = 2
    engine.counters.decisions.update({"seen": 4})
    metrics.batch_done(snapshot(engine))  # type: ignore[arg-type]
    r = metrics.registry
    assert _value(r, "crawl_dedup_records_in_total", stage="url-dedup", topic="f") == 8
    assert _value(r, "crawl_dedup_dead_letters_total", stage="url-dedup", reason="json") == 2
    assert _value(r, "crawl_dedup_decisions_total", stage="url-dedup", decision="seen") == 5
    assert _value(r, "crawl_dedup_duplicate_ratio", stage="url-dedup") == pytest.approx(5 / 8)


def test_store_gauges_drop_revoked_shards() -> None:
    metrics, engine = WorkerMetrics("url-dedup"), _Engine()
    engine.stores = {0: _BloomStore(), 3: _BloomStore()}
    metrics.update_store_gauges(snapshot(engine))  # type: ignore[arg-type]
    assert _value(metrics.registry, "crawl_dedup_bloom_fill_ratio", stage="url-dedup", shard="3") == 0.25
    del engine.stores[3]
    metrics.update_store_gauges(snapshot(engine))  # type: ignore[arg-type]
    assert _value(metrics.registry, "crawl_dedup_bloom_fill_ratio", stage="url-dedup", shard="3") is None
    assert _value(metrics.registry, "crawl_dedup_state_bytes", stage="url-dedup", shard="0") == 100


def test_lag_series_follow_the_partitions_measured() -> None:
    metrics = WorkerMetrics("revisit")
    metrics.report_lag([PartitionLag("g", "t", 0, 5, 0, 9), PartitionLag("g", "t", 1, None, 0, 3)])
    r = metrics.registry
    lag = "crawl_dedup_consumer_lag_records"
    assert _value(r, lag, stage="revisit", group="g", topic="t", partition="0") == 4
    assert _value(r, lag, stage="revisit", group="g", topic="t", partition="1") == 3
    metrics.report_lag([PartitionLag("g", "t", 1, 3, 0, 3)])
    assert _value(r, lag, stage="revisit", group="g", topic="t", partition="0") is None
    assert _value(r, lag, stage="revisit", group="g", topic="t", partition="1") == 0


@pytest.mark.parametrize(("lags", "max_lag", "code"), [
    ([], 0, 0),
    ([("a", 0, 3), ("a", 1, 3)], 6, 0),      # summed over the group's partitions: 6 is not above 6
    ([("a", 0, 3), ("a", 1, 4)], 6, 1),
    ([("a", 0, 7), ("b", 0, 0)], 6, 1),      # one group above is enough
])
def test_max_lag_sums_each_group(lags: list[tuple[str, int, int]], max_lag: int, code: int) -> None:
    measured = [PartitionLag(group, "t", partition, 0, 0, lag) for group, partition, lag in lags]
    assert over_limit(measured, max_lag) == code


def test_standard_collectors_and_build_info_are_served() -> None:
    registry = WorkerMetrics("url-dedup").registry
    names = {family.name for family in registry.collect()}
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds", "python_info",
            "python_gc_objects_collected"} <= names
    (build,) = [sample for family in registry.collect() if family.name == "crawl_dedup_build_info"
                for sample in family.samples]
    assert build.value == 1 and build.labels["stage"] == "url-dedup"
    assert build.labels["compiled"] in {"true", "false"} and build.labels["version"]


def test_known_series_start_at_zero() -> None:
    r = WorkerMetrics("content-seen").registry
    assert _value(r, "crawl_dedup_aborted_batches_total", stage="content-seen") == 0
    assert _value(r, "crawl_dedup_decisions_total", stage="content-seen", decision="near") == 0
    assert _value(r, "crawl_dedup_race_matches_total", stage="content-seen", event="late") == 0
    assert _value(r, "crawl_dedup_batch_seconds_count", stage="content-seen") == 0


def test_endpoint_binds_loopback_and_refuses_a_taken_port() -> None:
    registry = WorkerMetrics("revisit").registry
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics port {busy} on 127.0.0.1 is taken"):
            serve(Endpoint(registry, None, 60.0), "127.0.0.1", busy)
    port = serve(Endpoint(registry, None, 60.0), "127.0.0.1", 0)  # 0: any free port, explicitly
    assert port != 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert b"crawl_dedup_batch_seconds" in response.read()


def _exposition() -> str:
    """Every series a URL worker exports, each with a value (lag, shards, recovery, lifecycle)."""
    from prometheus_client import generate_latest

    from streams.runtime.lifecycle import Lifecycle

    metrics, engine = WorkerMetrics("url-dedup"), _Engine()
    lifecycle = Lifecycle("url-dedup", ["s"], 5.0)
    lifecycle.assigned_now([("s", 0)])
    metrics.lifecycle.source = lifecycle.snapshot
    engine.stores = {0: _BloomStore()}
    engine.counters.dead_letters_by_reason["invalid_url"] = 1
    engine.counters.consumed_by_topic["f"] = 1
    engine.counters.emitted_by_topic["n"] = 1
    metrics.batch_done(snapshot(engine))  # type: ignore[arg-type]
    metrics.report_lag([PartitionLag("g", "t", 0, 5, 0, 9)])
    return generate_latest(metrics.registry).decode()


@pytest.mark.skipif(shutil.which("promtool") is None and not os.environ.get("CI"),
                    reason="no promtool (make installs Debian's prometheus, as root)")
def test_names_follow_the_prometheus_guidelines() -> None:
    """promtool's own lint of the exposition (units, _total, snake case, help), and what it cannot
    know: a share between 0 and 1 is a _ratio, a gauge carries its unit, nothing is called a rate."""
    text = _exposition()
    linted = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                            check=False)
    assert (linted.returncode, linted.stdout + linted.stderr) == (0, "")
    families = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    ours = {name: kind for name, kind in families.items() if name.startswith("crawl_dedup_")}
    assert ours and not [name for name in ours if "rate" in name]
    for name, kind in ours.items():
        if kind == "gauge" and name != "crawl_dedup_ready":
            assert name.endswith(("_bytes", "_seconds", "_records", "_ratio", "_info")), name
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if "_ratio" in name and not line.startswith("#"):
            assert 0 <= float(value) <= 1, line
