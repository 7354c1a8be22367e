"""Latency at a steady light load (issue 39): from a record's write to its answer readable.

    python -m bench.latency_bench [--seconds 30] [--page-rate 20] [--url-rate 200]
                                  [--workers 1,2] [--corpus ../shared/corpus]

For each stage a producer writes records at a steady rate (one at a time, ``linger.ms`` 0): the
page stage gets real HTML pages from the shared corpus (bench/content_bench.py's records: its
pages, then again from mirror hosts), the URL stage distinct new URLs. A reader
(``read_committed``, polling) notes when each answer becomes readable: the page's verdict on
``page-verdicts``, the URL on ``new-urls``. The latency of a record is that moment less the moment
it was produced (one clock: everything runs on this machine). The stage runs with 1 and with 2
workers (``--workers``), default settings, after the group has settled and a warm-up of
``--warmup`` seconds whose records are not counted.

The floor, measured in the same run at the same rate on the same records: one raw Kafka hop, a
process polling its input every 10 ms (``consume`` with a 10 ms timeout) and producing each record
on to the output, **transactionally like the stage** (each poll's records, produced and their
offsets sent, in one transaction; ``read_committed`` on both sides): what any exactly-once hop
costs on this broker. The page stage's answer takes several such hops (route, then the shard
processors), so its floor is one hop, not its ideal.

Writes ``bench/results/latency.json`` and ``.md``; exits non-zero when a check fails: an answer
missing or doubled, or a p99 over issue 39's acceptance (page verdicts 400 ms with one worker,
600 ms with two; new URLs 200 ms with one worker, 300 ms with two).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, ConsumerGroupState, Producer
from confluent_kafka.admin import AdminClient

from bench.content_bench import corpus_records
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS
from testing.workers import Worker

RESULTS = h.PROJECT_ROOT / "bench" / "results"
PARTITIONS = 8
PYTHON = sys.executable
# issue 39's acceptance: p99 in ms by (stage, workers)
P99_LIMIT_MS = {("content-seen", 1): 400, ("content-seen", 2): 600,
                ("url-dedup", 1): 200, ("url-dedup", 2): 300}


@dataclass(frozen=True)
class Load:
    stage: str        # the registry's name
    source: str       # the topic written
    answers: str      # the topic read
    rate: float       # records per second
    values: list[bytes]  # each with a distinct "url", the join key of record and answer


def _percentile(sorted_ms: list[float], share: float) -> float:
    """Nearest rank."""
    if not sorted_ms:
        return float("nan")
    rank = max(1, -(-int(share * 1000) * len(sorted_ms) // 1000))
    return sorted_ms[min(rank, len(sorted_ms)) - 1]


class _Reader(threading.Thread):
    """Notes the moment each answer is readable (``read_committed``), by its ``url``."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        super().__init__(daemon=True, name="latency-reader")
        # The reader is the instrument: it must not add a fetch's long poll to what it measures.
        self._consumer = Consumer(kafka.consumer(h.fresh_name("latency-reader"), **{"fetch.wait.max.ms": 10}))
        self.assigned = threading.Event()
        self._consumer.subscribe([topic], on_assign=lambda _consumer, _partitions: self.assigned.set())
        self.seen: dict[str, list[float]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            message = self._consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            at = time.time()
            url = orjson.loads(message.value() or b"{}").get("url", "")
            self.seen.setdefault(url, []).append(at)

    def ready(self) -> bool:
        return self.assigned.is_set()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self._consumer.close()


def _produce_steadily(kafka: KafkaConfig, topic: str, values: list[bytes], rate: float) -> dict[str, float]:
    """Each value at its moment (``rate`` a second), delivered at once; when each was produced."""
    producer = Producer(kafka.producer(**{"linger.ms": 0}))
    written: dict[str, float] = {}
    began = time.monotonic()
    for number, value in enumerate(values):
        ahead = began + number / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        url = orjson.loads(value)["url"]
        written[url] = time.time()
        producer.produce(topic, value, url.encode())
        producer.poll(0)
    if producer.flush(60):
        raise AssertionError(f"records to {topic} not delivered")
    return written


def _group_settled(admin: AdminClient, group: str, members: int) -> bool:
    try:
        found = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # noqa: BLE001 - the group is not there yet
        return False
    return found.state == ConsumerGroupState.STABLE and len(found.members) == members


def _worker(kafka: KafkaConfig, topics: Topics, load: Load, app_id: str, number: int, work: Path,
            tree: Path) -> Worker:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
           "STREAMS_METRICS_ENABLED": "false"}  # two workers would take one port
    python = PYTHON if tree == h.PROJECT_ROOT else str(tree / ".venv" / "bin" / "python")
    command = ["env", f"--chdir={tree}", python, "-m", "streams", load.stage, "--topic-prefix",
               topics.prefix, "--app-id", app_id, "--worker-id", f"w{number}",
               "--state-dir", str(work / f"{app_id}-w{number}"), "--shards", str(PARTITIONS)]
    return Worker(command, env, work / f"{app_id}-w{number}.log", f"{app_id}-w{number}", load.stage)


