"""Integration tests against the real broker: dead letters, restarts, shard checks, new partitions.

Each test has fresh topic names (the ``prefix`` fixture) and runs the stage as its own worker
process (``python -m streams url-dedup ... --idle-exit-s``), the way an operator runs it.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.partitioner import partition_for
from streams.stages.url_dedup.stage import VERSION_KEY
from streams.topics import Topics
from streams.urls.canonical import canonicalize, fingerprint
from testing import harness as h
from testing.cli import run_cli

DATA = Path(__file__).resolve().parents[1] / "data"

IDLE_S = "4"


def _url_dedup(kafka: KafkaConfig, prefix: str, state_dir: Path, *extra: str) -> None:
    result = run_cli(kafka, "--log-level", "INFO", "url-dedup", "--topic-prefix", prefix, "--app-id", "app",
                     "--worker-id", "w0", "--state-dir", str(state_dir), "--shards", "4",
                     "--idle-exit-s", IDLE_S, *extra)
    print(result.stderr.decode()[-3000:])
    assert result.returncode == 0, result.stderr.decode()[-3000:]


def _frontier(kafka: KafkaConfig, prefix: str, values: list[bytes], partitions: int = 3) -> None:
    topics = Topics(prefix)
    admin = AdminClient(kafka.admin())
    if topics.frontier not in admin.list_topics(timeout=10).topics:
        h.create_topics(kafka, [topics.frontier], partitions)
    h.produce(kafka, topics.frontier, ((None, value) for value in values))


def _urls(kafka: KafkaConfig, prefix: str) -> list[str]:
    counts = h.read_all(kafka, Topics(prefix).new_urls, idle_s=1.0,
                        value_of=lambda _k, v: orjson.loads(v or b"{}")["url"].encode())
    return sorted(url.decode() for url, n in counts.items() for _ in range(n))


def _dead_letters(kafka: KafkaConfig, prefix: str) -> list[dict[str, object]]:
    consumer_counts = h.read_all(kafka, Topics(prefix).dead_letters, idle_s=1.0, value_of=lambda _k, v: v)
    return [orjson.loads(raw) for raw in consumer_counts.elements()]


def test_bad_records_become_dead_letters_and_valid_ones_go_on(kafka: KafkaConfig, prefix: str,
                                                               tmp_path: Path) -> None:
    bad = [b'{"url": "http://a.example/1"', b'{"url": 42}', b'{"source_url": "http://a.example/"}']
    values = [orjson.dumps({"url": f"http://ok.example/{i}"}) for i in range(3)]
    _frontier(kafka, prefix, [values[0], bad[0], values[1], bad[1], values[2], bad[2]], partitions=1)
    _url_dedup(kafka, prefix, tmp_path)

    assert _urls(kafka, prefix) == [f"http://ok.example/{i}" for i in range(3)]
    letters = sorted(_dead_letters(kafka, prefix), key=lambda d: int(str(d["source_offset"])))
    assert [(d["reason"], d["source_offset"]) for d in letters] == [
        ("invalid_json", 1), ("schema", 3), ("schema", 5)]
    assert "url" in str(letters[1]["detail"]) and "url" in str(letters[2]["detail"])
    for letter, original in zip(letters, bad, strict=True):
        assert letter["source_topic"] == Topics(prefix).frontier
        assert letter["source_partition"] == 0
        assert letter["stage"] == "url-dedup"
        assert base64.b64decode(str(letter["value_base64"])) == original


def test_restart_and_lost_state_dir_do_not_emit_again(kafka: KafkaConfig, prefix: str,
                                                      tmp_path: Path) -> None:
    urls = [f"http://site{i % 7}.example/page/{i}" for i in range(300)]
    _frontier(kafka, prefix, [orjson.dumps({"url": u}) for u in urls * 2])
    _url_dedup(kafka, prefix, tmp_path)
    assert _urls(kafka, prefix) == sorted(urls)

    _frontier(kafka, prefix, [orjson.dumps({"url": u}) for u in urls[:50] + ["http://new.example/a"]])
    _url_dedup(kafka, prefix, tmp_path)  # intact local store
    shutil.rmtree(tmp_path / "app")       # the operator lost the state directory
    _frontier(kafka, prefix, [orjson.dumps({"url": u}) for u in urls[50:] + ["http://new.example/b"]])
    _url_dedup(kafka, prefix, tmp_path)   # state comes back from the changelog alone
    assert _urls(kafka, prefix) == sorted([*urls, "http://new.example/a", "http://new.example/b"])


def test_adding_input_partitions_keeps_dedup(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    urls = [f"http://p.example/{i}" for i in range(200)]
    _frontier(kafka, prefix, [orjson.dumps({"url": u}) for u in urls], partitions=2)
    _url_dedup(kafka, prefix, tmp_path)
    admin = AdminClient(kafka.admin())
    futures = admin.create_partitions([NewPartitions(Topics(prefix).frontier, 6)])
    for future in futures.values():
        future.result()
    _frontier(kafka, prefix, [orjson.dumps({"url": u}) for u in urls])
    _url_dedup(kafka, prefix, tmp_path)
    assert _urls(kafka, prefix) == sorted(urls)


def test_a_different_shard_count_is_refused(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    _frontier(kafka, prefix, [orjson.dumps({"url": "http://s.example/"})])
    _url_dedup(kafka, prefix, tmp_path)
    result = run_cli(kafka, "url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
                     "--state-dir", str(tmp_path), "--shards", "6", "--idle-exit-s", "1")
    assert result.returncode == 2
    assert b"shards=4" in result.stderr


def test_canonical_spellings_are_one_url(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    spellings = ["HTTP://Example.COM:80/a/./b/../c", "http://example.com/a/c#top", "http://example.com/a/%63",
                 "c", "http://other.example/x?"]
    values = [orjson.dumps({"url": u, "source_url": "http://example.com/a/b"}) for u in spellings]
    _frontier(kafka, prefix, values, partitions=1)  # one partition: the first spelling is seen first
    _url_dedup(kafka, prefix, tmp_path)
    assert _urls(kafka, prefix) == ["HTTP://Example.COM:80/a/./b/../c", "http://other.example/x?"]


def test_a_new_profile_is_refused_until_migrated(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """A URL of a named crawl is re-fingerprinted within its crawl."""
    first, again = "http://www.shop.example/item?utm_source=a&id=1", "http://shop.example/item?id=1&utm_medium=b"
    _frontier(kafka, prefix, [orjson.dumps({"url": first}), orjson.dumps({"url": first, "crawl": "june"})])
    _url_dedup(kafka, prefix, tmp_path)
    _frontier(kafka, prefix, [orjson.dumps({"url": again}), orjson.dumps({"url": again, "crawl": "june"})])
    refused = run_cli(kafka, "url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
                      "--state-dir", str(tmp_path), "--shards", "4", "--idle-exit-s", "2",
                      "--profile", "aggressive")
    assert refused.returncode == 2 and b"url-dedup-migrate" in refused.stderr
    resharded = run_cli(kafka, "reshard", "--stage", "url-dedup", "--shards", "4", "--topic-prefix", prefix,
                        "--app-id", "app", "--profile", "aggressive")  # no migration by mistake
    assert resharded.returncode != 0 and b"with the settings it was built with" in resharded.stderr

    migrated = run_cli(kafka, "url-dedup-migrate", "--topic-prefix", prefix, "--app-id", "app",
                       "--profile", "aggressive")
    assert migrated.returncode == 0, migrated.stderr.decode()
    assert b"re-fingerprinted 2 URLs: 2 moved" in migrated.stdout
    _url_dedup(kafka, prefix, tmp_path, "--profile", "aggressive")
    assert _urls(kafka, prefix) == [first, first]  # no second one in either crawl


def _plant_version_1_state(kafka: KafkaConfig, prefix: str, urls: list[str], shards: int) -> None:
    """The changelog a version-1 worker leaves: each URL it emitted, under its fingerprint, in the
    shard that fingerprint routes to, and the version key "1:safe" in every shard."""
    changelog = Topics(prefix).changelog("app", "url-dedup")
    producer = Producer(kafka.producer())
    for url in urls:
        key = fingerprint(url)
        producer.produce(changelog, url.encode(), key, partition=partition_for(key, shards))
    for shard in range(shards):
        producer.produce(changelog, b"1:safe", VERSION_KEY, partition=shard)
    assert producer.flush(30) == 0


def test_version_1_state_is_migrated_and_no_url_is_emitted_twice(kafka: KafkaConfig, prefix: str,
                                                                  tmp_path: Path) -> None:
    """tests/data/canonical-v1.jsonl: frontier records and what version 1 made of them (None: refused),
    written by version 1's canonicalize at c2c1202. A version-1 state of those URLs is migrated to
    version 2, then the whole frontier arrives again: only the URLs version 1 refused are new, and
    the one kind of URL version 1 could not keep apart (a backslash, stored as %5C)."""
    rows = [orjson.loads(line) for line in (DATA / "canonical-v1.jsonl").read_bytes().splitlines()]
    _frontier(kafka, prefix, [orjson.dumps({"url": "http://setup.example/"})])
    _url_dedup(kafka, prefix, tmp_path)  # the stage's topics and group
    stored = [row["v1"] for row in rows if row["v1"] is not None]
    _plant_version_1_state(kafka, prefix, stored, shards=4)
    shutil.rmtree(tmp_path / "app")  # restored from the changelog alone
    refused = run_cli(kafka, "url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
                      "--state-dir", str(tmp_path), "--shards", "4", "--idle-exit-s", "2")
    assert refused.returncode == 2 and b"built with canonicalization 1:safe" in refused.stderr

    migrated = run_cli(kafka, "url-dedup-migrate", "--topic-prefix", prefix, "--app-id", "app")
    assert migrated.returncode == 0, migrated.stderr.decode()
    moved = sum(canonicalize(url) != url for url in stored)
    assert f"re-fingerprinted {len(stored) + 1} URLs: {moved} moved".encode() in migrated.stdout
    assert moved == 1  # "?a='b'": version 2 encodes ' in a query, as browsers do

    frontier = [orjson.dumps({"url": row["url"], "source_url": row["source_url"]}) for row in rows]
    _frontier(kafka, prefix, frontier)
    _url_dedup(kafka, prefix, tmp_path)
    _frontier(kafka, prefix, frontier)  # and once more, after a restart
    _url_dedup(kafka, prefix, tmp_path)
    again = [row["url"] for row in rows if row["v1"] is None or "\\" in row["url"]]
    assert len(again) == 4
    assert _urls(kafka, prefix) == sorted(["http://setup.example/", *again])
