"""A worker lost for good, a worker added: how long records wait, and exactly once through both.

    python -m bench.failover_bench [--stages url-dedup,content-seen,revisit] [--scenarios kill,join]
                                   [--standbys 0,1] [--urls 1000000] [--pages 2000]
                                   [--url-rate 200] [--page-rate 20] [--seconds 30] [--event-at 8]

Each row: a stage's state built first (``--urls`` distinct URLs, or ``--pages`` pages of the shared
corpus, through the workers themselves), then a steady load (one record at a time, ``linger.ms``
0): fresh records, and for the URL stage one in five a repeat of a URL of the state, which must not
come out again. ``--event-at`` seconds into the load:

- ``kill``: two workers (worker ids w0 and w1) hold the state; w1 is SIGKILLed and not restarted.
- ``join``: w0 alone holds the state; w1 starts with an empty state directory.

A reader (read_committed) notes when each answer becomes readable (the new URL on new-urls, the
page's verdict on page-verdicts, its revisit update on revisit-updates); a record's wait is that
moment less the moment it was produced (one clock, one machine). Reported per row: the records
written after the event, their longest wait and p99, the same before it; answers lost, doubled, and
repeats let through. ``--standbys`` runs each row with ``[runtime] standby_replicas`` at each value.

Writes ``bench/results/failover.json`` and ``.md``; exits non-zero when a check fails: an answer lost
or doubled, a repeat let through, with a standby a lost worker's records waiting over 10 s (any
stage), a join's over 2 s (URL stage).
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
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.content_bench import corpus_records
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS
from testing.operated import Worker, worker_env

RESULTS = h.PROJECT_ROOT / "bench" / "results"
PARTITIONS = 8
KILL_LIMIT_S = 10.0   # with a standby, any stage
JOIN_LIMIT_S = 2.0    # the URL stage


@dataclass(frozen=True)
class Load:
    stage: str
    source: str     # the topic written (its name without prefix)
    answers: str    # the topic read
    rate: float
    state: list[bytes]   # written before the clock starts, each with a distinct "url"
    fresh: list[bytes]   # the steady load's new records
    repeats: list[bytes]  # records of the state sent again (the URL stage: must not come out)


class Reader(threading.Thread):
    """Notes when each answer of ``topic`` becomes readable (read_committed), from its end now."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        super().__init__(daemon=True)
        self._consumer = Consumer(kafka.consumer(h.fresh_name("failover-reader")))
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [TopicPartition(topic, p, self._consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=10)[1]) for p in partitions]
        self._consumer.assign(ends)
        self.seen: dict[str, list[float]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for message in self._consumer.consume(1000, timeout=0.05):
                if message.error() is None and message.value():
                    now = time.time()
                    url = orjson.loads(message.value())["url"]
                    self.seen.setdefault(url, []).append(now)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self._consumer.close()


def _url(record: bytes) -> str:
    return str(orjson.loads(record)["url"])


def _produce_all(kafka: KafkaConfig, topic: str, values: list[bytes]) -> None:
    producer = Producer(kafka.producer(**{"linger.ms": 50, "compression.type": "lz4"}))
    for value in values:
        while True:
            try:
                producer.produce(topic, value, _url(value).encode())
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise AssertionError(f"state records to {topic} not delivered")


def _produce_steadily(kafka: KafkaConfig, topic: str, values: list[bytes], rate: float,
                      event_at_s: float, event: Any) -> tuple[dict[str, float], float]:
    """Each value at its moment; ``event()`` at ``event_at_s``; when each was produced, and when the
    event was."""
    producer = Producer(kafka.producer(**{"linger.ms": 0}))
    written: dict[str, float] = {}
    began, event_time = time.monotonic(), 0.0
    for number, value in enumerate(values):
        if not event_time and number >= event_at_s * rate:
            event_time = time.time()
            event()
        ahead = began + number / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        written[_url(value)] = time.time()
        producer.produce(topic, value, _url(value).encode())
        producer.poll(0)
    if producer.flush(60):
        raise AssertionError(f"records to {topic} not delivered")
    return written, event_time


def _percentile(sorted_s: list[float], share: float) -> float:
    if not sorted_s:
        return float("nan")
    return sorted_s[min(len(sorted_s), max(1, -(-int(share * 1000) * len(sorted_s) // 1000))) - 1]


def _worker(kafka: KafkaConfig, topics: Topics, load: Load, app_id: str, number: int, work: Path,
            standbys: int) -> Worker:
    env = worker_env(kafka.bootstrap_servers, STREAMS_RUNTIME_STANDBY_REPLICAS=str(standbys))
    return Worker([load.stage, "--topic-prefix", topics.prefix, "--app-id", app_id, "--worker-id",
                   f"w{number}", "--state-dir", str(work / f"{app_id}-w{number}"), "--shards",
                   str(PARTITIONS)], env)


def _settled(kafka: KafkaConfig, topics: Topics, load: Load, app_id: str) -> bool:
    group = topics.group(app_id, load.stage)
    internal = topics.shards(app_id, load.stage)
    return h.caught_up(kafka, group, topics.named(load.source)) and h.caught_up(kafka, group, internal)


def run(kafka: KafkaConfig, load: Load, scenario: str, standbys: int, seconds: float, event_at_s: float,
        work: Path) -> dict[str, Any]:
    """One row: build the state, run the steady load, kill or add a worker on the way."""
    app_id = h.fresh_name("fail")
    topics = Topics(f"{app_id}.")
    source, answers = topics.named(load.source), topics.named(load.answers)
    h.create_topics(kafka, [source, answers], PARTITIONS)
    first = [_worker(kafka, topics, load, app_id, n, work, standbys) for n in ([0, 1] if scenario == "kill"
                                                                               else [0])]
    later: list[Worker] = []
    try:
        for worker in first:
            worker.wait_ready()
        built = time.monotonic()
        _produce_all(kafka, source, load.state)
        h.wait_for(lambda: _settled(kafka, topics, load, app_id), 600, poll_s=1.0)
        build_s = time.monotonic() - built
        time.sleep(3.0 if standbys else 0.5)  # the standbys' last records of the state
        reader = Reader(kafka, answers)
        reader.start()
        count = int(seconds * load.rate)
        steady = _steady(load, count)

        def event() -> None:
            if scenario == "kill":
                first[1].process.kill()
            else:
                later.append(_worker(kafka, topics, load, app_id, 1, work, standbys))

        written, event_time = _produce_steadily(kafka, source, steady, load.rate, event_at_s, event)
        print(f"{scenario} at {time.strftime('%H:%M:%S', time.localtime(event_time))}"
              f".{int(event_time % 1 * 1000):03d}", file=sys.stderr)
        fresh = {_url(value) for value in steady} - {_url(value) for value in load.repeats}
        h.wait_for(lambda: all(url in reader.seen for url in fresh), 180, poll_s=0.5)
        time.sleep(2.0)  # anything doubled
        reader.stop()
    finally:
        for number, worker in enumerate([*first, *later]):
            worker.stop(60)
            (work / f"{app_id}-w{number}-{'first' if worker in first else 'later'}.log").write_text(
                "\n".join(worker.lines) + "\n")
    print(f"logs: {work}/{app_id}-*.log", file=sys.stderr)
    return _row(load, scenario, standbys, written, fresh, reader.seen, event_time, build_s)


def _steady(load: Load, count: int) -> list[bytes]:
    """The steady load: fresh records, with a repeat of the state after every four (if any)."""
    out, fresh, repeats = [], iter(load.fresh), iter(load.repeats)
    for number in range(count):
        pick = next(repeats, None) if load.repeats and number % 5 == 4 else None
        out.append(pick if pick is not None else next(fresh))
    return out


def _row(load: Load, scenario: str, standbys: int, written: dict[str, float], fresh: set[str],
         seen: dict[str, list[float]], event_time: float, build_s: float) -> dict[str, Any]:
    waits = {url: seen[url][0] - written[url] for url in fresh if url in seen and written[url] >= event_time}
    after = sorted(waits.values())
    slowest = max(waits, key=waits.__getitem__) if waits else None
    before = sorted(seen[url][0] - written[url] for url in fresh if url in seen and written[url] < event_time)
    return {"stage": load.stage, "scenario": scenario, "standbys": standbys, "state_records": len(load.state),
            "state_build_s": round(build_s, 1), "rate_per_s": load.rate,
            "records_after": len(after), "max_after_s": round(after[-1], 3) if after else None,
            "slowest_written_s_after": None if slowest is None else round(written[slowest] - event_time, 3),
            "p99_after_s": round(_percentile(after, 0.99), 3),
            "p99_before_s": round(_percentile(before, 0.99), 3),
            "lost": sum(1 for url in fresh if url not in seen),
            "doubled": sum(1 for url in fresh if len(seen.get(url, [])) > 1),
            "repeats_through": sum(1 for url in seen if url not in fresh)}


def _url_load(state: int, rate: float, seconds: float) -> Load:
    def record(n: int, kind: str) -> bytes:
        return orjson.dumps({"url": f"http://site{n % 5000}.example/{kind}/{n}/page", "depth": n % 4})

    count = int(rate * seconds) + 1
    state_records = [record(n, "s") for n in range(state)]
    step = max(1, state // count)
    return Load("url-dedup", "frontier", "new-urls", rate, state_records,
                [record(n, "f") for n in range(count)], state_records[::step][:count])


def _page_loads(pages: int, rate: float, seconds: float, corpus: Path) -> list[Load]:
    count = int(rate * seconds) + 1
    values, _ = corpus_records(pages + count, corpus)
    state, steady = values[:pages], [_distinct(value, n) for n, value in enumerate(values[pages:])]
    return [Load("content-seen", "fetched-pages", "page-verdicts", rate, state, steady, []),
            Load("revisit", "fetched-pages", "revisit-updates", rate, state, steady, [])]


def _distinct(value: bytes, number: int) -> bytes:
    record = orjson.loads(value)
    record["url"] = f"{record['url']}?steady={number}"
    return orjson.dumps(record)


def _markdown(results: dict[str, Any]) -> str:
    lines = ["# A worker lost, a worker added: waits and exactly once", "",
             f"Command: `{results['command']}`  ", f"Machine: {results['machine']}", "",
             "| stage | scenario | standbys | state records | records after | max wait after s | "
             "p99 after s | p99 before s | lost | doubled | repeats through |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["rows"]:
        lines.append(f"| {row['stage']} | {row['scenario']} | {row['standbys']} | {row['state_records']} | "
                     f"{row['records_after']} | {row['max_after_s']} | {row['p99_after_s']} | "
                     f"{row['p99_before_s']} | {row['lost']} | {row['doubled']} | {row['repeats_through']} |")
    lines += ["", "Checks: " + ("all passed" if not results["failed"] else "; ".join(results["failed"])), ""]
    return "\n".join(lines)


def _checks(rows: list[dict[str, Any]]) -> list[str]:
    failed = []
    for row in rows:
        name = f"{row['stage']} {row['scenario']} standbys={row['standbys']} state={row['state_records']}"
        for what in ("lost", "doubled", "repeats_through"):
            if row[what]:
                failed.append(f"{name}: {row[what]} {what}")
        wait = row["max_after_s"] or 0.0
        if row["scenario"] == "kill" and row["standbys"] and wait > KILL_LIMIT_S:
            failed.append(f"{name}: waited {wait} s after the kill (limit {KILL_LIMIT_S} s)")
        if row["scenario"] == "join" and row["stage"] == "url-dedup" and wait > JOIN_LIMIT_S:
            failed.append(f"{name}: waited {wait} s after the join (limit {JOIN_LIMIT_S} s)")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default="url-dedup,content-seen,revisit")
    parser.add_argument("--scenarios", default="kill,join")
    parser.add_argument("--standbys", default="0,1")
    parser.add_argument("--urls", default="1000000", help="URL-stage state sizes, comma-separated")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--url-rate", type=float, default=200.0)
    parser.add_argument("--page-rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--event-at", type=float, default=8.0)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--out", default="failover", help="results file name under bench/results/")
    args = parser.parse_args(argv)
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="failover-"))
    stages = args.stages.split(",")
    loads = [_url_load(int(n), args.url_rate, args.seconds) for n in args.urls.split(",")] \
        if "url-dedup" in stages else []
    if {"content-seen", "revisit"} & set(stages):
        loads += [load for load in _page_loads(args.pages, args.page_rate, args.seconds, args.corpus)
                  if load.stage in stages]
    rows = []
    for load in loads:
        for scenario in args.scenarios.split(","):
            for standbys in (int(n) for n in args.standbys.split(",")):
                row = run(kafka, load, scenario, standbys, args.seconds, args.event_at, work)
                print(json.dumps(row), flush=True)
                rows.append(row)
    command = "python -m bench.failover_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    results: dict[str, Any] = {"command": command.strip(), "rows": rows, "failed": _checks(rows),
                               "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                                          f"{platform.python_version()}, broker {kafka.bootstrap_servers}"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{args.out}.md").write_text(_markdown(results))
    print(_markdown(results))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