def _passthrough(kafka: KafkaConfig, topics: Topics, load: Load, app_id: str, work: Path) -> Worker:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}
    command = [PYTHON, "-m", "bench.latency_bench", "--passthrough", load.source, load.answers, app_id]
    return Worker(command, env, work / f"{app_id}.log", app_id, "passthrough")


def passthrough(source: str, target: str, group: str) -> None:
    """One raw transactional hop: poll every 10 ms, each poll's records on in one transaction."""
    kafka = h.broker()
    consumer = Consumer(kafka.consumer(group))
    producer = Producer(kafka.transactional_producer(f"{group}-tx", 30.0))
    producer.init_transactions()
    consumer.subscribe([source])
    print(f"passthrough {source} -> {target}: polling", flush=True)
    while True:
        messages = [m for m in consumer.consume(1000, timeout=0.01) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(target, message.value(), message.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata())
        producer.commit_transaction()


def run(kafka: KafkaConfig, load: Load, workers: int, seconds: float, warmup_s: float,
        work: Path, tree: Path = h.PROJECT_ROOT) -> dict[str, Any]:
    """One row: ``workers`` stage workers (0: the raw passthrough) at ``load.rate``."""
    app_id = h.fresh_name("lat")
    topics = Topics(f"{app_id}.")
    source, answers = topics.named(load.source), topics.named(load.answers)
    h.create_topics(kafka, [source, answers], PARTITIONS)
    routed = Load(load.stage, source, answers, load.rate, load.values)
    running = ([_passthrough(kafka, topics, routed, app_id, work)] if workers == 0 else
               [_worker(kafka, topics, routed, app_id, n, work, tree) for n in range(workers)])
    group = app_id if workers == 0 else topics.group(app_id, load.stage)
    reader = _Reader(kafka, answers)
    reader.start()
    admin = AdminClient(kafka.admin())
    try:
        for worker in running:
            worker.start()
        h.wait_for(lambda: _group_settled(admin, group, len(running)) and reader.ready()
                   and all(worker.alive() for worker in running), 120, poll_s=0.2)
        if workers:
            h.wait_for(lambda: all(worker.assigned() for worker in running), 60, poll_s=0.2)
        warm = int(warmup_s * load.rate)
        total = warm + int(seconds * load.rate)
        values = (load.values * (total // len(load.values) + 1))[:total]
        values = [_distinct(value, number) for number, value in enumerate(values)]
        written = _produce_steadily(kafka, source, values, load.rate)
        counted = list(written)[warm:]
        h.wait_for(lambda: all(url in reader.seen for url in counted), 120, poll_s=0.2)
        time.sleep(1.0)  # anything doubled
        if not all(worker.alive() for worker in running):
            raise AssertionError(f"a worker exited; see {work}")
    finally:
        reader.stop()
        for worker in running:
            if worker.alive():
                try:
                    worker.stop(60)
                finally:
                    worker.kill()
    waits = sorted((reader.seen[url][0] - written[url]) * 1000 for url in counted)
    doubled = sum(1 for url in written if len(reader.seen.get(url, [])) > 1)
    name = "raw hop (transactional, polling every 10 ms)" if workers == 0 else \
        f"{load.stage}, {workers} worker{'s' if workers > 1 else ''}"
    return {"name": name, "stage": load.stage, "workers": workers, "rate_per_s": load.rate,
            "records": len(counted), "doubled": doubled,
            "p50_ms": round(_percentile(waits, 0.50), 1), "p95_ms": round(_percentile(waits, 0.95), 1),
            "p99_ms": round(_percentile(waits, 0.99), 1), "max_ms": round(waits[-1], 1)}


def _distinct(value: bytes, number: int) -> bytes:
    """The record with a URL of its own (the join key), the rest unchanged."""
    record = orjson.loads(value)
    record["url"] = f"{record['url']}?n={number}"
    return orjson.dumps(record)


def _url_values(count: int) -> list[bytes]:
    return [orjson.dumps({"url": f"http://site{n % 97}.example/path/{n}/page", "depth": n % 4})
            for n in range(count)]


def _markdown(results: dict[str, Any]) -> str:
    lines = ["# Latency at a steady light load (issue 39)", "",
             f"Command: `{results['command']}`  ", f"Machine: {results['machine']}", "",
             "From a record's write to its answer readable with read_committed (the page's verdict on "
             "page-verdicts, the URL on new-urls), after a warm-up; the floor is one raw transactional "
             "Kafka hop (a process polling every 10 ms, producing each poll's records on in one "
             "transaction) at the same rate on the same records, in the same run.", "",
             "| stage | load | workers | records | p50 ms | p95 ms | p99 ms | max ms | p99 limit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["rows"]:
        limit = P99_LIMIT_MS.get((row["stage"], row["workers"]))
        workers = "floor: 1 raw hop" if row["workers"] == 0 else str(row["workers"])
        lines.append(f"| {row['stage']} | {row['rate_per_s']:g}/s | {workers} | {row['records']} | "
                     f"{row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} | {row['max_ms']} | "
                     f"{limit if limit else ''} |")
    lines += ["", "Checks: " + ("all passed" if not results["failed"] else "; ".join(results["failed"])), ""]
    return "\n".join(lines)


def _checks(results: dict[str, Any]) -> list[str]:
    failed = []
    for row in results["rows"]:
        if row["doubled"]:
            failed.append(f"{row['name']}: {row['doubled']} answers doubled")
        limit = P99_LIMIT_MS.get((row["stage"], row["workers"]))
        if limit is not None and row["p99_ms"] > limit:
            failed.append(f"{row['name']}: p99 {row['p99_ms']} ms over {limit} ms")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--page-rate", type=float, default=20.0)
    parser.add_argument("--url-rate", type=float, default=200.0)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--stages", default="content-seen,url-dedup")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--tree", type=Path, default=h.PROJECT_ROOT,
                        help="run the stage workers of this checkout (built with make), for an A/B")
    parser.add_argument("--passthrough", nargs=3, metavar=("SOURCE", "TARGET", "GROUP"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.passthrough:
        passthrough(*args.passthrough)
        return 0
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="latency-"))
    pages, _ = corpus_records(int(args.page_rate * (args.seconds + args.warmup)), args.corpus)
    loads = {"content-seen": Load("content-seen", "fetched-pages", "page-verdicts", args.page_rate, pages),
             "url-dedup": Load("url-dedup", "frontier", "new-urls", args.url_rate,
                               _url_values(int(args.url_rate * (args.seconds + args.warmup))))}
    rows = []
    for stage in args.stages.split(","):
        for workers in [0, *(int(n) for n in args.workers.split(","))]:
            row = run(kafka, loads[stage], workers, args.seconds, args.warmup, work, args.tree.resolve())
            print(json.dumps(row), flush=True)
            rows.append(row)
    command = "python -m bench.latency_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    results: dict[str, Any] = {"command": command.strip(), "rows": rows,
                               "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                                          f"{platform.python_version()}, broker {kafka.bootstrap_servers}"}
    results["failed"] = _checks(results)
    if args.tree.resolve() != h.PROJECT_ROOT:
        print(_markdown(results))  # another checkout's figures: not this tree's results
        return 1 if results["failed"] else 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latency.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "latency.md").write_text(_markdown(results))
    print(_markdown(results))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
