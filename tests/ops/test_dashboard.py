"""The Grafana dashboard (ops/grafana/dashboards/crawl-dedup.json) cannot be rendered here: check it.

It must parse, query only the metrics the workers export (names below, as streams.ops.metrics
exports them, and the standard process collector's), show every one of them, and use the
Prometheus datasource that the provisioning file defines, by uid. That every query returns data
from real workers is checked against a real Prometheus (tests/kafka/test_prometheus_kafka.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from testing.dashboard import dashboard as read_dashboard
from testing.dashboard import panels, queries

ROOT = Path(__file__).resolve().parents[2]
DATASOURCES = ROOT / "ops" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

COUNTERS = {
    "crawl_dedup_records_in_total", "crawl_dedup_records_out_total", "crawl_dedup_records_at_once_total",
    "crawl_dedup_dead_letters_total",
    "crawl_dedup_decisions_total", "crawl_dedup_aborted_batches_total",
    "crawl_dedup_recovered_records_total", "crawl_dedup_deferred_records_total",
    "crawl_dedup_race_matches_total", "crawl_dedup_urls_forgotten_total", "crawl_dedup_urls_expired_total",
    "crawl_dedup_status_queries_total",
}
GAUGES = {
    "crawl_dedup_duplicate_ratio", "crawl_dedup_bloom_fill_ratio", "crawl_dedup_bloom_false_positive_ratio",
    "crawl_dedup_state_bytes", "crawl_dedup_consumer_lag_records", "crawl_dedup_build_info",
    "crawl_dedup_ready", "crawl_dedup_last_commit_timestamp_seconds",
    "crawl_dedup_recovery_remaining_records", "crawl_dedup_recovery_progress_ratio",
    "crawl_dedup_standby_lag_records",
}
HISTOGRAMS = {"crawl_dedup_batch_seconds", "crawl_dedup_record_age_seconds"}
# The standard collectors' series the dashboard shows (prometheus_client's process collector).
STANDARD = {"process_resident_memory_bytes", "process_cpu_seconds_total"}
# The series names Prometheus stores: a histogram is scraped as its _bucket, _sum and _count series.
SERIES = COUNTERS | GAUGES | STANDARD | {f"{name}{suffix}" for name in HISTOGRAMS
                                         for suffix in ("_bucket", "_sum", "_count")}
LABELS = {"stage", "topic", "reason", "decision", "event", "answer", "shard", "group", "partition", "le",
          "job", "instance", "version", "compiled", "librdkafka"}

# PromQL words that are neither metrics nor labels (functions are told apart by the "(" after them).
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}
_IDENTIFIER = re.compile(r"(?<![\w.$:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names one PromQL expression refers to."""
    labels: set[str] = set()
    for matchers in _MATCHERS.findall(_STRING.sub('""', expr)):
        labels |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    text = _MATCHERS.sub(" ", _STRING.sub('""', expr))
    text = _RANGE.sub(" ", text)
    for _, grouped in _GROUPING.findall(text):
        labels |= {label.strip() for label in grouped.split(",") if label.strip()}
    text = _GROUPING.sub(" ", text)
    metrics = {name for name, call in _IDENTIFIER.findall(text) if not call and name not in _KEYWORDS}
    return metrics, labels


def query_names(query: str) -> tuple[set[str], set[str]]:
    """As :func:`promql_names`, also for Grafana's ``label_values(selector, label)`` variable queries."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*", query)
    if match is None:
        return promql_names(query)
    metrics, labels = promql_names(match[1])
    return metrics, labels | {match[2]}


def _datasource_uid() -> str:
    datasources = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    (prometheus,) = [source for source in datasources if source["type"] == "prometheus"]
    uid: str = prometheus["uid"]
    return uid


def test_promql_names() -> None:
    metrics, labels = promql_names(
        'histogram_quantile(0.99, sum by (stage, le) (rate(crawl_dedup_batch_seconds_bucket'
        '{stage=~"$stage",topic!="x{y}"}[$__rate_interval]))) / on(stage) group_left max(up offset 5m)')
    assert metrics == {"crawl_dedup_batch_seconds_bucket", "up"}
    assert labels == {"stage", "le", "topic"}
    assert query_names("label_values(crawl_dedup_records_in_total, stage)") == (
        {"crawl_dedup_records_in_total"}, {"stage"})


def test_dashboard_parses() -> None:
    dashboard = read_dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    ids = [panel["id"] for panel in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard["panels"]):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]


@pytest.mark.parametrize(("where", "expr"), list(queries()))
def test_queries_use_exported_metrics(where: str, expr: str) -> None:
    metrics, labels = query_names(expr)
    assert metrics, f"{where}: no metric in {expr!r}"
    assert metrics <= SERIES, f"{where}: unknown metrics {sorted(metrics - SERIES)}"
    assert labels <= LABELS, f"{where}: unknown labels {sorted(labels - LABELS)}"


def test_every_metric_is_shown() -> None:
    used: set[str] = set()
    for _, expr in queries():
        used |= query_names(expr)[0]
    shown = {name if name in COUNTERS | GAUGES | STANDARD else re.sub(r"_(bucket|sum|count)$", "", name)
             for name in used}
    assert shown >= COUNTERS | GAUGES | HISTOGRAMS, sorted(COUNTERS | GAUGES | HISTOGRAMS - shown)


def test_datasource_is_the_provisioned_one() -> None:
    uid = _datasource_uid()
    dashboard = read_dashboard()
    sources = [panel.get("datasource") for panel in panels(dashboard["panels"]) if panel["type"] != "row"]
    sources += [target.get("datasource") for panel in panels(dashboard["panels"])
                for target in panel.get("targets", [])]
    sources += [variable.get("datasource") for variable in dashboard["templating"]["list"]
                if variable.get("type") == "query"]
    assert sources
    for source in sources:
        assert source == {"type": "prometheus", "uid": uid}


def test_dashboard_is_provisioned() -> None:
    provisioning = ROOT / "ops" / "grafana" / "provisioning" / "dashboards" / "crawl-dedup.yml"
    providers = yaml.safe_load(provisioning.read_text())["providers"]
    assert [provider["options"]["path"] for provider in providers] == ["/etc/grafana/dashboards"]


def test_metric_list_matches_the_workers() -> None:
    """The names above are the ones streams.ops.metrics registers (skipped before it can be imported)."""
    pytest.importorskip("prometheus_client")
    metrics = pytest.importorskip("streams.ops.metrics")
    registered: set[str] = set()
    for family in metrics.WorkerMetrics("url-dedup").registry.collect():
        registered.add(f"{family.name}_total" if family.type == "counter" else family.name)
    assert {name for name in registered if name.startswith("crawl_dedup_")} == COUNTERS | GAUGES | HISTOGRAMS
    assert registered >= STANDARD


def test_duplicate_decisions_match_the_workers() -> None:
    """The dashboard's windowed duplicate ratio counts the decisions the since-start gauge counts."""
    pytest.importorskip("prometheus_client")
    metrics = pytest.importorskip("streams.ops.metrics")
    matched = {decision for _, expr in queries() for alternatives in re.findall(r'decision=~"([^"]*)"', expr)
               for decision in alternatives.split("|")}
    assert matched == set(metrics.DUPLICATE_DECISIONS)
