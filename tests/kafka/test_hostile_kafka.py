"""Hostile input through Kafka (issue 7, item 4): every bad record a dead letter with its reason, every
valid one processed, the workers still running at the end with bounded memory.

The mix (:mod:`testing.hostile`) goes to fresh input topics that take 20 MiB records; the three
stages run at once as worker processes, as an operator runs them, and exit when idle. Then, read
committed: each stage's dead letters match the expected reasons one by one (found by the source
partition and offset, with the original bytes' size and prefix), each processed record has exactly
one output carrying its URL, and each worker exited 0 under :data:`RSS_BOUND_MB` of peak memory.
The peak is the kernel's high-water mark of the worker's own memory (``VmHWM``), read while it
runs: ``ru_maxrss`` of a child would count this test process's memory too, as a forked child
inherits its parent's resident set until ``exec``.

The short version (1,000 hostile records per input topic) runs in ``make test``; the long one
(10,000) is marked slow (``make reliability``). A third test shows that an output larger than its
topic takes becomes a dead letter instead of failing the batch for ever.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams import config
from streams.records import DEAD_LETTER_KEY_BYTES, DEFAULT_DEAD_LETTER_VALUE_BYTES
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing import hostile
from testing.cli import PROJECT_ROOT
from testing.hostile import PAGE_STAGE, REVISIT_STAGE, URL_STAGE, Case

RSS_BOUND_MB = 1536
PARTITIONS = 2
INPUT_CONFIG = {"max.message.bytes": str(hostile.INPUT_TOPIC_MAX_BYTES)}


def _create(kafka: KafkaConfig, topics: dict[str, dict[str, str]]) -> None:
    admin = AdminClient(kafka.admin())
    new = [NewTopic(name, PARTITIONS, 1, config=conf) for name, conf in topics.items()]
    futures = admin.create_topics(new)
    for future in futures.values():
        future.result()


def _produce(kafka: KafkaConfig, topic: str, cases: Sequence[Case]) -> dict[tuple[int, int], Case]:
    """Produce every case; return them by (partition, offset), as their dead letters name them."""
    located: dict[tuple[int, int], Case] = {}
    errors: list[str] = []
    producer = Producer(kafka.producer(**{"message.max.bytes": 2 * hostile.INPUT_TOPIC_MAX_BYTES,
                                          "enable.idempotence": True, "linger.ms": 20}))

    def delivered(case: Case) -> Any:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(f"{case.kind}: {error}")
            else:
                located[(message.partition(), message.offset())] = case
        return report

    for case in cases:
        producer.produce(topic, case.value, case.key, on_delivery=delivered(case))
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    return located


def _run_workers(kafka: KafkaConfig, prefix: str, state_dir: Path, stages: Sequence[str],
                 timeout_s: float) -> dict[str, tuple[int, float, float]]:
    """Run the stages at once until they exit idle: stage -> (exit code, peak RSS MB, seconds)."""
    env = {**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers, "STREAMS_METRICS_ENABLED": "false"}
    began = time.monotonic()
    running: dict[str, subprocess.Popen[bytes]] = {}
    for stage in stages:
        with open(state_dir / f"{stage}.log", "wb") as log:
            running[stage] = subprocess.Popen(
                [sys.executable, "-m", "streams", "--log-level", "INFO", stage, "--topic-prefix", prefix,
                 "--app-id", "a", "--worker-id", "w0", "--state-dir", str(state_dir), "--shards", "2",
                 "--idle-exit-s", "5"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=PROJECT_ROOT)
    finished: dict[str, tuple[int, float, float]] = {}
    peak_kb = Counter[str]()
    try:
        while len(finished) < len(running):
            for stage, process in running.items():
                if stage in finished:
                    continue
                peak_kb[stage] = max(peak_kb[stage], _high_water_kb(process.pid))
                if process.poll() is not None:
                    finished[stage] = (process.returncode, peak_kb[stage] / 1024, time.monotonic() - began)
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"workers still running after {timeout_s} s: "
                                   f"{sorted(set(running) - set(finished))}")
            time.sleep(0.2)
    finally:
        for process in running.values():
            if process.returncode is None:
                process.kill()
                process.wait()
    for stage, (code, _, _) in finished.items():
        assert code == 0, (state_dir / f"{stage}.log").read_text()[-3000:]
    return finished


def _high_water_kb(pid: int) -> int:
    """The peak resident set of a running process (0 once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(found[0]) if found else 0


def _records(kafka: KafkaConfig, topic: str) -> list[dict[str, Any]]:
    return [orjson.loads(message.value() or b"{}") for message in read_to_end(kafka, topic, idle_s=1.0)]


def _check_dead_letters(letters: list[dict[str, Any]], stage: str, source: str,
                        located: dict[tuple[int, int], Case]) -> None:
    """One dead letter per bad record, with the expected reason, its offset and its original bytes."""
    mine = [letter for letter in letters if letter["stage"] == stage]
    cases = list(located.values())
    assert Counter(letter["reason"] for letter in mine) == hostile.expected_dead_letters(cases, stage)
    for letter in mine:
        assert letter["source_topic"] == source
        case = located[(letter["source_partition"], letter["source_offset"])]
        assert case.expect[stage] == letter["reason"], (case.kind, letter["reason"], letter["detail"])
        original = case.value or b""
        assert letter["value_size"] == len(original)
        assert letter["value_truncated"] == (len(original) > DEFAULT_DEAD_LETTER_VALUE_BYTES)
        kept = base64.b64decode(letter["value_base64"]) if letter["value_base64"] is not None else None
        assert kept == (None if case.value is None else original[:DEFAULT_DEAD_LETTER_VALUE_BYTES])
        assert letter["key_size"] == len(case.key or b"")
        if case.key is not None:
            assert base64.b64decode(letter["key_base64"]) == case.key[:DEAD_LETTER_KEY_BYTES]


def _check_outputs(kafka: KafkaConfig, topics: Topics, frontier: list[Case], pages: list[Case]) -> None:
    """Exactly one output per processed record, carrying its URL; the page verdicts expected."""
    new_urls = Counter(r["url"] for r in _records(kafka, topics.new_urls))
    assert new_urls == Counter(c.url for c in hostile.processed(frontier, URL_STAGE))
    updates = Counter(r["url"] for r in _records(kafka, topics.revisit_updates))
    assert updates == Counter(c.url for c in hostile.processed(pages, REVISIT_STAGE))
    verdicts = {r["url"]: r for r in _records(kafka, topics.page_verdicts)}
    expected = hostile.processed(pages, PAGE_STAGE)
    assert sorted(verdicts) == sorted(str(c.url) for c in expected)
    for case in expected:
        found = verdicts[str(case.url)]
        said = f"{found['verdict']}:{found['reason']}" if found["reason"] else found["verdict"]
        assert case.verdict is None or said == case.verdict, (case.kind, said)
    unique = {r["url"]: r for r in _records(kafka, topics.unique_pages)}
    assert sorted(unique) == sorted(url for url, r in verdicts.items() if r["verdict"] == "unique")
    for case in expected:
        if case.kind == "page_10mb":  # a 14 MB unique-pages record, its body intact
            assert unique[case.url]["body_base64"] == orjson.loads(case.value or b"{}")["body_base64"]


def _hostile_run(kafka: KafkaConfig, prefix: str, tmp_path: Path, hostile_records: int, valid: int,
                 big: int, timeout_s: float) -> None:
    topics = Topics(prefix)
    began = time.monotonic()
    frontier = hostile.frontier_mix(hostile_records, valid, big)
    pages = hostile.pages_mix(hostile_records, valid, big)
    _create(kafka, {topics.frontier: INPUT_CONFIG, topics.fetched_pages: INPUT_CONFIG})
    frontier_at = _produce(kafka, topics.frontier, frontier)
    pages_at = _produce(kafka, topics.fetched_pages, pages)
    produced_s = time.monotonic() - began
    finished = _run_workers(kafka, prefix, tmp_path, [URL_STAGE, PAGE_STAGE, REVISIT_STAGE], timeout_s)
    size_mb = {name: sum(len(c.value or b"") for c in cases) / 1e6
               for name, cases in (("frontier", frontier), ("pages", pages))}
    print(f"\nhostile mix: {len(frontier)} frontier records ({size_mb['frontier']:.0f} MB), {len(pages)} "
          f"pages ({size_mb['pages']:.0f} MB), generated and produced in {produced_s:.1f} s")
    for stage, (_, rss_mb, seconds) in finished.items():
        print(f"  {stage}: exit 0 after {seconds:.1f} s, peak RSS {rss_mb:.0f} MB")
    letters = _records(kafka, topics.dead_letters)
    _check_dead_letters(letters, URL_STAGE, topics.frontier, frontier_at)
    _check_dead_letters(letters, PAGE_STAGE, topics.fetched_pages, pages_at)
    _check_dead_letters(letters, REVISIT_STAGE, topics.fetched_pages, pages_at)
    _check_outputs(kafka, topics, frontier, pages)
    for stage, (_, rss_mb, _) in finished.items():
        assert rss_mb < RSS_BOUND_MB, f"{stage} peaked at {rss_mb:.0f} MB"


def test_hostile_input_short(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    _hostile_run(kafka, prefix, tmp_path, hostile_records=1000, valid=300, big=1, timeout_s=300)


@pytest.mark.slow
def test_hostile_input_long(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    _hostile_run(kafka, prefix, tmp_path, hostile_records=10_000, valid=2000, big=3, timeout_s=1800)


def test_an_output_over_its_topic_limit_is_a_dead_letter_not_a_poison_pill(
        kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """Output topics that already exist with the broker's 1 MB default take a 3 MB page or URL record
    through the stage's own topics (created larger) but not out: the record becomes a dead letter
    ``output_too_large`` and the worker goes on (it used to fail the batch and exit, again and again).
    The URL worker owns every shard here, so it decides the URL at routing and the letter names the
    frontier record. The page worker decides the page on the local path (decision 0010) or, before
    its shards vouched for it, by a decide record: either way the letter names and carries the
    page's input record, so the page can be replayed from it."""
    topics = Topics(prefix)
    _create(kafka, {topics.frontier: INPUT_CONFIG, topics.fetched_pages: INPUT_CONFIG,
                    topics.new_urls: {}, topics.unique_pages: {}})
    padding = "p" * (3 * hostile.MIB)
    urls = [orjson.dumps({"url": "http://small.example/1"}),
            orjson.dumps({"url": "http://big.example/", "padding": padding}),
            orjson.dumps({"url": "http://small.example/2"})]
    pages = [orjson.dumps({"url": f"http://small.example/{i}", "body": f"<p>page number {i} here</p>"})
             for i in range(2)]
    pages.insert(1, orjson.dumps({"url": "http://big.example/", "body": "<p>" + " ".join(
        f"w{i}" for i in range(500_000)) + "</p>"}))
    _produce(kafka, topics.frontier, [Case("x", value, {}) for value in urls])
    _produce(kafka, topics.fetched_pages, [Case("x", value, {}) for value in pages])
    _run_workers(kafka, prefix, tmp_path, [URL_STAGE, PAGE_STAGE], timeout_s=180)

    letters = _records(kafka, topics.dead_letters)
    by_stage = {letter["stage"]: letter for letter in letters}
    assert len(letters) == 2 and set(by_stage) == {URL_STAGE, PAGE_STAGE}, letters
    assert all(d["reason"] == "output_too_large" and "limit" in d["detail"] for d in letters)
    assert by_stage[URL_STAGE]["source_topic"] == topics.frontier
    page = by_stage[PAGE_STAGE]
    assert page["source_topic"] == topics.fetched_pages, page
    assert page["value_size"] == len(pages[1]) and page["value_truncated"]
    assert pages[1].startswith(base64.b64decode(page["value_base64"]))
    assert sorted(r["url"] for r in _records(kafka, topics.new_urls)) == [
        "http://small.example/1", "http://small.example/2"]
    assert sorted(r["url"] for r in _records(kafka, topics.page_verdicts)) == [
        "http://small.example/0", "http://small.example/1"]
