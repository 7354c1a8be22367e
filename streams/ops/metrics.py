"""Prometheus metrics of one worker, served on ``/metrics`` (127.0.0.1 unless configured).

Every series is labelled with the stage; Prometheus adds ``instance``. Counters are advanced from
the engine's own thread after each committed batch (:class:`WorkerMetrics` is the engine's
observer), so they count what was committed, not what was attempted; stage decisions are counted as
the stage makes them, so a batch that aborts (rare) counts its decisions twice. Consumer lag is
measured in a thread of its own (:class:`~streams.ops.lag.LagMonitor`) under kafka_exporter's names,
``kafka_consumergroup_lag{consumergroup,topic,partition}`` and
``kafka_consumergroup_lag_sum{consumergroup,topic}``, for the partitions this worker owns, so the
sum over workers is the group's lag. The full list is in the README (Operations, Monitoring).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from streams.config import MetricsSettings
from streams.errors import ConfigError
from streams.ops.lag import LagMonitor, PartitionLag
from streams.registry import metrics_ports
from streams.runtime.engine import Engine
from streams.runtime.store import Measured

log = logging.getLogger(__name__)

DEFAULT_PORTS = metrics_ports()  # by stage name (streams/registry.py)
DUPLICATE_DECISIONS = frozenset({"seen", "exact", "near", "unchanged"})
STORE_GAUGE_INTERVAL_S = 5.0  # RocksDB properties are cheap, but not free on every batch
COUNTERS = {  # crawl_dedup_<key>_total: help, labels beside "stage"
    "records_in": ("Records consumed and committed", ("topic",)),
    "records_out": ("Records produced and committed", ("topic",)),
    "dead_letters": ("Records sent to the dead-letter topic", ("reason",)),
    "decisions": ("Stage decisions: new/seen, unique/exact/near/skipped, changed/unchanged/first",
                  ("decision",)),
    "aborted_batches": ("Transactions aborted and retried", ()),
    "recovered_records": ("Changelog records replayed into local state", ()),
    "deferred_records": ("Input records a stage had no room for, paused and consumed again later", ()),
    "race_matches": ("content-seen: earlier pages a probe met after the later page was probed: in time for "
                     "its verdict, or late (its verdict stands)", ("event",)),
}
STORE_GAUGES = {  # the keys of Measured.measurements(), one series per shard
    "state_bytes": "Local state size of a shard (RocksDB SST files and memtables)",
    "bloom_fill_ratio": "Share of the Bloom filter's bits set",
    "bloom_false_positive_rate": "Estimated Bloom false-positive rate (fill ratio ** hash count)",
}
BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
AGE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def duplicate_ratio(decisions: Mapping[str, int]) -> float | None:
    """Duplicate decisions over all decisions (``None`` before the first): the gauge and the demo."""
    total = sum(decisions.values())
    if not total:
        return None
    return sum(n for name, n in decisions.items() if name in DUPLICATE_DECISIONS) / total


class WorkerMetrics:
    """The series of one worker, in a registry of its own (tests run several in one process)."""

    def __init__(self, stage: str, registry: CollectorRegistry | None = None) -> None:
        self.stage = stage
        self.registry = registry or CollectorRegistry()
        self._seen: dict[tuple[str, str], int] = {}
        self._last_store_update = 0.0
        self._gauged_shards: set[int] = set()
        self._shard_labels: set[tuple[str, str]] = set()
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._lag_sum_labels: set[tuple[str, str]] = set()
        self._define()

    def _define(self) -> None:
        r = self.registry
        self.counters = {key: Counter(f"crawl_dedup_{key}", text, ["stage", *extra], registry=r)
                         for key, (text, extra) in COUNTERS.items()}
        self.duplicate_ratio = Gauge("crawl_dedup_duplicate_ratio",
                                     "Duplicate decisions / all decisions since start", ["stage"], registry=r)
        self.batch_seconds = Histogram("crawl_dedup_batch_seconds", "Time to process and commit one batch",
                                       ["stage"], buckets=BATCH_BUCKETS_S, registry=r)
        self.record_age = Histogram("crawl_dedup_record_age_seconds",
                                    "Age of a batch's oldest record when the batch committed", ["stage"],
                                    buckets=AGE_BUCKETS_S, registry=r)
        self.store_gauges = {key: Gauge(f"crawl_dedup_{key}", text, ["stage", "shard"], registry=r)
                             for key, text in STORE_GAUGES.items()}
        self.lag = Gauge("kafka_consumergroup_lag", "End offset (read_committed) minus committed offset",
                         ["consumergroup", "topic", "partition"], registry=r)
        self.lag_sum = Gauge("kafka_consumergroup_lag_sum", "Lag summed over this worker's partitions",
                             ["consumergroup", "topic"], registry=r)

    # -- the engine's observer ----------------------------------------------------------------

    def started(self, engine: Engine) -> None:
        self.batch_done(engine)

    def batch_done(self, engine: Engine) -> None:
        counters = engine.counters
        self._advance("records_in", counters.consumed_by_topic)
        self._advance("records_out", counters.emitted_by_topic)
        self._advance("dead_letters", counters.dead_letters_by_reason)
        self._advance_one("aborted_batches", counters.aborted_batches)
        self._advance_one("recovered_records", counters.recovered_records)
        self._advance_one("deferred_records", counters.deferred_records)
        if counters.batches and self._seen.get(("batches", "")) != counters.batches:
            self._seen[("batches", "")] = counters.batches
            self.batch_seconds.labels(self.stage).observe(counters.last_batch_s)
            if counters.last_batch_oldest_ms is not None:
                age_s = max(time.time() - counters.last_batch_oldest_ms / 1000, 0.0)
                self.record_age.labels(self.stage).observe(age_s)
        self._advance("decisions", counters.decisions)
        self._advance("race_matches", counters.race_matches)
        ratio = duplicate_ratio(counters.decisions)
        if ratio is not None:
            self.duplicate_ratio.labels(self.stage).set(ratio)
        if (time.monotonic() - self._last_store_update > STORE_GAUGE_INTERVAL_S
                or set(engine.stores) != self._gauged_shards):
            self.update_store_gauges(engine)

    def stopped(self, engine: Engine) -> None:
        self.batch_done(engine)

    def _advance(self, key: str, totals: Mapping[str, int]) -> None:
        """Add to a labelled counter what the engine's running total gained since last time."""
        for label, total in list(totals.items()):
            before = self._seen.get((key, label), 0)
            if total > before:
                self.counters[key].labels(self.stage, label).inc(total - before)
                self._seen[(key, label)] = total

    def _advance_one(self, key: str, total: int) -> None:
        before = self._seen.get((key, ""), 0)
        if total > before:
            self.counters[key].labels(self.stage).inc(total - before)
            self._seen[(key, "")] = total

    def update_store_gauges(self, engine: Engine) -> None:
        """Per-shard size and Bloom fill of the shards owned now; series of revoked shards go."""
        self._last_store_update = time.monotonic()
        self._gauged_shards = set(engine.stores)  # a shard gained or lost is measured at once
        current: set[tuple[str, str]] = set()
        for partition, store in list(engine.stores.items()):
            if not isinstance(store, Measured):
                continue
            for name, value in store.measurements().items():
                gauge = self.store_gauges.get(name)
                if gauge is not None:
                    gauge.labels(self.stage, str(partition)).set(value)
                    current.add((name, str(partition)))
        for name, shard in self._shard_labels - current:
            self.store_gauges[name].remove(self.stage, shard)
        self._shard_labels = current

    # -- lag --------------------------------------------------------------------------------

    def report_lag(self, lags: list[PartitionLag]) -> None:
        """Set the lag series of the partitions measured; drop those no longer owned."""
        labels = {(lag.group, lag.topic, str(lag.partition)) for lag in lags}
        sums: dict[tuple[str, str], int] = {}
        for lag in lags:
            self.lag.labels(lag.group, lag.topic, str(lag.partition)).set(lag.lag)
            sums[(lag.group, lag.topic)] = sums.get((lag.group, lag.topic), 0) + lag.lag
        for key, total in sums.items():
            self.lag_sum.labels(*key).set(total)
        for stale in self._lag_labels - labels:
            self.lag.remove(*stale)
        for stale_sum in self._lag_sum_labels - set(sums):
            self.lag_sum.remove(*stale_sum)
        self._lag_labels, self._lag_sum_labels = labels, set(sums)


