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


def _scrapy(kafka: KafkaConfig, prefix: str, proxy: str, items: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "scrapy", "crawl", "site", "-O", str(items), "-s", "LOG_LEVEL=INFO",
               "-s", f"CRAWL_DEDUP_TOPIC_PREFIX={prefix}", "-s", "CRAWL_DEDUP_IDLE_CLOSE_S=8"]
    env = {**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers, "http_proxy": proxy,
           "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(PROJECT_ROOT)])}
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=EXAMPLE, env=env)


def _items(paths: list[Path]) -> list[dict[str, Any]]:
    return [item for path in paths if path.exists() for item in orjson.loads(path.read_bytes() or b"[]")]


def test_two_scrapy_processes_fetch_each_url_once_and_parse_no_planted_copy(kafka: KafkaConfig, prefix: str,
                                                                             tmp_path: Path) -> None:
    topics = Topics(prefix)
    site = scrapy_site.build(pages=300, seed=3)
    stages = [_stage(kafka, prefix, name, tmp_path / name) for name in ("url-dedup", "content-seen")]
    try:
        admin = AdminClient(kafka.admin())
        wanted = {topics.new_urls, topics.page_verdicts}
        h.wait_for(lambda: wanted <= set(admin.list_topics(timeout=10).topics), timeout_s=60)
        with scrapy_site.SiteServer(site) as server:
            items = [tmp_path / f"items{n}.json" for n in range(2)]
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
