"""Prometheus metrics of one worker, served on ``/metrics`` (127.0.0.1 unless configured) beside
``/healthz`` and ``/readyz`` (:mod:`streams.ops.health`).

Every series of this project is labelled with the stage; Prometheus adds ``instance``. Counters are
advanced from the engine's own thread after each committed batch (:class:`MetricsEndpoint` is the
worker's observer, handed what the runtime publishes of it: :mod:`streams.runtime.snapshot`), so
they count what was committed, not what was attempted; stage decisions are counted as the stage
makes them, so a batch that aborts (rare) counts its decisions twice. The counters a worker can
know in advance start at 0, so an alert can tell "none yet" from "no worker".

Names follow the Prometheus naming guidelines: base units (``_seconds``, ``_bytes``), ``_total``
on counters, ``_ratio`` for a share between 0 and 1 (a probability too: "rate" is for per second),
``_info`` for build metadata. The standard process, platform and garbage-collector collectors run
in each worker's registry (``process_resident_memory_bytes``, ``process_cpu_seconds_total``,
``process_open_fds``...): memory is the first thing to size.

Consumer lag is measured in a thread of its own (:class:`~streams.ops.lag.LagMonitor`) as
``crawl_dedup_consumer_lag_records{stage,group,topic,partition}``: this project's own name, so it
never collides with kafka_exporter's. Each worker measures every partition its group reads, not only
its own, so the lag of a dead worker's partitions stays measured by the others (take ``max`` over
workers, then ``sum``). The full list is in docs/monitoring.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import confluent_kafka
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.registry import Collector

from streams import registry as stages
from streams.compiled import compiled_modules
from streams.config import MetricsSettings
from streams.ops.health import Bound, Endpoint, bind
from streams.ops.lag import LagMonitor, PartitionLag, topic_partitions
from streams.ops.status import WorkerStatus
from streams.runtime.extras import Measured
from streams.runtime.snapshot import EngineSnapshot, LifecycleSnapshot, Published
from streams.version import package_version

log = logging.getLogger(__name__)

# Prometheus 2 stores each counter's and histogram's `_created` sample as a series of its own: as many
# series again, which nothing reads. Process-wide, as the library offers it.
disable_created_metrics()  # type: ignore[no-untyped-call]

DEFAULT_PORTS = stages.metrics_ports()  # by stage name (streams/registry.py)
DUPLICATE_DECISIONS = frozenset({"seen", "exact", "near", "unchanged"})
STORE_GAUGE_INTERVAL_S = 5.0  # RocksDB properties are cheap, but not free on every batch
COUNTERS = {  # crawl_dedup_<key>_total: help, labels beside "stage"
    "records_in": ("Records consumed and committed", ("topic",)),
    "records_out": ("Records produced and committed", ("topic",)),
    "records_at_once": ("Records for a shard this worker owns, decided at once in the transaction that "
                        "sent them instead of through their internal topic", ("topic",)),
    "dead_letters": ("Records sent to the dead-letter topic", ("reason",)),
    "decisions": ("Stage decisions: new/seen, unique/exact/near/skipped, changed/unchanged/first",
                  ("decision",)),
    "aborted_batches": ("Transactions aborted and retried", ()),
    "recovered_records": ("Changelog records replayed into local state", ()),
    "deferred_records": ("Input records a stage had no room for, paused and consumed again later", ()),
    "status_queries": ("Queries of /status (crawl-dedup status): answered, not_owned (the shard is "
                       "elsewhere or still recovering), refused", ("answer",)),
}
EVENT_COUNTERS = {  # crawl_dedup_<series>_total, advanced from the stage's events: its spec declares them
    counter.series: (counter.event, counter.help) for spec in stages.ALL for counter in spec.counts.events
}
LABELLED_COUNTERS = {  # crawl_dedup_<series>_total{<label>}, from the stage's counts: its spec declares them
    counter.series: counter for spec in stages.ALL for counter in spec.counts.labelled
}
STORE_GAUGES = {  # the keys of Measured.measurements() -> (series name, help), one series per shard
    "state_bytes": ("crawl_dedup_state_bytes",
                    "Local state size of a shard (RocksDB SST files and memtables)"),
    "bloom_fill_ratio": ("crawl_dedup_bloom_fill_ratio", "Share of the Bloom filter's bits set"),
    "bloom_false_positive_rate": ("crawl_dedup_bloom_false_positive_ratio",
                                  "Estimated probability that a new URL passes for seen: "
                                  "fill ratio ** hash count"),
}
LIFECYCLE_GAUGES = {  # read from the worker's lifecycle at each scrape (LifecycleCollector)
    "crawl_dedup_ready": "1 when assigned, recovered and consuming (what /readyz answers 200 to), else 0",
    "crawl_dedup_last_commit_timestamp_seconds":
        "Unix time of this worker's last committed transaction (its start time before the first)",
    "crawl_dedup_recovery_remaining_records":
        "Changelog records (offsets) a shard still has to replay before the worker is ready; 0 once done",
    "crawl_dedup_recovery_progress_ratio": "Share of a shard's changelog replay done (1 once done)",
    "crawl_dedup_standby_lag_records": "Changelog records (offsets) a standby copy of a shard kept on this "
                                       "worker has yet to apply ([runtime] standby_replicas)",
}
PER_SHARD = frozenset({"crawl_dedup_recovery_remaining_records", "crawl_dedup_recovery_progress_ratio",
                       "crawl_dedup_standby_lag_records"})
LAG = "crawl_dedup_consumer_lag_records"
BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
AGE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def duplicate_ratio(decisions: Mapping[str, int]) -> float | None:
    """Duplicate decisions over all decisions (``None`` before the first): the gauge and the demo."""
    total = sum(decisions.values())
    if not total:
        return None
    return sum(n for name, n in decisions.items() if name in DUPLICATE_DECISIONS) / total


class LifecycleCollector(Collector):
    """Readiness, last commit and recovery progress, read from the lifecycle when scraped (the
    engine's thread may be inside a long recovery that no batch observer would interrupt).
    ``source``: the lifecycle's snapshot now (:meth:`~streams.runtime.snapshot.Published.lifecycle`)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.source: Callable[[], LifecycleSnapshot] | None = None

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, text, labels=["stage"]) for name, text in LIFECYCLE_GAUGES.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ready, last_commit, remaining, ratio, standby = (
            GaugeMetricFamily(name, text, labels=["stage", "shard"] if name in PER_SHARD else ["stage"])
            for name, text in LIFECYCLE_GAUGES.items())
        lifecycle = self.source() if self.source is not None else None
        if lifecycle is not None:
            ready.add_metric([self.stage], 1.0 if lifecycle.ready else 0.0)
            last_commit.add_metric([self.stage], lifecycle.last_commit_time)
            for shard, job in sorted(lifecycle.recovery.items()):
                remaining.add_metric([self.stage, str(shard)], float(job.remaining))
                ratio.add_metric([self.stage, str(shard)], job.ratio)
            for shard, lag in sorted(lifecycle.standbys.items()):
                standby.add_metric([self.stage, str(shard)], float(lag))
        yield from (ready, last_commit, remaining, ratio, standby)


