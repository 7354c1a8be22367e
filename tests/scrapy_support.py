"""Running Scrapy processes on the stages in tests: a local site to compare behaviours on, the stage
workers, ``scrapy runspider``, and reading what came out (items, stats, log).

The site (:class:`BehaviourSite`) answers every host on 127.0.0.1 as the crawlers' HTTP proxy (the
``http_proxy`` variable Scrapy's HttpProxyMiddleware reads), so no name needs to resolve; its
access log (method, URL with dot segments resolved, headers, body) is the ground truth of what a
crawl fetched. Routes: ``echo*.test`` answers any method with the request it got, as JSON;
``a-gate.test/`` answers once :attr:`BehaviourSite.gate` is set (a slow page that holds a crawl's
only download slot); :attr:`BehaviourSite.redirects` maps a URL to (status, Location); any other
URL is a small HTML page.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams import config
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SPIDERS = Path(__file__).resolve().parent / "scrapy_spiders"
APP = "app"
TRANSIENT = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.GROUP_ID_NOT_FOUND,
                       KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})


@dataclass(frozen=True)
class Hit:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


class BehaviourSite:
    def __init__(self) -> None:
        self.log: list[Hit] = []
        self.redirects: dict[str, tuple[int, str]] = {}
        self.gate = threading.Event()
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                site.answer(self)

            def do_POST(self) -> None:  # noqa: N802
                site.answer(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> BehaviourSite:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        host = (parts.hostname or "").lower()
        query = f"?{parts.query}" if parts.query else ""
        url = f"http://{host}{_without_dot_segments(parts.path or '/')}{query}"
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in handler.headers.items()}
        with self._lock:
            self.log.append(Hit(handler.command, url, headers, body))
        status, extra, content = 200, {"Content-Type": "text/html; charset=utf-8"}, b""
        if url in self.redirects:
            status, location = self.redirects[url]
            extra = {"Location": location}
        elif host.startswith("echo"):
            content = json.dumps({"method": handler.command, "url": url, "headers": headers,
                                  "body": body.decode("latin-1")}, sort_keys=True).encode()
            extra = {"Content-Type": "application/json"}
        else:
            if host == "a-gate.test":
                self.gate.wait(60)
            content = f"<html><head><title>{url}</title></head><body><p>{url}</p></body></html>".encode()
        handler.send_response(status)
        for name, value in {**extra, "Content-Length": str(len(content))}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(content)

    def fetched(self, method: str = "GET") -> list[str]:
        with self._lock:
            return [hit.url for hit in self.log if hit.method == method]


def _without_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, as servers apply it to a request's path."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out)


def start_stage(kafka: KafkaConfig, prefix: str, stage: str, state: Path) -> subprocess.Popen[bytes]:
    """One worker of ``stage`` (2 shards), metrics off, its log beside ``state``."""
    command = [sys.executable, "-m", "streams", stage, "--topic-prefix", prefix, "--app-id", APP,
               "--worker-id", "w0", "--state-dir", str(state), "--shards", "2"]
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.parent / f"{stage}.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
                                env={**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers,
                                     "STREAMS_METRICS_ENABLED": "false"})


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(60)


def wait_until_running(kafka: KafkaConfig, topics: Topics, stages: tuple[str, ...],
                       timeout_s: float = 90) -> None:
    """Until the stages' groups are stable (a coordinator's transient answers right after a
    broker's start are asked again): a crawl's first URL then goes through at once."""
    admin = AdminClient(kafka.admin())
    groups = [topics.group(APP, stage) for stage in stages]
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.describe_consumer_groups(groups)
        try:
            if all(found[group].result(timeout=10).state == ConsumerGroupState.STABLE for group in groups):
                return
        except KafkaException as error:
            if error.args[0].code() not in TRANSIENT and not error.args[0].retriable():
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"the stages' groups {groups} not stable in {timeout_s} s")
        time.sleep(0.3)


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
    """Wait for a Scrapy process; its log (the assertion names its tail when it failed)."""
    code = process.wait(timeout_s)
    text = log.read_text()
    assert code == 0, text[-4000:]
    return text


def items(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


STAT = re.compile(r"'([a-z_]+/[a-zA-Z_0-9/]+)': ([0-9.]+)")


def stats(log_text: str) -> dict[str, float]:
    """The numbers of the process's final stats dump."""
    dump = log_text.rpartition("Dumping Scrapy stats:")[2]
    return {key: float(value) for key, value in STAT.findall(dump)}


def wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met in {timeout_s} s")
        time.sleep(poll_s)


@contextmanager
def released_when(condition: Callable[[], bool], gate: threading.Event,
                  settle_s: float = 0.5) -> Iterator[None]:
    """Set ``gate`` once ``condition`` holds (polled in a thread), ``settle_s`` later."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and not condition():
            time.sleep(0.05)
        time.sleep(settle_s)
        gate.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
