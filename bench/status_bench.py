"""How long ``crawl-dedup status`` takes to answer, with two URL workers (issue 47: p99 <= 50 ms).

    python -m bench.status_bench [--urls 200000] [--queries 2000] [--workers 2] [--load-rate 2000]

Two URL-stage workers (default settings, 8 shards, metrics on any free port) take a frontier of
``--urls`` distinct URLs; then ``--queries`` URLs are asked, half seen and half never seen, in a
random order, while a producer keeps writing ``--load-rate`` new frontier URLs a second (0: the
workers idle). Three ways of asking, each timed per query:

- ``command``: what one ``crawl-dedup status URL`` does once its interpreter is up: a new client,
  the owners read from the cache file the last command left (:class:`streams.ops.owners.OwnersCache`),
  the owner asked over HTTP;
- ``cold``: the same with no cache (``--no-cache``, or the first command after the owners moved):
  a connection to the cluster, every stage's group described, the owner asked;
- ``client``: one client asking one query after another (a tool that asks many).

The interpreter's start (``python -m streams status``) is timed apart, for a few processes: it is
the same for every command and not the stage's answer.

Writes ``bench/results/status.json`` and ``.md``; exits non-zero when an answer is wrong (a seen URL
not seen, or the reverse), or the command's p99 is over 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from streams.config import BOOTSTRAP_ENV
from streams.ops.status_command import StatusClient
from streams.runtime.kafka_io import KafkaConfig
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.topics import Topics
from testing import harness as h
from testing.operated import Worker, worker_env

RESULTS = h.PROJECT_ROOT / "bench" / "results"
WAYS = ("command", "cold", "client")
PARTITIONS = 8
P99_LIMIT_MS = 50.0
APP = "app"


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _summary(values_ms: list[float]) -> dict[str, float]:
    return {"queries": len(values_ms), "p50_ms": round(_percentile(values_ms, 0.5), 2),
            "p95_ms": round(_percentile(values_ms, 0.95), 2),
            "p99_ms": round(_percentile(values_ms, 0.99), 2),
            "max_ms": round(max(values_ms), 2), "mean_ms": round(statistics.fmean(values_ms), 2)}


class Load(threading.Thread):
    """New frontier URLs at a steady rate, until stopped."""

    def __init__(self, kafka: KafkaConfig, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self._producer = Producer(kafka.producer(**{"linger.ms": 5}))
        self._topic, self._rate = topic, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        began = time.monotonic()
        while not self.stopping.is_set() and self._rate:
            due = int((time.monotonic() - began) * self._rate)
            while self.sent < due:
                url = f"http://load{self.sent % 97}.example/{self.sent}"
                self._producer.produce(self._topic, orjson.dumps({"url": url}))
                self.sent += 1
            self._producer.poll(0)
            time.sleep(0.01)
        self._producer.flush(30)


def _ask(client: StatusClient, url: str) -> tuple[float, dict[str, Any]]:
    began = time.perf_counter()
    found = client.ask(url)
    return (time.perf_counter() - began) * 1000, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--load-rate", type=int, default=2_000, help="new frontier URLs a second meanwhile")
    parser.add_argument("--processes", type=int, default=10, help="whole `status` processes timed apart")
    args = parser.parse_args()
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="status-bench-"))
    prefix = f"{h.fresh_name('status')}."
    topics = Topics(prefix)
    h.create_topics(kafka, [topics.frontier], PARTITIONS)
    urls = [f"http://h{n % 1000}.example/page/{n}" for n in range(args.urls)]
    h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": url})) for url in urls))
    env = worker_env(kafka.bootstrap_servers)
    workers = [Worker(["url-dedup", "--topic-prefix", prefix, "--app-id", APP, "--worker-id", f"w{n}",
                       "--state-dir", str(work / f"w{n}")], env) for n in range(args.workers)]
    load = Load(kafka, topics.frontier, args.load_rate)
    try:
        for worker in workers:
            worker.wait_ready(300)
        group = topics.group(APP, "url-dedup")
        h.wait_for(lambda: h.caught_up(kafka, group, topics.frontier), 600)
        load.start()
        rng = random.Random(7)
        asked = [(url, True) for url in rng.sample(urls, args.queries // 2)]
        asked += [(f"http://never.example/{n}", False) for n in range(args.queries - len(asked))]
        rng.shuffle(asked)
        settings = {"url-dedup": UrlDedupSettings()}
        cache = work / "status-owners.json"
        long_lived = StatusClient(kafka, topics, APP, settings)
        timings: dict[str, list[float]] = {way: [] for way in WAYS}
        wrong: list[str] = []
        owners: set[str] = set()
        for url, seen in asked:
            for way in WAYS:
                kept = cache if way == "command" else None
                client = (long_lived if way == "client"
                          else StatusClient(kafka, topics, APP, settings, cache=kept))
                took_ms, found = _ask(client, url)
                timings[way].append(took_ms)
                owners.add(str(found.get("worker")))
                if found.get("seen") is not seen or "error" in found:
                    wrong.append(f"{url}: {found}")
        processes = _processes(kafka, prefix, [url for url, _ in asked[:args.processes]])
    finally:
        load.stopping.set()
        for worker in workers:
            worker.stop(120)
    result = {"urls": args.urls, "workers": args.workers, "load_rate": args.load_rate,
              "load_sent": load.sent,
              "owners_answering": sorted(owners), "wrong": wrong[:10], "wrong_count": len(wrong),
              **{way: _summary(values) for way, values in timings.items()}, "process": processes,
              "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "load_average": os.getloadavg()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "status.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "status.md").write_text(_markdown(result, " ".join(sys.argv[1:])))
    print(json.dumps(result, indent=2))
    failed = bool(wrong) or result["command"]["p99_ms"] > P99_LIMIT_MS or len(owners) < args.workers
    return 1 if failed else 0


def _processes(kafka: KafkaConfig, prefix: str, urls: list[str]) -> dict[str, float]:
    """Whole ``python -m streams status URL --json`` processes: wall time, interpreter start included."""
    env = {**os.environ, BOOTSTRAP_ENV: kafka.bootstrap_servers}
    took: list[float] = []
    for url in urls:
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "streams", "status", url, "--json", "--topic-prefix",
                               prefix, "--app-id", APP], env=env, capture_output=True, check=False)
        took.append((time.perf_counter() - began) * 1000)
        assert done.returncode == 0, done.stderr.decode()
    return {"processes": len(took), "median_ms": round(statistics.median(took), 1),
            "max_ms": round(max(took), 1)}


def _markdown(result: dict[str, Any], argv: str) -> str:
    rows = "\n".join(f"| {way} | {r['queries']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
                     f"{r['max_ms']} |" for way, r in ((way, result[way]) for way in WAYS))
    process = result["process"]
    return (f"# `crawl-dedup status` latency\n\n`python -m bench.status_bench {argv}`: {result['workers']} "
            f"URL workers holding {result['urls']:,} URLs, {result['load_rate']} new frontier URLs a second "
            f"meanwhile; half the URLs asked seen, half never seen; load average "
            f"{', '.join(f'{x:.1f}' for x in result['host']['load_average'])} at the end (a shared "
            "2-core machine: absolute figures are noisy).\n\n"
            "| client | queries | p50 ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n"
            f"{rows}\n\ncommand: a new client per query, as one `status` command once started (the owners "
            "from the cache file the last command left, the owner asked over HTTP); cold: the same without "
            "the cache (connect, describe every stage's group, ask the owner); client: one client asking "
            "query after query. "
            f"A whole `python -m streams status URL --json` process took {process['median_ms']} ms "
            f"(median of {process['processes']}, max {process['max_ms']}), most of it the interpreter "
            f"and imports. Wrong answers: {result['wrong_count']}.\n")


if __name__ == "__main__":
    raise SystemExit(main())
