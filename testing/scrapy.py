"""Scrapy crawls against the stages, as the Scrapy tests and ``bench/scrapy_bench.py`` run them: a
worker per stage, the example project's spider through the local site's proxy
(:mod:`testing.scrapy_site`), and the items it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from streams import config
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = PROJECT_ROOT / "examples" / "scrapy"
APP = "app"


def start_stage(kafka: KafkaConfig, prefix: str, stage: str, state: Path) -> subprocess.Popen[bytes]:
    """One worker of ``stage`` (2 shards), metrics off, its log beside ``state``."""
    command = [sys.executable, "-m", "streams", stage, "--topic-prefix", prefix, "--app-id", APP,
               "--worker-id", "w0", "--state-dir", str(state), "--shards", "2"]
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.parent / f"{stage}.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
                                env={**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers,
                                     "STREAMS_METRICS_ENABLED": "false"})


def wait_until_running(kafka: KafkaConfig, topics: Topics,
                       stages: tuple[str, ...] = ("url-dedup", "content-seen")) -> None:
    """Until the stages' groups are stable: a crawl's first URL then goes through at once."""
    admin = AdminClient(kafka.admin())
    groups = [topics.group(APP, stage) for stage in stages]

    def stable() -> bool:
        found = admin.describe_consumer_groups(groups)
        return all(found[group].result(timeout=10).state == ConsumerGroupState.STABLE for group in groups)

    h.wait_for(stable, timeout_s=90)


def start_scrapy(proxy: str, items: Path, log: Path, settings: list[str],
                 env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``scrapy crawl site`` of the example project through ``proxy``, items as JSON lines."""
    command = [sys.executable, "-m", "scrapy", "crawl", "site", "-o", str(items), "-s", "LOG_LEVEL=INFO",
               "-s", "SITE_ALLOWED_DOMAINS=test"]  # the local site only
    command += [part for setting in settings for part in ("-s", setting)]
    environment = {**os.environ, **(env or {}), "http_proxy": proxy,
                   "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(PROJECT_ROOT)])}
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=EXAMPLE, env=environment)


def stage_settings(kafka: KafkaConfig, prefix: str) -> tuple[list[str], dict[str, str]]:
    return ([f"CRAWL_DEDUP_TOPIC_PREFIX={prefix}", f"CRAWL_DEDUP_APP_ID={APP}", "CRAWL_DEDUP_IDLE_CLOSE_S=5"],
            {config.BOOTSTRAP_ENV: kafka.bootstrap_servers})


def read_items(paths: list[Path]) -> list[dict[str, Any]]:
    """Items written as JSON lines (``-o x.jsonl``: a killed process's lines stand)."""
    return [orjson.loads(line) for path in paths if path.exists() for line in path.read_bytes().splitlines()
            if line.strip()]
