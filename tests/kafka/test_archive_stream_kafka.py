"""The page stage's verdicts as a WARC writer reads them: two crawls replayed from WARCs into a running
content-seen worker, and each page whose body an earlier capture had names that capture (URL, fetch
time, WARC-Record-ID) and the WARC payload digest: the same captures warc-dedup refers its revisits
to, offline, on the same WARCs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from streams import records
from streams.archives.payload import payload_digest
from streams.ops.warc_dedup import run_dedup
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing.archive_crawls import members, source_pages, two_crawls
from testing.cli import PROJECT_ROOT, run_cli


def _verdicts(kafka: KafkaConfig, topics: Topics) -> list[dict[str, Any]]:
    return [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.page_verdicts)]


def _revisits(output: bytes) -> dict[str, tuple[str, str]]:
    """warc-dedup's revisits: record ID -> (the refers-to URI, the refers-to record ID)."""
    found = {}
    for raw in members(output):
        head = raw[:raw.index(b"\r\n\r\n")].decode()
        fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:])
        if fields["WARC-Type"] == "revisit":
            found[fields["WARC-Record-ID"]] = (fields["WARC-Refers-To-Target-URI"], fields["WARC-Refers-To"])
    return found


def test_verdicts_name_the_captures_warc_dedup_refers_to(kafka: KafkaConfig, prefix: str,
                                                         tmp_path: Path) -> None:
    topics = Topics(prefix)
    crawls = two_crawls(source_pages(24, tmp_path / "no-corpus"), codings=False)
    names = []
    for number, crawl in enumerate(crawls, start=1):
        names.append(tmp_path / f"crawl{number}.warc.gz")
        names[-1].write_bytes(crawl.warc())
    stage = subprocess.Popen(
        [sys.executable, "-m", "streams", "content-seen", "--topic-prefix", prefix, "--app-id", "a",
         "--worker-id", "w", "--state-dir", str(tmp_path / "state"), "--shards", "2"],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}, cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for name, crawl in zip(names, crawls, strict=True):  # in crawl order, as a crawler feeds it
            # counted before the replay: counted after, the crawl's first verdicts were counted twice
            # and the wait below ran to its deadline (90 s of the test's 130)
            wanted = len(_verdicts(kafka, topics)) + len(crawl.responses)
            replayed = run_cli(kafka, "replay", "--topic-prefix", prefix, "--no-links", str(name))
            assert replayed.returncode == 0, replayed.stderr.decode()
            deadline = time.monotonic() + 120
            while len(_verdicts(kafka, topics)) < wanted and time.monotonic() < deadline:
                time.sleep(0.5)
            assert len(_verdicts(kafka, topics)) == wanted, f"{name.name}: verdicts missing after 120 s"
        stage.send_signal(signal.SIGTERM)  # not an idle exit: a loaded machine may start a replay late
        _, errors = stage.communicate(timeout=120)
    finally:
        stage.kill()
    assert stage.returncode == 0, errors.decode()[-2000:]

    revisits: dict[str, tuple[str, str]] = {}
    for number, name in enumerate(names, start=1):
        output = tmp_path / f"out{number}.warc.gz"
        run_dedup([name], output, tmp_path / "archive-state")
        revisits.update(_revisits(output.read_bytes()))
    responses = [r for crawl in crawls for r in crawl.responses]
    dates = {r.record_id: records.parse_rfc3339(r.date) for r in responses}
    # the pages the stage compares (2xx with text); a verdict names no page of its own, so pages are
    # matched by URL and payload digest, a multiset (crawl 2 refetches URLs unchanged)
    expected = Counter((r.uri, payload_digest(r.entity), revisits.get(r.record_id, (None, None)))
                       for r in responses if r.status == "200 OK" and r.entity)
    compared = [v for v in _verdicts(kafka, topics) if v["verdict"] != "skipped"]
    found = Counter((v["url"], v["payload_digest"],
                     (v["first_capture_url"], v["first_capture_warc_record_id"])) for v in compared)
    assert found == expected
    for verdict in compared:
        record_id = verdict["first_capture_warc_record_id"]
        if record_id is not None:  # WARC-Refers-To-Date: replay gives the WARC-Date with milliseconds
            assert records.parse_rfc3339(verdict["first_capture_fetched_at"]) == dates[record_id]
    assert len(compared) > 40 and sum(1 for v in compared if v["first_capture_url"]) > 10
