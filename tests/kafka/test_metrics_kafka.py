"""A worker's metrics endpoint during a real run, and ``python -m streams lag``.

The worker is started with a backlog already in its input topic and small batches, so its
consumer lag is non-zero for a while; the test scrapes ``/metrics`` until it sees lag series.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import orjson
from prometheus_client.parser import text_string_to_metric_families

from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h
from testing.cli import run_cli
from testing.operated import Worker, worker_env

BACKLOG = 60_000


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _lag_series(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[str, float]:
    return {str(dict(labels)): value for (found, labels), value in samples.items() if found == name}


def test_metrics_endpoint_serves_lag_during_a_run(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    topics = Topics(prefix)
    h.create_topics(kafka, [topics.frontier], 4)
    h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": f"http://h{i % 50}.example/{i % 20_000}"}))
                                        for i in range(BACKLOG)))
    env = worker_env(kafka.bootstrap_servers, STREAMS_METRICS_LAG_INTERVAL_S="0.3")
    worker = Worker(["url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
                     "--state-dir", str(tmp_path), "--shards", "4", "--batch-max-messages", "200",
                     "--idle-exit-s", "5"], env)
    port = worker.port
    try:
        lag = _wait_for_lag(port, worker)
        assert any(value > 0 for value in lag.values()), lag
        assert all(f"'group': '{topics.group('app', 'url-dedup')}'" in key and "'stage': 'url-dedup'" in key
                   for key in lag)
        listed = run_cli(kafka, "lag", "--topic-prefix", prefix, "--app-id", "app", "--stage", "url-dedup",
                         "--json")
        assert listed.returncode == 0, listed.stderr.decode()
        rows = [orjson.loads(line) for line in listed.stdout.splitlines()]
        assert {row["topic"] for row in rows} == {topics.frontier, topics.shards("app", "url-dedup")}
        final = _wait_until_done(port, worker)
    finally:
        code = worker.stop()
    assert code == 0, worker.log()
    decisions = _lag_series(final, "crawl_dedup_decisions_total")
    assert sum(decisions.values()) == BACKLOG
    frontier_in = ("crawl_dedup_records_in_total", (("stage", "url-dedup"), ("topic", topics.frontier)))
    assert final[frontier_in] == BACKLOG
    assert _lag_series(final, "crawl_dedup_bloom_fill_ratio")
    assert 0 < final[("crawl_dedup_duplicate_ratio", (("stage", "url-dedup"),))] < 1


def _wait_for_lag(port: int, worker: Worker, timeout_s: float = 60) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.process.poll() is None, "the worker exited before its lag was seen"
        try:
            lag = _lag_series(_scrape(port), "crawl_dedup_consumer_lag_records")
        except OSError:
            lag = {}
        if any(value > 0 for value in lag.values()):
            return lag
        time.sleep(0.2)
    raise AssertionError("no non-zero crawl_dedup_consumer_lag_records series")


def _wait_until_done(port: int, worker: Worker, timeout_s: float = 120) -> dict[
        tuple[str, tuple[tuple[str, str], ...]], float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        samples = _scrape(port)
        if sum(_lag_series(samples, "crawl_dedup_decisions_total").values()) >= BACKLOG:
            return samples
        time.sleep(0.5)
    raise AssertionError("the worker did not finish its backlog")
