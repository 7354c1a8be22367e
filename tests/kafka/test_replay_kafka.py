"""replay and tail against the real broker: a WARC and JSON lines through the page stage, end to end."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from streams import records
from streams.dev import simweb
from streams.records import RecordKind
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing.cli import PROJECT_ROOT, run_cli
from testing.warcs import response, warc_file, warc_record

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
BROKEN = b'{"url": "https://broken.example/", "status": 200,'


def _fetches(fetches: list[tuple[str, str, str]], minute: int) -> list[bytes]:
    """A request and a response record for each ``(url, html, status)``, a minute apart."""
    out = []
    for number, (url, html, status) in enumerate(fetches, start=minute):
        out.append(warc_record("request", url, b"GET / HTTP/1.1\r\n\r\n",
                               content_type="application/http; msgtype=request"))
        out.append(response(url, html.encode(), date=records.rfc3339(T0 + timedelta(minutes=number)),
                            status=status))
    return out


def _crawl(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """Two WARCs in crawl order (originals, then a mirror and an oversize page) and JSON lines with
    a broken line; and the verdict expected for each URL."""
    rng = random.Random(5)
    origin, mirror = simweb.site(rng, "news.example"), simweb.site(rng, "mirror.example")
    first, second, third = (simweb.article(rng, f"a{i}") for i in range(3))
    day_one = [("https://news.example/first", simweb.render(origin, first, "/first"), "200 OK"),
               ("https://news.example/second", simweb.render(origin, second, "/second"), "200 OK"),
               ("https://news.example/missing", "<html><body>not found</body></html>", "404 Not Found")]
    fields = "application/warc-fields"
    info = warc_record("warcinfo", None, b"software: test\r\n", content_type=fields)
    metadata = warc_record("metadata", day_one[0][0], b"via: test\r\n", content_type=fields)
    one = tmp_path / "day-one.warc.gz"
    one.write_bytes(warc_file([info, *_fetches(day_one, 0), metadata], gzipped=True))
    day_two = [("https://mirror.example/copy", simweb.render(mirror, first, "/copy"), "200 OK"),
               ("https://news.example/huge", "<p>filler</p>" * 30_000, "200 OK")]
    two = tmp_path / "day-two.warc"
    two.write_bytes(warc_file(_fetches(day_two, 10)))
    page = simweb.fetched("https://other.example/third", simweb.render(origin, third, "/third"), T0)
    lines = tmp_path / "pages.jsonl"
    lines.write_bytes(BROKEN + b"\n" + orjson.dumps(page) + b"\n\n")
    expected = {"https://news.example/first": "unique", "https://news.example/second": "unique",
                "https://mirror.example/copy": "duplicate", "https://news.example/missing": "skipped",
                "https://other.example/third": "unique"}
    return one, two, lines, expected


def _replay(kafka: KafkaConfig, prefix: str, *files: Path) -> str:
    result = run_cli(kafka, "replay", "--topic-prefix", prefix, "--max-record-bytes", "200000",
                     *map(str, files))
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def _verdicts(kafka: KafkaConfig, topics: Topics) -> list[dict[str, Any]]:
    return [orjson.loads(m.value() or b"") for m in read_to_end(kafka, topics.page_verdicts)]


def _tail(kafka: KafkaConfig, prefix: str, *args: str) -> list[dict[str, Any]]:
    result = run_cli(kafka, "tail", "--topic-prefix", prefix, *args)
    assert result.returncode == 0, result.stderr.decode()
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def test_warcs_and_json_lines_replayed_into_a_running_page_stage(kafka: KafkaConfig, prefix: str,
                                                                  tmp_path: Path) -> None:
    """In crawl order, as a crawler would feed it: a copy processed before its original would not be
    found (docs/content-seen.md, racing copies), so day two is replayed once day one has verdicts."""
    topics = Topics(prefix)
    one, two, lines, expected = _crawl(tmp_path)
    stage = subprocess.Popen(
        [sys.executable, "-m", "streams", "content-seen", "--topic-prefix", prefix, "--app-id", "a",
         "--worker-id", "w", "--state-dir", str(tmp_path / "state"), "--shards", "2"],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}, cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        first = _replay(kafka, prefix, one)
        assert "read: 8 WARC records, 0 JSON lines" in first, first
        assert "skipped: 1 metadata, 3 request, 1 warcinfo" in first, first
        deadline = time.monotonic() + 60
        while len(_verdicts(kafka, topics)) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        report = _replay(kafka, prefix, two, lines)
        deadline = time.monotonic() + 90  # every page decided; then stopped as an operator stops it
        while len(_verdicts(kafka, topics)) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.5)
        stage.send_signal(signal.SIGTERM)
        _, errors = stage.communicate(timeout=90)
    finally:
        stage.kill()
    assert stage.returncode == 0, errors.decode()
    assert "read: 4 WARC records, 3 JSON lines" in report, report
    assert "skipped: 1 blank_line, 1 oversize, 2 request" in report, report
    assert "errors: none" in report, report

    links = [records.decode(RecordKind.FRONTIER_URL, m.value()) for m in read_to_end(kafka, topics.frontier)]
    assert {link["source_url"] for link in links} == {"https://news.example/first", "https://news.example/second",
                                                      "https://mirror.example/copy"}  # 2xx HTML only
    assert all(link["url"].startswith(("https://news.example/", "https://mirror.example/")) for link in links)

    verdicts = _verdicts(kafka, topics)
    assert Counter(v["url"] for v in verdicts) == Counter(expected.keys()), verdicts
    assert {v["url"]: v["verdict"] for v in verdicts} == expected
    copy = next(v for v in verdicts if v["url"] == "https://mirror.example/copy")
    assert (copy["kind"], copy["duplicate_of"]) == ("exact", "https://news.example/first")
    dead = [orjson.loads(m.value() or b"") for m in read_to_end(kafka, topics.dead_letters)]
    assert [(d["reason"], d["source_topic"]) for d in dead] == [("invalid_json", topics.fetched_pages)]

    shown = _tail(kafka, prefix, "page-verdicts")
    assert sorted(line["value"]["url"] for line in shown) == sorted(expected)
    assert {line["topic"] for line in shown} == {topics.page_verdicts}
    assert len(_tail(kafka, prefix, "fetched-pages", "--limit", "3")) == 3
    pages = _tail(kafka, prefix, "fetched-pages")
    assert [line["value"] for line in pages if line["key"] is None] == [BROKEN.decode()]  # as text
    parsed = [line for line in pages if line["key"] is not None]
    assert len(parsed) == 5 and all(line["key"] == line["value"]["url"] for line in parsed)
    assert all(line["value"]["body_base64"].endswith(" chars)")  # shortened
               for line in parsed if line["value"]["status"] == 200)
    raw = run_cli(kafka, "tail", topics.fetched_pages, "--raw")  # a full name, no prefix needed
    assert raw.returncode == 0, raw.stderr.decode()
    assert BROKEN in raw.stdout.splitlines()  # byte for byte
    assert len(raw.stdout.splitlines()) == 6
    missing = run_cli(kafka, "tail", "--topic-prefix", prefix, "no-such-topic")
    assert missing.returncode == 2 and b"does not exist" in missing.stderr
