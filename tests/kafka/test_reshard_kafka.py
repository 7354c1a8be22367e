"""Resharding against the real broker: 4 shards, 8 with three workers, then 2, while input keeps
arriving; outputs read read_committed equal the offline run's. And a reshard killed half-way.

Each stage's scenario (:func:`_scenario`): a backlog is written, two workers run on 4 shards while a
writer adds input in small chunks; the workers are stopped and drained (``--drain``: restarted under
their ids, they exit once idle), ``reshard --shards 8`` runs while the writer goes on; three workers
run on 8 shards, are drained, ``reshard --shards 2``; the writer finishes and one worker on 2 shards
takes the rest. The writer never stops during the reshards: the input they leave waits in the input
topics.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from streams import config, records
from streams.dev import simweb
from streams.runtime.generations import read_generation
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.runtime.partitioner import partition_for
from streams.topics import Topics
from testing import harness as h
from testing.cli import PROJECT_ROOT, run_cli
from testing.verdicts import check_against_plan, offline_verdicts

INPUT_PARTITIONS = 4
APP = "app"


class Writer(threading.Thread):
    """Writes ``chunks`` to ``topic`` one every ``pause_s``, in the background; the last third only
    once :meth:`release` is called (so input is still to come after a step, however slow the
    machine makes it)."""

    def __init__(self, kafka: KafkaConfig, topic: str, chunks: Sequence[list[tuple[bytes, bytes]]],
                 pause_s: float) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.chunks, self.pause_s = kafka, topic, chunks, pause_s
        self.written = 0
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def run(self) -> None:
        held_from = len(self.chunks) - len(self.chunks) // 3
        for index, chunk in enumerate(self.chunks):
            if index == held_from:
                self._released.wait(600)
            self.written += h.produce(self.kafka, self.topic, chunk)
            time.sleep(self.pause_s)


def _command(kafka: KafkaConfig, prefix: str, *args: str) -> list[str]:
    return ["env", f"{config.BOOTSTRAP_ENV}={kafka.bootstrap_servers}", sys.executable, "-m", "streams",
            *args, "--topic-prefix", prefix, "--app-id", APP]


def _workers(kafka: KafkaConfig, prefix: str, stage: str, state: Path, shards: int, count: int,
             *extra: str) -> list[subprocess.Popen[bytes]]:
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out = []
    for number in range(count):
        command = _command(kafka, prefix, stage, "--worker-id", f"w{number}", "--state-dir",
                           str(state / f"w{number}"), "--shards", str(shards), "--batch-max-messages", "200",
                           *extra)
        with open(logs / f"w{number}.log", "ab") as log:
            out.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT))
    return out


def _finish(workers: list[subprocess.Popen[bytes]], state: Path, timeout_s: float = 240) -> None:
    """Wait for each worker to exit 0; when one does not, the others are killed
    (:func:`testing.harness.kill_survivors`)."""
    try:
        for number, worker in enumerate(workers):
            log = (state / "logs").joinpath(f"w{number}.log")
            assert worker.wait(timeout_s) == 0, log.read_text()[-3000:]
    finally:
        h.kill_survivors(workers)


def _stop_and_drain(kafka: KafkaConfig, prefix: str, stage: str, state: Path, shards: int, count: int,
                    running: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the workers, restart them under their ids with --drain, wait for them to exit."""
    for worker in running:
        worker.send_signal(signal.SIGTERM)
    _finish(running, state)
    _drain(kafka, prefix, stage, state, shards, count)


