"""A real Scrapy crawl through the stages: two Scrapy processes, the URL and page stages, a local site.

The site (tests/scrapy_site.py) links every page under several spellings and plants mirrors and
near copies; the server's access log says what was fetched. Two ``scrapy crawl`` processes of the
example project (examples/scrapy) share the crawl through the local broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from bench import harness as h
from streams import config
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from tests import scrapy_site
from tests.conftest import PROJECT_ROOT

pytest.importorskip("scrapy")

EXAMPLE = PROJECT_ROOT / "examples" / "scrapy"


def _stage(kafka: KafkaConfig, prefix: str, stage: str, state: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "streams", stage, "--topic-prefix", prefix, "--app-id", "app",
               "--worker-id", "w0", "--state-dir", str(state), "--shards", "2"]
    with open(state.parent / f"{stage}.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
                                env={**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers,
                                     "STREAMS_METRICS_ENABLED": "false"})


def _scrapy(kafka: KafkaConfig, prefix: str, proxy: str, items: Path, log: Path,
            *settings: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "scrapy", "crawl", "site", "-o", str(items), "-s", "LOG_LEVEL=INFO",
               "-s", f"CRAWL_DEDUP_TOPIC_PREFIX={prefix}", "-s", "CRAWL_DEDUP_APP_ID=app",
               "-s", "CRAWL_DEDUP_IDLE_CLOSE_S=5"]
    command += [part for setting in settings for part in ("-s", setting)]
    env = {**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers, "http_proxy": proxy,
           "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(PROJECT_ROOT)])}
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=EXAMPLE, env=env)


def _wait_until_running(kafka: KafkaConfig, topics: Topics) -> None:
    """Until both stages' groups are stable (their workers assigned): the crawl's first URL then goes
    through at once, well within the spiders' idle close."""
    admin = AdminClient(kafka.admin())
    groups = [topics.group("app", stage) for stage in ("url-dedup", "content-seen")]

    def stable() -> bool:
        found = admin.describe_consumer_groups(groups)
        return all(found[group].result(timeout=10).state == ConsumerGroupState.STABLE for group in groups)

    h.wait_for(stable, timeout_s=90)


def _items(paths: list[Path]) -> list[dict[str, Any]]:
    """Items written as JSON lines (``-o x.jsonl``: a killed process's lines stand)."""
    return [orjson.loads(line) for path in paths if path.exists() for line in path.read_bytes().splitlines()
            if line.strip()]


def test_two_scrapy_processes_fetch_each_url_once_and_parse_no_planted_copy(kafka: KafkaConfig, prefix: str,
                                                                             tmp_path: Path) -> None:
    topics = Topics(prefix)
    site = scrapy_site.build(pages=300, seed=3)
    stages = [_stage(kafka, prefix, name, tmp_path / name) for name in ("url-dedup", "content-seen")]
    try:
        _wait_until_running(kafka, topics)
        with scrapy_site.SiteServer(site) as server:
            items = [tmp_path / f"items{n}.jsonl" for n in range(2)]
            crawlers = [_scrapy(kafka, prefix, server.proxy, items[n], tmp_path / f"scrapy{n}.log")
                        for n in range(2)]
            for number, crawler in enumerate(crawlers):
                assert crawler.wait(300) == 0, (tmp_path / f"scrapy{number}.log").read_text()[-3000:]
            fetched = server.fetches()
    finally:
        for stage in stages:
            stage.send_signal(signal.SIGTERM)
            stage.wait(60)
    every_page = {f"http://{host}{path}" for host, path in site.pages}
    assert set(fetched) == every_page, sorted(every_page ^ set(fetched))[:10]
    assert max(fetched.values()) == 1, [url for url, count in fetched.items() if count > 1][:10]
    parsed = Counter(item["url"] for item in _items(items))
    assert max(parsed.values()) == 1
    for cluster in site.clusters:
        assert sum(parsed[url] for url in cluster) == 1, (cluster, {url: parsed[url] for url in cluster})
    planted = {url for cluster in site.clusters for url in cluster}
    assert {url for url in every_page if url not in planted} <= set(parsed)
    assert all(_items([path]) for path in items), "a process parsed nothing: the crawl was not shared"


def test_killing_a_scrapy_process_and_a_stage_worker_loses_no_url(kafka: KafkaConfig, prefix: str,
                                                                   tmp_path: Path) -> None:
    """SIGKILL one of two Scrapy processes and the URL stage's worker mid-crawl, restart both: every
    page is fetched; a page fetched twice was in flight in the killed process (its first fetch is
    that process's), at most ``CRAWL_DEDUP_BUFFER`` of them."""
    topics = Topics(prefix)
    site = scrapy_site.build(pages=300, seed=4)
    buffer = 12
    stages = {name: _stage(kafka, prefix, name, tmp_path / name) for name in ("url-dedup", "content-seen")}
    items = [tmp_path / f"items{n}.jsonl" for n in range(3)]
    settings = [f"CRAWL_DEDUP_BUFFER={buffer}", "CONCURRENT_REQUESTS=6"]
    try:
        _wait_until_running(kafka, topics)
        with scrapy_site.SiteServer(site, delay_s=0.03) as server:
            crawlers = [_scrapy(kafka, prefix, server.proxy, items[n], tmp_path / f"scrapy{n}.log", *settings,
                                f"CRAWL_DEDUP_PROCESS_ID=p{n}",
                                f"DEFAULT_REQUEST_HEADERS={{\"X-Crawler\": \"p{n}\"}}") for n in range(2)]
            h.wait_for(lambda: len(server.log) >= 100, timeout_s=120)
            victim = max((0, 1), key=lambda n: server.crawlers.count(f"p{n}"))  # the busier one
            crawlers[victim].send_signal(signal.SIGKILL)
            stages["url-dedup"].send_signal(signal.SIGKILL)
            crawlers[victim].wait()
            stages["url-dedup"].wait()
            killed_at = len(server.log)
            stages["url-dedup"] = _stage(kafka, prefix, "url-dedup", tmp_path / "url-dedup")
            crawlers.append(_scrapy(kafka, prefix, server.proxy, items[2], tmp_path / "scrapy2.log",
                                    *settings, f"CRAWL_DEDUP_PROCESS_ID=p{victim}",  # its place back
                                    "DEFAULT_REQUEST_HEADERS={\"X-Crawler\": \"p2\"}"))
            for number in (1 - victim, 2):
                assert crawlers[number].wait(300) == 0, (tmp_path / f"scrapy{number}.log").read_text()[-3000:]
            fetched, log, who = server.fetches(), list(server.log), list(server.crawlers)
    finally:
        for stage in stages.values():
            stage.send_signal(signal.SIGTERM)
            stage.wait(60)
    every_page = {f"http://{host}{path}" for host, path in site.pages}
    assert set(fetched) == every_page, sorted(every_page ^ set(fetched))[:10]
    again = {url for url, count in fetched.items() if count > 1}
    assert max(fetched.values()) <= 2
    first_by = {url: who[log.index(url)] for url in again}
    assert set(first_by.values()) <= {f"p{victim}"}, first_by
    assert all(log.index(url) < killed_at for url in again)
    assert len(again) <= buffer, sorted(again)
    print(f"killed after {killed_at} fetches; fetched again: {len(again)} (bound {buffer})")