class WorkerMetrics:
    """The series of one worker, in a registry of its own (tests run several in one process), with
    the standard process, platform and garbage-collector collectors."""

    def __init__(self, stage: str, registry: CollectorRegistry | None = None) -> None:
        self.stage = stage
        self.registry = registry or CollectorRegistry()
        self._seen: dict[tuple[str, str], int] = {}
        self._last_store_update = 0.0
        self._gauged_shards: set[int] = set()
        self._shard_labels: set[tuple[str, str]] = set()
        self._lag_labels: set[tuple[str, str, str]] = set()
        self.lifecycle = LifecycleCollector(stage)
        self._define()
        self._start_at_zero()

    def _define(self) -> None:
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(self.lifecycle)
        self.build_info = Gauge("crawl_dedup_build_info", "The worker's build: package version, hot path "
                                "compiled (mypyc) or not, librdkafka; always 1",
                                ["stage", "version", "compiled", "librdkafka"], registry=r)
        self.counters = {key: Counter(f"crawl_dedup_{key}", text, ["stage", *extra], registry=r)
                         for key, (text, extra) in COUNTERS.items()}
        self.counters.update({key: Counter(f"crawl_dedup_{key}", text, ["stage"], registry=r)
                              for key, (_event, text) in EVENT_COUNTERS.items()})
        self.counters.update({key: Counter(f"crawl_dedup_{key}", each.help, ["stage", each.label], registry=r)
                              for key, each in LABELLED_COUNTERS.items()})
        self.duplicate_ratio = Gauge("crawl_dedup_duplicate_ratio",
                                     "Duplicate decisions / all decisions since start", ["stage"], registry=r)
        self.batch_seconds = Histogram("crawl_dedup_batch_seconds", "Time to process and commit one batch",
                                       ["stage"], buckets=BATCH_BUCKETS_S, registry=r)
        self.record_age = Histogram("crawl_dedup_record_age_seconds",
                                    "Age of a batch's oldest record when the batch committed", ["stage"],
                                    buckets=AGE_BUCKETS_S, registry=r)
        self.store_gauges = {key: Gauge(name, text, ["stage", "shard"], registry=r)
                             for key, (name, text) in STORE_GAUGES.items()}
        self.lag = Gauge(LAG, "Records the stage's consumer group is behind on a partition: end offset "
                         "(read_committed) minus committed offset; every worker of the group measures "
                         "every partition", ["stage", "group", "topic", "partition"], registry=r)

    def _start_at_zero(self) -> None:
        """The series a worker knows in advance exist from the start, at 0 (Prometheus naming
        guidelines: a missing series and a zero one differ for rate() and for alerts)."""
        self.build_info.labels(self.stage, package_version(), str(bool(compiled_modules())).lower(),
                               confluent_kafka.libversion()[0]).set(1)
        for key, (_text, extra) in COUNTERS.items():
            if not extra:
                self.counters[key].labels(self.stage)
        own = next((spec for spec in stages.ALL if spec.name == self.stage), None)
        if own is not None:
            for decision in own.counts.decisions:
                self.counters["decisions"].labels(self.stage, decision)
            for labelled in own.counts.labelled:
                for value in labelled.values:
                    self.counters[labelled.series].labels(self.stage, value)
            if own.cli.status_key is not None:
                self.counters["status_queries"].labels(self.stage, "answered")
            for counter in own.counts.events:
                self.counters[counter.series].labels(self.stage)
        self.batch_seconds.labels(self.stage)
        self.record_age.labels(self.stage)

    # -- the worker's snapshots ----------------------------------------------------------------

    def started(self, input_topics: Iterable[str], snapshot: EngineSnapshot) -> None:
        for topic in input_topics:
            self.counters["records_in"].labels(self.stage, topic)
        self.batch_done(snapshot)

    def batch_done(self, snapshot: EngineSnapshot) -> None:
        self._advance("records_in", snapshot.consumed_by_topic)
        self._advance("records_out", snapshot.emitted_by_topic)
        self._advance("records_at_once", snapshot.at_once_by_topic)
        self._advance("dead_letters", snapshot.dead_letters_by_reason)
        self._advance_one("aborted_batches", snapshot.aborted_batches)
        self._advance_one("recovered_records", snapshot.recovered_records)
        self._advance_one("deferred_records", snapshot.deferred_records)
        if snapshot.batches and self._seen.get(("batches", "")) != snapshot.batches:
            self._seen[("batches", "")] = snapshot.batches
            self.batch_seconds.labels(self.stage).observe(snapshot.last_batch_s)
            if snapshot.last_batch_oldest_ms is not None:
                age_s = max(time.time() - snapshot.last_batch_oldest_ms / 1000, 0.0)
                self.record_age.labels(self.stage).observe(age_s)
        self._advance("decisions", snapshot.decisions)
        for series, counts in snapshot.labelled.items():
            if series in LABELLED_COUNTERS:
                self._advance(series, counts)
        for key, (event, _text) in EVENT_COUNTERS.items():
            if snapshot.events.get(event):
                self._advance_one(key, snapshot.events[event])
        ratio = duplicate_ratio(snapshot.decisions)
        if ratio is not None:
            self.duplicate_ratio.labels(self.stage).set(ratio)
        if (time.monotonic() - self._last_store_update > STORE_GAUGE_INTERVAL_S
                or set(snapshot.stores) != self._gauged_shards):
            self.update_store_gauges(snapshot)

    def stopped(self, snapshot: EngineSnapshot) -> None:
        self.batch_done(snapshot)

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

    def update_store_gauges(self, snapshot: EngineSnapshot) -> None:
        """Per-shard size and Bloom fill of the shards owned now; series of revoked shards go."""
        self._last_store_update = time.monotonic()
        self._gauged_shards = set(snapshot.stores)  # a shard gained or lost is measured at once
        current: set[tuple[str, str]] = set()
        for partition, store in list(snapshot.stores.items()):
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
        """Set the lag series of the partitions measured; drop those no longer measured."""
        labels = {(lag.group, lag.topic, str(lag.partition)) for lag in lags}
        for lag in lags:
            self.lag.labels(self.stage, lag.group, lag.topic, str(lag.partition)).set(lag.lag)
        for stale in self._lag_labels - labels:
            self.lag.remove(self.stage, *stale)
        self._lag_labels = labels


