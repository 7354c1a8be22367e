"""SIGKILL tests (short versions; ``make bench`` runs 20 kills over 1M records).

A worker is killed at random points of its progress and restarted each time; the output is then
read with read_committed: every expected key exactly once, nothing lost, nothing doubled.

The workers take 20 records a transaction and the harness reads their progress with one client: at
500 a worker went through these inputs in about a second and a client made per look took 0.1-0.3 s,
so every kill after the first (all three of the URL stage's) landed once every input record was
committed, as the kill points in the report said. Slower, most runs put their first kill or two
mid-input, but not all (under load the URL stage's three once landed after its last record still):
where a kill lands is not asserted; ``make reliability`` and ``make bench`` kill 20 times.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

KILLS = 3


KILL_COUNTS = [KILLS, pytest.param(20, marks=pytest.mark.slow, id="20-kills")]


@pytest.mark.parametrize("kills", KILL_COUNTS)
def test_first_seen_survives_sigkills(kafka: KafkaConfig, prefix: str, tmp_path: Path, kills: int) -> None:
    source, sink = f"{prefix}in", f"{prefix}out"
    h.create_topics(kafka, [source, sink], 4)
    keys = h.keyed_stream(distinct=21_000, total=30_000)
    h.produce(kafka, source, ((k, k) for k in keys))
    command = [sys.executable, "-m", "testing.first_seen", "--input", source, "--output", sink,
               "--app-id", "app", "--worker-id", "w0", "--state-dir", str(tmp_path / "state"),
               "--topic-prefix", prefix, "--batch-max-messages", "20"]
    with h.CommittedOffsets(kafka, f"{prefix}app.first-seen", [source]) as progress:
        report = h.run_with_kills(_with_bootstrap(kafka, command), progress.total, len(keys), kills,
                                  tmp_path / "worker.log", timeout_s=900)
    assert (report.kills, report.exits) == (kills, 0), report
    result = h.verdict(set(keys), h.read_all(kafka, sink))
    assert result == {"expected": 21_000, "emitted_distinct": 21_000, "lost": 0, "doubled": 0,
                      "unexpected": 0}


@pytest.mark.parametrize("kills", KILL_COUNTS)
def test_url_dedup_survives_sigkills(kafka: KafkaConfig, prefix: str, tmp_path: Path, kills: int) -> None:
    topics = Topics(prefix)
    h.create_topics(kafka, [topics.frontier], 3)
    urls = [f"http://host{i % 50}.example/item/{i}" for i in range(12_000)]
    stream = urls + [urls[i % len(urls)] for i in range(0, 48_000, 7)]
    h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": u})) for u in stream))
    command = [sys.executable, "-m", "streams", "url-dedup", "--topic-prefix", prefix, "--app-id", "app",
               "--worker-id", "w0", "--state-dir", str(tmp_path / "state"), "--shards", "4",
               "--batch-max-messages", "20"]
    shards = topics.shards("app", "url-dedup")
    with h.CommittedOffsets(kafka, f"{prefix}app.url-dedup", [topics.frontier]) as progress:
        report = h.run_with_kills(
            _with_bootstrap(kafka, command), progress.total, len(stream), kills, tmp_path / "worker.log",
            timeout_s=900, done=lambda: h.caught_up(kafka, f"{prefix}app.url-dedup", shards))
    assert (report.kills, report.exits) == (kills, 0), report
    counts = h.read_all(kafka, topics.new_urls,
                        value_of=lambda _k, v: orjson.loads(v or b"{}")["url"].encode())
    assert h.verdict({u.encode() for u in urls}, counts) == {
        "expected": 12_000, "emitted_distinct": 12_000, "lost": 0, "doubled": 0, "unexpected": 0}


@pytest.mark.parametrize("kills", KILL_COUNTS)
def test_numbered_stage_of_two_tables_survives_sigkills(kafka: KafkaConfig, prefix: str, tmp_path: Path,
                                                        kills: int) -> None:
    """Each group's items numbered 1..n, each item once: the two tables, the output and the offsets
    committed together (a count lost would repeat a number, one kept for a lost output a gap)."""
    source, sink = f"{prefix}in", f"{prefix}out"
    h.create_topics(kafka, [source, sink], 4)
    items = h.keyed_stream(distinct=12_000, total=30_000)
    h.produce(kafka, source, ((item, b"g%d" % (int(item[1:]) % 40)) for item in items))
    command = [sys.executable, "-m", "testing.numbered", "--input", source, "--output", sink,
               "--app-id", "app", "--worker-id", "w0", "--state-dir", str(tmp_path / "state"),
               "--topic-prefix", prefix, "--shards", "4", "--batch-max-messages", "20"]
    group, groups = f"{prefix}app.numbered", Topics(prefix).internal("app", "numbered", "groups")
    with h.CommittedOffsets(kafka, group, [source]) as progress:
        report = h.run_with_kills(
            _with_bootstrap(kafka, command), progress.total, len(items), kills, tmp_path / "worker.log",
            timeout_s=900, done=lambda: h.caught_up(kafka, group, groups))
    assert (report.kills, report.exits) == (kills, 0), report
    lines = h.read_all(kafka, sink, value_of=lambda item, value: (item or b"") + b" " + (value or b""))
    assert h.verdict(set(items), Counter(line.split()[0] for line in lines.elements())) == {
        "expected": 12_000, "emitted_distinct": 12_000, "lost": 0, "doubled": 0, "unexpected": 0}
    numbers: dict[bytes, list[int]] = {}
    for line in lines.elements():
        _, named, number = line.split()
        numbers.setdefault(named, []).append(int(number))
    assert {named: sorted(got) == list(range(1, len(got) + 1)) for named, got in numbers.items()} == {
        b"g%d" % g: True for g in range(40)}


def _with_bootstrap(kafka: KafkaConfig, command: list[str]) -> list[str]:
    return ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", *command]
