"""content_seen against the real broker: mirrors across partitions and workers, dead letters, SIGKILLs."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.dev import simweb
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing import harness as h
from testing.cli import PROJECT_ROOT
from testing.verdicts import PAYLOAD_FIELDS, check_against_plan, offline_verdicts, with_identical_copies

INPUT_PARTITIONS = 4


def _produce_crawl(kafka: KafkaConfig, topics: Topics, pages: list[simweb.PlantedPage],
                   extra: tuple[bytes, ...] = ()) -> set[int]:
    """Produce pages keyed by URL (so copies land on other partitions); return the partitions used."""
    h.create_topics(kafka, [topics.fetched_pages], INPUT_PARTITIONS, exist_ok=True)
    values: list[tuple[bytes | None, bytes]] = [(page.url.encode(), orjson.dumps(page.record))
                                                for page in pages]
    values += [(None, value) for value in extra]
    h.produce(kafka, topics.fetched_pages, values)
    urls = {page.url.encode() for page in pages}
    return {m.partition() or 0 for m in read_to_end(kafka, topics.fetched_pages) if m.key() in urls}


def _worker(kafka: KafkaConfig, prefix: str, state: Path, worker_id: str, *extra: str) -> list[str]:
    return ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", sys.executable, "-m", "streams",
            "content-seen", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", worker_id,
            "--state-dir", str(state), "--shards", "4", *extra]


def _verdicts(kafka: KafkaConfig, topics: Topics) -> list[dict[str, Any]]:
    return [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.page_verdicts)]


def test_mirrors_through_other_partitions_and_workers_are_found(kafka: KafkaConfig, prefix: str,
                                                                 tmp_path: Path) -> None:
    """Copies arriving before, with and after their originals, through other partitions, two workers.

    Written before the workers start: a third of the copies, then the originals with another third
    among them (so those copies come first in their partitions, or in the same batch as their
    originals); once the originals are decided, the last third. Every verdict is the offline mode's
    on the pages sorted by fetch time."""
    topics = Topics(prefix)
    pages = with_identical_copies(simweb.crawl(seed=3, articles=24))
    originals = [page for page in pages if page.kind == "original"]
    copies = [page for page in pages if page.kind != "original"]
    random.Random(3).shuffle(copies)
    before, together, after = copies[0::3], copies[1::3], copies[2::3]
    bad = (b"{not json", b'{"url": 7}', orjson.dumps({"url": "https://x.example/", "body_base64": "abc"}))
    used = _produce_crawl(kafka, topics, before)
    mixed = originals + together
    used |= _produce_crawl(kafka, topics, random.Random(4).sample(mixed, len(mixed)), bad)
    workers = [subprocess.Popen(_worker(kafka, prefix, tmp_path / f"s{i}", f"w{i}", "--idle-exit-s", "15"),
                                cwd=PROJECT_ROOT, stderr=subprocess.PIPE) for i in range(2)]
    h.wait_for(lambda: len(_verdicts(kafka, topics)) >= len(originals + before + together), timeout_s=180)
    used |= _produce_crawl(kafka, topics, after)
    assert len(used) == INPUT_PARTITIONS
    for worker in workers:
        _, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err.decode()[-2000:]
    verdicts = _verdicts(kafka, topics)
    check_against_plan(pages, verdicts, offline_verdicts(kafka, pages, tmp_path / "offline"))
    unique = [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.unique_pages)]
    assert sorted(u["url"] for u in unique) == sorted(v["url"] for v in verdicts if v["verdict"] == "unique")
    assert all(len(u["simhash"]) == 16 and u["digest"] and u["body_base64"] for u in unique)
    letters = [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.dead_letters)]
    assert sorted(letter["reason"] for letter in letters) == ["invalid_json", "schema", "schema"]
    # both workers held shards: the state is split between them
    assert all(any((tmp_path / f"s{i}").rglob("shard-*")) for i in range(2))


def test_offline_mode_gives_one_verdict_per_line_in_order(kafka: KafkaConfig, tmp_path: Path) -> None:
    pages = simweb.crawl(seed=5, articles=8)
    verdicts = offline_verdicts(kafka, pages, tmp_path)
    assert [v["url"] for v in verdicts] == [page.url for page in pages]
    check_against_plan(pages, verdicts, verdicts)


@pytest.mark.parametrize(("kills", "page_cache_mb"), [
    (3, None),
    pytest.param(3, 1, id="3-kills-paced"),
    pytest.param(20, None, marks=pytest.mark.slow, id="20-kills"),
])
def test_content_seen_survives_sigkills(kafka: KafkaConfig, prefix: str, tmp_path: Path, kills: int,
                                        page_cache_mb: int | None) -> None:
    """All pages at once (copies race their originals), SIGKILLs: one verdict each, offline's.

    Paced: a 1 MB page cache under batches of 500 pages, so every batch takes only some of its pages
    and pauses the rest (streams/runtime/inflow.py), and restarted workers read waiting pages back
    from the input topic (streams/stages/content_seen/waiting.py)."""
    topics = Topics(prefix)
    pages = with_identical_copies(simweb.crawl(seed=11, articles=120))
    _produce_crawl(kafka, topics, pages)
    paced = [] if page_cache_mb is None else ["--batch-max-messages", "500"]
    command = _worker(kafka, prefix, tmp_path / "state", "w0", *(paced or ["--batch-max-messages", "50"]))
    if page_cache_mb is not None:
        command.insert(1, f"STREAMS_CONTENT_SEEN_PAGE_CACHE_MB={page_cache_mb}")
        command[command.index("content-seen"):command.index("content-seen")] = ["--log-level", "DEBUG"]
    group = f"{prefix}app.content-seen"
    report = h.run_with_kills(
        command, lambda: h.committed_total(kafka, group, topics.fetched_pages, INPUT_PARTITIONS),
        len(pages), kills, tmp_path / "worker.log", timeout_s=1200,
        done=lambda: len(_verdicts(kafka, topics)) >= len(pages))
    assert (report.kills, report.exits) == (kills, 0), report
    verdicts = _verdicts(kafka, topics)
    assert sorted(v["url"] for v in verdicts) == sorted(page.url for page in pages)  # once each
    unique = {v["url"] for v in verdicts if v["verdict"] == "unique"}
    clusters: dict[str, set[str]] = {}
    for page in pages:
        clusters.setdefault(page.article, set()).add(page.url)
    assert all(members & unique for members in clusters.values()), "a cluster lost all its members"
    # every page was in the input before the worker started: the copies racing their originals are
    # all found, as offline mode finds them on the pages in fetch order
    offline = {v["url"]: v for v in offline_verdicts(kafka, pages, tmp_path / "offline")}
    assert {v["url"]: (v["verdict"], v["kind"]) for v in verdicts} == {
        url: (v["verdict"], v["kind"]) for url, v in offline.items()}
    first_captures = {v["url"]: [v[name] for name in PAYLOAD_FIELDS] for v in verdicts}  # revisits' targets
    assert first_captures == {url: [v[name] for name in PAYLOAD_FIELDS] for url, v in offline.items()}
    assert sum(1 for v in verdicts if v["first_capture_warc_record_id"]) >= 20
    if page_cache_mb is not None:
        assert "partitions paused" in (tmp_path / "worker.log").read_text()


def test_one_worker_deciding_pages_as_it_routes_them_survives_sigkills(kafka: KafkaConfig, prefix: str,
                                                                      tmp_path: Path) -> None:
    """One worker owns every shard: a page written while it runs is probed and decided in the
    transaction that routes it (streams/stages/content_seen/local.py), no record through the shard
    topic. SIGKILLs meanwhile (each restart vouches for its shards again first, through the topic):
    one verdict per page, none lost or doubled, a duplicate only where offline mode finds one (a
    page may be decided before an earlier copy written within the same instant reaches its horizon),
    and no cluster without its first member."""
    topics = Topics(prefix)
    pages = simweb.crawl(seed=13, articles=40)
    h.create_topics(kafka, [topics.fetched_pages], INPUT_PARTITIONS)
    group = f"{prefix}app.content-seen"
    values = [(page.url.encode(), orjson.dumps(page.record)) for page in pages]

    def write() -> None:  # live input, in fetch order, a few pages at a time
        for start in range(0, len(values), 4):
            h.produce(kafka, topics.fetched_pages, values[start:start + 4])
            time.sleep(0.05)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    report = h.run_with_kills(
        _worker(kafka, prefix, tmp_path / "state", "w0"),
        lambda: h.committed_total(kafka, group, topics.fetched_pages, INPUT_PARTITIONS),
        len(pages), 3, tmp_path / "worker.log", timeout_s=600,
        done=lambda: len(_verdicts(kafka, topics)) >= len(pages))
    writer.join()
    assert (report.kills, report.exits) == (3, 0), report
    verdicts = _verdicts(kafka, topics)
    assert sorted(v["url"] for v in verdicts) == sorted(page.url for page in pages)  # once each
    offline = {v["url"]: v for v in offline_verdicts(kafka, pages, tmp_path / "offline")}
    for verdict in verdicts:
        expected = offline[verdict["url"]]["verdict"]
        assert verdict["verdict"] == expected or (verdict["verdict"], expected) == ("unique", "duplicate")
    unique = {v["url"] for v in verdicts if v["verdict"] == "unique"}
    clusters: dict[str, set[str]] = {}
    for page in pages:
        clusters.setdefault(page.article, set()).add(page.url)
    assert all(members & unique for members in clusters.values()), "a cluster lost all its members"
    shard_records = sum(1 for _ in read_to_end(kafka, topics.internal("app", "content-seen", "shards")))
    assert shard_records < len(pages), (shard_records, len(pages))  # through the topic: 11 a page, and more