def bind_port(settings: MetricsSettings, stage: str) -> Bound:
    """The worker's metrics port (its stage's default unless configured), bound."""
    return bind(settings.host, DEFAULT_PORTS.get(stage, 9419) if settings.port is None else settings.port)


class MetricsEndpoint:
    """The worker observer the CLI installs: the HTTP endpoint, the lag thread and the series."""

    def __init__(self, settings: MetricsSettings, worker: Published, bound: Bound | None = None) -> None:
        """``bound``: the port, bound before the engine was made (:func:`bind_port`), else bound here."""
        facts = worker.facts
        stage = facts.stage
        self._input_topics = facts.input_topics
        self.metrics = WorkerMetrics(stage)
        self.metrics.lifecycle.source = worker.lifecycle
        bound = bound or bind_port(settings, stage)
        queries = self.metrics.counters["status_queries"]
        status = WorkerStatus(worker, lambda answer: queries.labels(stage, answer).inc())
        bound.attach(Endpoint(self.metrics.registry, worker.lifecycle, settings.stall_after_s, status))
        self.port = bound.port
        shown = f"[{settings.host}]" if ":" in settings.host else settings.host
        log.info("serving http://%s:%d/metrics, /healthz, /readyz and /status", shown, self.port,
                 extra={"fields": {"event": "metrics", "host": settings.host, "port": self.port}})
        admin = AdminClient(facts.kafka.admin())
        topics = sorted({*facts.input_topics, *facts.shard_topics})
        reader = Consumer(facts.kafka.consumer(facts.group))  # never subscribes: reads commits only
        self._lag = LagMonitor(admin, reader, facts.group, lambda: topic_partitions(admin, topics),
                               self.metrics.report_lag, settings.lag_interval_s)

    def started(self, snapshot: EngineSnapshot) -> None:
        self.metrics.started(self._input_topics, snapshot)
        self._lag.start()

    def batch_done(self, snapshot: EngineSnapshot) -> None:
        self.metrics.batch_done(snapshot)

    def stopped(self, snapshot: EngineSnapshot) -> None:
        self._lag.stop()
        self.metrics.stopped(snapshot)