class MetricsEndpoint:
    """The engine observer the CLI installs: the HTTP endpoint, the lag thread and the series."""

    def __init__(self, settings: MetricsSettings, engine: Engine) -> None:
        self.metrics = WorkerMetrics(engine.topology.stage)
        self.port = serve(self.metrics.registry, settings.host,
                          settings.port or DEFAULT_PORTS.get(engine.topology.stage, 9419))
        reader = Consumer(engine.kafka.consumer(engine.group))  # never subscribes: reads commits only
        self._lag = LagMonitor(AdminClient(engine.kafka.admin()), reader, engine.group,
                               lambda: engine.assignment, self.metrics.report_lag, settings.lag_interval_s)

    def started(self, engine: Engine) -> None:
        self.metrics.started(engine)
        self._lag.start()

    def batch_done(self, engine: Engine) -> None:
        self.metrics.batch_done(engine)

    def stopped(self, engine: Engine) -> None:
        self._lag.stop()
        self.metrics.stopped(engine)


def serve(registry: CollectorRegistry, host: str, port: int) -> int:
    """Start ``/metrics`` on ``host:port``; a taken port falls back to a free one (logged)."""
    try:
        server: Any = start_http_server(port, host, registry)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {error}") from error
        server = start_http_server(0, host, registry)
        log.warning("metrics port %d is taken; serving on %d instead (set STREAMS_METRICS_PORT)",
                    port, server[0].server_port)
    bound: int = server[0].server_port
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return bound
