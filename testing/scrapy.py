"""Scrapy crawls against the stages, as the Scrapy tests and ``bench/scrapy_bench.py`` run them: a
worker per stage, the example project's spider (or a test's, ``scrapy runspider``) through a local
site's proxy (:mod:`testing.scrapy_site`, :mod:`testing.behaviour_site`), and what came out of it
(items, stats, log).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams import config
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = PROJECT_ROOT / "examples" / "scrapy"
SPIDERS = PROJECT_ROOT / "tests" / "scrapy_spiders"
APP = "app"
# what a coordinator answers while it loads or moves, right after a broker's start: asked again
TRANSIENT = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.GROUP_ID_NOT_FOUND,
                       KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})


def start_stage(kafka: KafkaConfig, prefix: str, stage: str, state: Path,
                env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One worker of ``stage`` (2 shards), metrics off, its log beside ``state``; ``env``: settings."""
    command = [sys.executable, "-m", "streams", stage, "--topic-prefix", prefix, "--app-id", APP,
               "--worker-id", "w0", "--state-dir", str(state), "--shards", "2"]
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.parent / f"{stage}.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
                                env={**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers,
                                     "STREAMS_METRICS_ENABLED": "false", **(env or {})})


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(60)


def wait_until_running(kafka: KafkaConfig, topics: Topics,
                       stages: tuple[str, ...] = ("url-dedup", "content-seen"),
                       timeout_s: float = 90) -> None:
    """Until the stages' groups are stable (a coordinator's transient answers right after a
    broker's start, and an answer that does not come on a loaded broker, are asked again): a
    crawl's first URL then goes through at once."""
    admin = AdminClient(kafka.admin())
    groups = [topics.group(APP, stage) for stage in stages]

    def stable() -> bool:
        found = admin.describe_consumer_groups(groups, request_timeout=10)
        try:
            return all(found[group].result(timeout=15).state == ConsumerGroupState.STABLE for group in groups)
        except FutureTimeout:  # a busy coordinator's answer is late: ask again
            return False
        except KafkaException as error:  # a broker just started: its coordinator is not there yet
            if error.args[0].code() in TRANSIENT or error.args[0].retriable():
                return False
            raise

    h.wait_for(stable, timeout_s=timeout_s, poll_s=0.3)


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


def items(path: Path) -> list[dict[str, Any]]:
    return read_items([path])


def run_spider(spider: str, proxy: str, work: Path, name: str, settings: dict[str, str],
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``scrapy runspider tests/scrapy_spiders/<spider>.py`` through ``proxy``: items to
    ``<work>/<name>.jsonl``, its log to ``<work>/<name>.log``."""
    command = [sys.executable, "-m", "scrapy", "runspider", str(SPIDERS / f"{spider}.py"),
               "-o", str(work / f"{name}.jsonl"), "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=False"]
    command += [part for key, value in settings.items() for part in ("-s", f"{key}={value}")]
    environment = {**os.environ, **(env or {}), "http_proxy": proxy, "PYTHONPATH": str(PROJECT_ROOT)}
    with open(work / f"{name}.log", "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=work, env=environment)


def on_the_stages(kafka: KafkaConfig, prefix: str, **extra: str) -> tuple[dict[str, str], dict[str, str]]:
    """The settings that put a spider on the stages under ``prefix`` (the README's two lines)."""
    settings = {"SCHEDULER": "streams.integrations.scrapy.Scheduler",
                "SPIDER_MIDDLEWARES": json.dumps({"streams.integrations.scrapy.FetchedPages": 30}),
                "CRAWL_DEDUP_TOPIC_PREFIX": prefix, "CRAWL_DEDUP_APP_ID": APP,
                "CRAWL_DEDUP_IDLE_CLOSE_S": "0.5",
                **extra}
    return settings, {config.BOOTSTRAP_ENV: kafka.bootstrap_servers}


def finish(process: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> str:
    """Wait for a Scrapy process; its log (the assertion names its tail when it failed or hung: a
    hung crawl is killed, so that no process outlives the test, and its log is what tells why)."""
    try:
        code = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{log.name}: still crawling after {timeout_s} s, killed; its log ends:\n"
                             f"{log.read_text()[-4000:]}") from None
    text = log.read_text()
    assert code == 0, text[-4000:]
    return text


def finish_all(crawls: list[tuple[subprocess.Popen[bytes], Path]], timeout_s: float = 300) -> list[str]:
    """:func:`finish` for each (process, log) in turn; when one fails, the others still running are
    killed (:func:`testing.harness.kill_survivors`)."""
    try:
        return [finish(process, log, timeout_s) for process, log in crawls]
    finally:
        h.kill_survivors(process for process, _ in crawls)


STAT = re.compile(r"'([a-z_]+/[a-zA-Z_0-9/]+)': ([0-9.]+)")


def stats(log_text: str) -> dict[str, float]:
    """The numbers of the process's final stats dump."""
    dump = log_text.rpartition("Dumping Scrapy stats:")[2]
    return {key: float(value) for key, value in STAT.findall(dump)}