def _reshard(kafka: KafkaConfig, prefix: str, stage: str, shards: int,
             drain_again: Callable[[], None] | None = None) -> str:
    """``reshard --shards``; where it refuses because pages still wait in the old shards (drained
    workers that went idle first, on a loaded machine), what its message tells an operator to do,
    once: drain again (``drain_again``), then reshard."""
    command = _command(kafka, prefix, "reshard", "--stage", stage, "--shards", str(shards))
    result = subprocess.run(command, capture_output=True, timeout=300, cwd=PROJECT_ROOT, check=False)
    if drain_again is not None and b"still waiting for their verdict" in result.stderr:
        print("reshard refused: pages still waiting after the drain; drained again", flush=True)
        drain_again()
        result = subprocess.run(command, capture_output=True, timeout=300, cwd=PROJECT_ROOT, check=False)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stdout.decode()


def _drain(kafka: KafkaConfig, prefix: str, stage: str, state: Path, shards: int, count: int) -> None:
    _finish(_workers(kafka, prefix, stage, state, shards, count, "--drain", "--idle-exit-s", "4"), state)


def _scenario(kafka: KafkaConfig, prefix: str, stage: str, topic: str, backlog: list[tuple[bytes, bytes]],
              live: list[tuple[bytes, bytes]], progress: Callable[[], int], tmp_path: Path) -> list[str]:
    """4 shards (2 workers) -> 8 (3 workers) -> 2 (1 worker), the writer writing ``live`` throughout;
    returns the reshards' reports."""
    h.create_topics(kafka, [topic], INPUT_PARTITIONS)
    h.produce(kafka, topic, backlog)
    state = tmp_path / "state"
    size = max(1, len(live) // 30)  # 15 s of input, the last third held until the first reshard is done
    chunks = [live[index:index + size] for index in range(0, len(live), size)]
    writer = Writer(kafka, topic, chunks, pause_s=0.5)
    running = _workers(kafka, prefix, stage, state, 4, 2)
    h.wait_for(lambda: progress() >= len(backlog), timeout_s=240)
    writer.start()
    _stop_and_drain(kafka, prefix, stage, state, 4, 2, running)
    reports = [_reshard(kafka, prefix, stage, 8, lambda: _drain(kafka, prefix, stage, state, 4, 2))]
    assert writer.is_alive(), "the input stopped before the first reshard: the test proves less than it says"
    drained = progress()
    writer.release()
    running = _workers(kafka, prefix, stage, state, 8, 3)
    # Some of the input written since, decided by the 3 workers, before they are stopped.
    h.wait_for(lambda: progress() >= drained + len(live) // 6, timeout_s=240)
    _stop_and_drain(kafka, prefix, stage, state, 8, 3, running)
    reports.append(_reshard(kafka, prefix, stage, 2, lambda: _drain(kafka, prefix, stage, state, 8, 3)))
    writer.join(300)
    _finish(_workers(kafka, prefix, stage, state, 2, 1, "--idle-exit-s", "8"), state)
    generation = read_generation(kafka, Topics(prefix).generations_topic(APP, stage))
    assert generation is not None
    assert (generation.number, generation.shards, generation.moving) == (2, 2, False)
    return reports


def _outputs(kafka: KafkaConfig, topic: str) -> list[dict[str, Any]]:
    return [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topic)]


def _frontier(distinct: int, total: int, seed: int) -> list[tuple[bytes, bytes]]:
    """URLs with repeats and spellings browsers merge (case, default port, fragment, dot segments)."""
    rng = random.Random(seed)
    spellings = ("https://Host{h}.example/p/{n}", "https://host{h}.example:443/p/{n}#top",
                 "https://host{h}.example/x/../p/{n}", "HTTPS://HOST{h}.EXAMPLE/p/{n}")
    out = []
    for index in range(total):
        number = index if index < distinct else rng.randrange(distinct)
        url = rng.choice(spellings).format(h=number % 37, n=number)
        out.append((url.encode(), orjson.dumps({"url": url})))
    rng.shuffle(out)
    return out


def test_url_dedup_reshards_up_and_down_while_urls_arrive(kafka: KafkaConfig, prefix: str,
                                                          tmp_path: Path) -> None:
    topics = Topics(prefix)
    frontier = _frontier(distinct=3000, total=9000, seed=5)
    backlog, live = frontier[:3000], frontier[3000:]
    group = topics.group(APP, "url-dedup")
    reports = _scenario(kafka, prefix, "url-dedup", topics.frontier, backlog, live,
                        lambda: h.committed_total(kafka, group, topics.frontier, INPUT_PARTITIONS), tmp_path)
    assert "generation 0 (4 shards) -> generation 1 (8 shards)" in reports[0], reports
    assert "generation 1 (8 shards) -> generation 2 (2 shards)" in reports[1], reports
    emitted = Counter(record["canonical"] for record in _outputs(kafka, topics.new_urls))
    lines = b"".join(value + b"\n" for _, value in frontier)
    offline = run_cli(kafka, "url-dedup", "--offline", stdin=lines)
    assert offline.returncode == 0, offline.stderr.decode()[-2000:]
    expected = {orjson.loads(line)["canonical"] for line in offline.stdout.splitlines()}
    assert len(expected) == 3000
    assert set(emitted) == expected, "lost or invented URLs"
    assert max(emitted.values()) == 1, "a URL was emitted twice"


def _fetches(urls: int, rounds: int) -> list[tuple[bytes, bytes]]:
    """Each URL fetched ``rounds`` times a day apart, in fetch order; every third page changes."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    out = []
    for round_number in range(rounds):
        for number in range(urls):
            version = round_number if number % 3 == 0 else 0
            url = f"https://host{number % 20}.example/page/{number}"
            fetch = {"url": url, "status": 200, "content_type": "text/plain",
                     "body": f"page {number} version {version} " + "words of text " * 40,
                     "fetched_at": records.rfc3339(start + timedelta(days=round_number, seconds=number))}
            out.append((url.encode(), orjson.dumps(fetch)))
    return out


def test_revisit_reshards_up_and_down_while_fetches_arrive(kafka: KafkaConfig, prefix: str,
                                                           tmp_path: Path) -> None:
    topics = Topics(prefix)
    fetches = _fetches(urls=300, rounds=4)
    backlog, live = fetches[:600], fetches[600:]
    group = topics.group(APP, "revisit")
    _scenario(kafka, prefix, "revisit", topics.fetched_pages, backlog, live,
              lambda: h.committed_total(kafka, group, topics.fetched_pages, INPUT_PARTITIONS), tmp_path)
    updates = _outputs(kafka, topics.revisit_updates)
    assert Counter(u["url"] for u in updates) == Counter(orjson.loads(v)["url"] for _, v in fetches)
    lines = b"".join(value + b"\n" for _, value in fetches)
    offline = run_cli(kafka, "revisit", "--offline", stdin=lines)
    assert offline.returncode == 0, offline.stderr.decode()[-2000:]
    decisions = Counter((u["url"], u["changed"], u["signal"]) for u in updates)
    assert decisions == Counter((u["url"], u["changed"], u["signal"])
                                for u in map(orjson.loads, offline.stdout.splitlines()))


def test_content_seen_reshards_up_and_down_while_pages_arrive(kafka: KafkaConfig, prefix: str,
                                                              tmp_path: Path) -> None:
    """Originals first, with a third of the copies; the other copies arrive while the stage runs and
    reshards, in fetch order, each long after its original (so no verdict depends on a race)."""
    topics = Topics(prefix)
    pages = simweb.crawl(seed=9, articles=48)
    originals = [page for page in pages if page.kind == "original"]
    copies = [page for page in pages if page.kind != "original"]
    backlog_pages = originals + copies[:len(copies) // 3]
    encoded = [(page.url.encode(), orjson.dumps(page.record)) for page in pages]
    by_url = dict(encoded)
    backlog = [(page.url.encode(), by_url[page.url.encode()]) for page in backlog_pages]
    live = [(page.url.encode(), by_url[page.url.encode()]) for page in copies[len(copies) // 3:]]
    reports = _scenario(kafka, prefix, "content-seen", topics.fetched_pages, backlog, live,
                        lambda: len(_outputs(kafka, topics.page_verdicts)), tmp_path)
    assert all("entries written per table: buckets " in report for report in reports), reports  # its tables
    verdicts = _outputs(kafka, topics.page_verdicts)
    check_against_plan(pages, verdicts, offline_verdicts(kafka, pages, tmp_path / "offline"))
    unique = _outputs(kafka, topics.unique_pages)
    assert sorted(u["url"] for u in unique) == sorted(v["url"] for v in verdicts if v["verdict"] == "unique")


def _live_changelog(kafka: KafkaConfig, topic: str) -> dict[tuple[int, bytes], bytes]:
    live: dict[tuple[int, bytes], bytes | None] = {}
    for message in read_to_end(kafka, topic):
        live[(message.partition() or 0, message.key() or b"")] = message.value()
    return {place: value for place, value in live.items() if value is not None}


def test_a_reshard_killed_half_way_and_run_again_completes_with_the_same_result(
        kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """SIGKILL during the copy: workers refuse to start while the mark stands; run again, the reshard
    writes a fresh generation holding every entry where the new count routes it, and a worker on it
    emits only URLs never seen."""
    topics = Topics(prefix)
    frontier = _frontier(distinct=60_000, total=60_000, seed=8)
    h.create_topics(kafka, [topics.frontier], INPUT_PARTITIONS)
    h.produce(kafka, topics.frontier, frontier)
    state = tmp_path / "state"
    _finish(_workers(kafka, prefix, "url-dedup", state, 4, 1, "--drain", "--idle-exit-s", "3",
                     "--batch-max-messages", "20000"), state)
    before = _live_changelog(kafka, topics.changelog(APP, "url-dedup"))
    command = _command(kafka, prefix, "reshard", "--stage", "url-dedup", "--shards", "8")
    reshard = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=PROJECT_ROOT, start_new_session=True)
    assert reshard.stdout is not None
    while b"reshard: copy" not in reshard.stdout.readline():
        assert reshard.poll() is None, "the reshard ended before its copy"
    time.sleep(random.Random(1).uniform(0.2, 0.6))
    os.killpg(reshard.pid, signal.SIGKILL)
    assert reshard.wait() == -signal.SIGKILL
    reshard.stdout.close()
    moving = read_generation(kafka, topics.generations_topic(APP, "url-dedup"))
    assert moving is not None and (moving.number, moving.moving_to) == (0, 1)
    refused = run_cli(kafka, "url-dedup", "--topic-prefix", prefix, "--app-id", APP, "--state-dir",
                      str(state / "late"), "--shards", "8", "--idle-exit-s", "2")
    assert refused.returncode == 2 and b"being resharded" in refused.stderr, refused.stderr.decode()[-2000:]

    assert "generation 0 (4 shards) -> generation 2 (8 shards)" in _reshard(kafka, prefix, "url-dedup", 8)
    after = _live_changelog(kafka, topics.at_generation("url-dedup", 2).changelog(APP, "url-dedup"))
    version = {key: value for (_, key), value in before.items() if len(key) != 16}
    expected = {(partition_for(key, 8), key): value for (_, key), value in before.items() if len(key) == 16}
    expected |= {(shard, key): value for shard in range(8) for key, value in version.items()}
    assert after == expected
    assert len(expected) == 60_000 + 8

    fresh = _frontier(distinct=61_000, total=61_000, seed=8)  # the same 60,000 URLs, 1,000 more
    h.produce(kafka, topics.frontier, fresh)
    _finish(_workers(kafka, prefix, "url-dedup", state, 8, 1, "--idle-exit-s", "5",
                     "--batch-max-messages", "20000"), state)
    emitted = Counter(record["canonical"] for record in _outputs(kafka, topics.new_urls))
    assert len(emitted) == 61_000 and max(emitted.values()) == 1
