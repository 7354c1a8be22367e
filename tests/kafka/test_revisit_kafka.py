"""revisit against the real broker: one update per fetch through SIGKILLs, same decisions as offline."""

from __future__ import annotations

import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams import records
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing import harness as h
from testing.cli import run_cli

PARTITIONS = 3


def _fetches(urls: int = 300, rounds: int = 3) -> list[dict[str, Any]]:
    """Each URL fetched ``rounds`` times a day apart; every third page changes between fetches."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    out = []
    for round_number in range(rounds):
        for number in range(urls):
            version = round_number if number % 3 == 0 else 0
            out.append({"url": f"https://host{number % 20}.example/page/{number}", "status": 200,
                        "content_type": "text/plain",
                        "body": f"page {number} version {version} " + "words of text " * 40,
                        "fetched_at": records.rfc3339(start + timedelta(days=round_number, seconds=number))})
    return out


@pytest.mark.parametrize("kills", [3, pytest.param(20, marks=pytest.mark.slow, id="20-kills")])
def test_revisit_survives_sigkills_with_one_update_per_fetch(kafka: KafkaConfig, prefix: str,
                                                             tmp_path: Path, kills: int) -> None:
    topics = Topics(prefix)
    fetches = _fetches()
    h.create_topics(kafka, [topics.fetched_pages], PARTITIONS)
    h.produce(kafka, topics.fetched_pages, ((f["url"].encode(), orjson.dumps(f)) for f in fetches))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", sys.executable, "-m", "streams",
               "revisit", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
               "--state-dir", str(tmp_path / "state"), "--shards", "4", "--batch-max-messages", "100"]
    group = topics.group("app", "revisit")
    report = h.run_with_kills(
        command, lambda: h.committed_total(kafka, group, topics.fetched_pages, PARTITIONS), len(fetches),
        kills, tmp_path / "worker.log", timeout_s=1200,
        done=lambda: h.caught_up(kafka, group, topics.shards("app", "revisit")))
    assert (report.kills, report.exits) == (kills, 0), report
    updates = [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.revisit_updates)]
    assert Counter(u["url"] for u in updates) == Counter(f["url"] for f in fetches)
    # per URL, fetches are decided in order, so the change decisions are the offline run's
    lines = b"".join(orjson.dumps(f) + b"\n" for f in fetches)
    offline = run_cli(kafka, "revisit", "--offline", "--state-dir", str(tmp_path / "offline"), stdin=lines)
    assert offline.returncode == 0, offline.stderr.decode()[-2000:]
    decisions = Counter((u["url"], u["changed"], u["signal"]) for u in updates)
    assert decisions == Counter((u["url"], u["changed"], u["signal"])
                                for u in map(orjson.loads, offline.stdout.splitlines()))
