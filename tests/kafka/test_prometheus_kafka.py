"""A real Prometheus (Debian's, installed by ``make``) scraping real workers with the shipped scrape
configuration and alert rules.

Two URL-stage workers and a page-stage worker run on a small crawl while Prometheus scrapes them
every second (the shipped ops/prometheus/prometheus.yml with the targets replaced by the workers'
ports, and alerts.yml with every ``for:`` shortened to 2 s). Through Prometheus's HTTP API:

- every query of the shipped Grafana dashboard returns series;
- the URL stage's input rate agrees with the pace the test wrote the frontier at;
- the malformed records planted for each stage fire the dead-letter alert;
- after one URL worker is SIGKILLed, records written to the frontier partitions it owned show as
  exactly that lag (measured by the surviving worker, which measures its whole group), the same
  as ``crawl-dedup lag`` says, and the "worker missing" alert fires.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from confluent_kafka import Producer

from streams.dev import simweb
from streams.runtime.kafka_io import KafkaConfig, produce_all
from streams.runtime.topic_admin import TopicSpec, ensure_topics
from streams.topics import Topics
from testing.cli import PROJECT_ROOT, run_cli
from testing.dashboard import queries
from testing.operated import Worker, worker_env

OPS = PROJECT_ROOT / "ops" / "prometheus"
PROMETHEUS = shutil.which("prometheus")
RATE_PER_S = 400  # frontier records the test writes per second
PACED_S = 12
KILLED_LAG = 37  # records written to each partition of the killed worker
# Grafana's variables, as the dashboard would fill them over this short run.
VARIABLES = {"$__rate_interval": "15s", "$__range": "5m", "$stage": ".*"}

pytestmark = pytest.mark.skipif(PROMETHEUS is None and not os.environ.get("CI"),
                                reason="no prometheus binary (make installs Debian's, as root)")


def _free_port() -> int:
    """A port in the range this test's Prometheus may take (not the workers': they take any)."""
    for port in range(19950, 19991):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 19950-19990")


class Prometheus:
    def __init__(self, work: Path, targets: list[str]) -> None:
        assert PROMETHEUS is not None, "CI must have prometheus: make installs it"
        shipped = yaml.safe_load((OPS / "prometheus.yml").read_text())
        shipped["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        (job,) = shipped["scrape_configs"]
        job["static_configs"] = [{"targets": targets}]
        rules = yaml.safe_load((OPS / "alerts.yml").read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "2s"
        (work / "alerts.yml").write_text(yaml.safe_dump(rules))
        assert shipped["rule_files"] == ["alerts.yml"]
        (work / "prometheus.yml").write_text(yaml.safe_dump(shipped))
        self.port = _free_port()
        self._log = (work / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=self._log)
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process.poll() is None, "prometheus exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                    return
            except OSError:
                assert time.monotonic() < deadline, "prometheus not ready"
                time.sleep(0.2)

    def api(self, path: str, **params: Any) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def wait_for(self, expr: str, check: Any, timeout_s: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if check(result):
                return result
            assert time.monotonic() < deadline, f"{expr}: {result}"
            time.sleep(0.5)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def _value(result: list[dict[str, Any]]) -> float:
    return sum(float(series["value"][1]) for series in result)


def _pace(kafka: KafkaConfig, topic: str, rate_per_s: int, seconds: float) -> int:
    """Write new frontier URLs at ``rate_per_s`` for ``seconds``, in tenths of a second."""
    producer = Producer(kafka.producer())
    began, written = time.monotonic(), 0
    while (elapsed := time.monotonic() - began) < seconds:
        due = int(elapsed * rate_per_s) + rate_per_s // 10
        while written < due:
            producer.produce(topic, orjson.dumps({"url": f"http://paced{written % 13}.example/{written}"}))
            written += 1
        producer.poll(0)
        time.sleep(0.1)
    assert producer.flush(30) == 0
    return written


@pytest.fixture
def workers(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> Iterator[list[Worker]]:
    topics = Topics(prefix)
    ensure_topics(kafka, [TopicSpec(topics.frontier, 4), TopicSpec(topics.fetched_pages, 2)])
    # Standbys, so the dashboard's standby panel has series; a long session, so the partitions of the
    # URL worker the test kills stay unassigned while their lag is measured.
    env = worker_env(kafka.bootstrap_servers, STREAMS_METRICS_LAG_INTERVAL_S="1", STREAMS_LOG_FORMAT="json",
                     STREAMS_RUNTIME_STANDBY_REPLICAS="1", STREAMS_RUNTIME_SESSION_TIMEOUT_S="60")
    common = ["--topic-prefix", prefix, "--app-id", "app", "--state-dir", str(tmp_path / "state"),
              "--shards", "4"]
    started = [Worker(["url-dedup", "--worker-id", "u0", *common], env),
               Worker(["url-dedup", "--worker-id", "u1", *common], env),
               Worker(["content-seen", "--worker-id", "c0", *common], env)]
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


def test_prometheus_sees_the_workers_and_alerts(kafka: KafkaConfig, prefix: str, tmp_path: Path,
                                                workers: list[Worker]) -> None:
    topics = Topics(prefix)
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{worker.port}" for worker in workers])
    try:
        for worker in workers:
            worker.wait_ready()
        pages = simweb.crawl(seed=3, articles=12)
        records = [(page.url.encode(), orjson.dumps(page.record)) for page in pages]
        produce_all(kafka, topics.fetched_pages, [*records, (None, b"{not a page")])
        produce_all(kafka, topics.frontier, [(None, b"not json")] * 3)
        began = time.time()
        written = _pace(kafka, topics.frontier, RATE_PER_S, PACED_S) + 3
        ended = time.time()
        consumed = f'sum(crawl_dedup_records_in_total{{stage="url-dedup",topic="{topics.frontier}"}})'
        prometheus.wait_for(consumed, lambda result: _value(result) == written)
        pages_in = f'sum(crawl_dedup_records_in_total{{stage="content-seen",topic="{topics.fetched_pages}"}})'
        prometheus.wait_for(pages_in, lambda result: _value(result) == len(pages) + 1)

        # The input rate Prometheus computes, over the paced part of the run, is the pace written.
        rate = f'sum(rate(crawl_dedup_records_in_total{{stage="url-dedup",topic="{topics.frontier}"}}[4s]))'
        series = prometheus.api("query_range", query=rate, start=began + 5, end=ended - 1, step=1)["result"]
        measured = statistics.median(float(value) for _, value in series[0]["values"])
        assert abs(measured - RATE_PER_S) < 0.25 * RATE_PER_S, (measured, series)

        letters = prometheus.wait_for('ALERTS{alertname="CrawlDedupDeadLetters",alertstate="firing"}',
                                      lambda found: len(found) == 2, timeout_s=30)
        assert {alert["metric"]["stage"] for alert in letters} == {"url-dedup", "content-seen"}

        for where, expr in queries():
            query = expr
            for name, value in VARIABLES.items():
                query = query.replace(name, value)
            if query.startswith("label_values("):  # the variable's values: its selector's series
                query = query.removeprefix("label_values(").rsplit(",", 1)[0]
            assert prometheus.query(query), f"{where}: no series for {query}"

        _kill_one_and_measure(kafka, prefix, topics, prometheus, workers[1])
    finally:
        prometheus.stop()


def _kill_one_and_measure(kafka: KafkaConfig, prefix: str, topics: Topics, prometheus: Prometheus,
                          killed: Worker) -> None:
    """SIGKILL a URL worker, write to the frontier partitions it owned: that is the lag seen."""
    assignments = [line["fields"] for line in killed.json_lines()
                   if line["fields"].get("event") == "assignment"]
    owned = [int(name.rsplit("[", 1)[1].rstrip("]")) for name in assignments[-1]["inputs"]
             if name.startswith(topics.frontier + "[")]
    assert owned, assignments
    instance = f"127.0.0.1:{killed.port}"
    killed.kill()
    producer = Producer(kafka.producer())
    for partition in owned:
        for i in range(KILLED_LAG):
            producer.produce(topics.frontier, orjson.dumps({"url": f"http://late.example/{partition}/{i}"}),
                             partition=partition)
    assert producer.flush(30) == 0

    lag = ('max by (partition) (crawl_dedup_consumer_lag_records'
           f'{{stage="url-dedup",topic="{topics.frontier}"}})')
    result = prometheus.wait_for(lag, lambda found: {int(s["metric"]["partition"]): float(s["value"][1])
                                                     for s in found if int(s["metric"]["partition"]) in owned}
                                 == dict.fromkeys(owned, KILLED_LAG), timeout_s=25)
    listed = run_cli(kafka, "lag", "--topic-prefix", prefix, "--app-id", "app", "--stage", "url-dedup",
                     "--json", "--max-lag", str(KILLED_LAG * len(owned) + 100))
    rows = [orjson.loads(line) for line in listed.stdout.splitlines()]
    assert {row["partition"]: row["lag"] for row in rows if row["topic"] == topics.frontier
            and row["partition"] in owned} == dict.fromkeys(owned, KILLED_LAG), (rows, result)
    assert listed.returncode == 0, listed.stderr.decode()
    over = run_cli(kafka, "lag", "--topic-prefix", prefix, "--app-id", "app", "--stage", "url-dedup",
                   "--max-lag", str(KILLED_LAG * len(owned) - 1))
    assert over.returncode == 1 and b"above --max-lag" in over.stderr, over.stderr.decode()

    alerts = prometheus.wait_for('ALERTS{alertname="CrawlDedupWorkerMissing",alertstate="firing"}',
                                 lambda found: bool(found), timeout_s=30)
    assert [alert["metric"]["instance"] for alert in alerts] == [instance]
