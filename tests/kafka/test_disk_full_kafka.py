"""A worker whose state directory fills up mid-stream (issue 37): it stops with one line naming the
directory, the space left and what to do; nothing partial is committed; once there is room again
and it is started again, every URL is decided once, as offline.

The state directory is a tmpfs of 24 MB the test mounts (skipped where mounting is not permitted);
the workers' memtables are 1 MB (``[runtime] rocksdb_memtable_mb``), so their stores flush to disk
at this test's scale as they do every 64 MB in production: the disk is met where a worker meets it,
at a memtable flush. The URL stage, one worker, 4 shards, the session's broker: 40,000 frontier
records decided; the filesystem filled to its last 64 KB; 40,000 more.

The broker side (a node's log directory filling up) is in tests/kafka/test_cluster_kafka.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streams.runtime.kafka_io import KafkaConfig
from testing import disks
from testing import reliability as r
from testing.workers import Worker, count
from testing.workload import FRONTIER, Phase, Workload, frontier

pytestmark = pytest.mark.kafka

FULL_S = 300.0


def _error_lines(worker: Worker) -> list[str]:
    return [line for line in worker.runs()[-1].splitlines() if line.startswith("error:")]


def _stopped_for_the_disk(worker: Worker, state_dir: Path) -> str:
    """The worker's last run ended with status 2 and one line about the disk, no traceback."""
    code = worker.wait(FULL_S)
    log = worker.runs()[-1]
    assert code == 2, f"exit {code}: {worker.tail()}"
    lines = _error_lines(worker)
    assert len(lines) == 1 and lines[0] == log.strip().splitlines()[-1], worker.tail()
    assert "Traceback" not in log, worker.tail()
    line = lines[0]
    assert re.match(rf"error: no space left for local state in {re.escape(str(state_dir))}/\S+: "
                    r"[\d.]+ MiB free of [\d.]+ MiB on its filesystem; free space there", line), line
    return line


@pytest.mark.slow
def test_state_directory_fills_mid_stream(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    urls = frontier(seed=61, distinct=60_000, total=80_000)
    first, second = urls[:40_000], urls[40_000:]
    work = Workload([Phase({FRONTIER: first}), Phase({FRONTIER: second})])
    env = {"STREAMS_RUNTIME_ROCKSDB_MEMTABLE_MB": "1", "STREAMS_URL_DEDUP_EXPECTED_URLS": "100000",
           "STREAMS_METRICS_ENABLED": "false"}
    deployment = r.Deployment(kafka, prefix, tmp_path, work, stages=("url-dedup",), env=env,
                              batch_max_messages=2000)
    deployment.create_inputs()
    with disks.small_filesystem(deployment.state_dir, size_mb=24):
        worker = deployment.worker("url-dedup", "w0", idle_exit_s=5.0)
        try:
            deployment.produce_phase(0)
            assert worker.start().wait(FULL_S) == 0, worker.tail()
            assert deployment.done("url-dedup")
            decided = count(kafka, deployment.topics.new_urls)
            ballast = disks.fill(deployment.state_dir, leave_bytes=64 * 1024)
            deployment.produce_phase(1)
            line = _stopped_for_the_disk(worker.start(), deployment.state_dir)
            print(f"\nthe worker's last words: {line}")
            # What it committed before it stopped is whole: every URL decided so far once, no
            # transaction left open on its output (read_committed sees to its end).
            so_far = deployment.verify()["url-dedup"]
            assert so_far["doubled"] == 0 and decided <= so_far["committed"] <= so_far["expected"], so_far
            # Started again on the full disk, it stops the same way, at once.
            again = _stopped_for_the_disk(worker.start(), deployment.state_dir)
            print(f"started again on the full disk: {again}")
            disks.make_room(ballast)
            assert worker.start().wait(FULL_S) == 0, worker.tail()
            report = deployment.verify()
        finally:
            deployment.kill_all()
    print(f"\nfull state directory: committed before the stop {so_far['committed']} of "
          f"{so_far['expected']}; after room was made {report}")
    assert report == r.clean(report)
