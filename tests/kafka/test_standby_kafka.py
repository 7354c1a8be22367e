"""Standby replicas through SIGKILLs: the three stages, two workers each, ``standby_replicas = 1``,
against what each stage decides offline (the comparison of tests/kafka/test_reliability_kafka.py).

Every worker is the owner of half the shards and the standby of the other half, so each kill is of
an owner and of a standby at once. While the input flows:

1. a is SIGKILLed and stays down past the session: b takes a's shards from its standbys (the takeover
   fences a's transactional id if a left a transaction open), then a starts again, warms up the
   shards it will own, and takes them back;
2. b is SIGKILLed right after that, while a's standbys of b's shards may still be behind (a only
   just came back), and restarted at once (static membership: before the session ends);
3. a, then b a second later: both down; both started again.

Then every output, read with read_committed, is the offline answer: nothing lost, nothing doubled,
no decision different; one dead letter per bad record. The logs show the takeovers and the warm
stores handed over.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from streams.runtime.kafka_io import KafkaConfig
from testing import reliability as r

pytestmark = pytest.mark.kafka

SESSION_S = 6.0  # the default [runtime] session_timeout_s
ENV = {"STREAMS_RUNTIME_STANDBY_REPLICAS": "1"}


def _kept_warm(log: str) -> list[set[int]]:
    """The shard sets of a run's standby lines. A worker that asks before the group has placed the
    shards keeps every shard warm ("0, 1, 2, 3"), and the owned ones leave that set without a line
    when the assignment takes them: a's shards are in it either way."""
    return [{int(shard) for shard in found.split(", ")}
            for found in re.findall(r"standby: keeping shards ([0-9, ]+) warm", log)]


def _kill(workers: list[r.Worker]) -> None:
    for worker in workers:
        worker.kill()


def test_standbys_through_sigkills_of_owners_and_standbys(kafka: KafkaConfig, prefix: str,
                                                          tmp_path: Path) -> None:
    deployment = r.Deployment(kafka, prefix, tmp_path, r.workload(seed=45, articles=24, urls=400,
                                                                    phases_per_half=2), env=ENV)
    deployment.create_inputs()
    try:
        a, b = deployment.start("a"), deployment.start("b")
        deployment.wait_assigned([*a, *b])
        feeder = deployment.feeder(steps_per_phase=6, pause_s=0.5)
        feeder.start()
        try:
            feeder.wait_for(0.2)
            _kill(a)
            time.sleep(SESSION_S + 3)  # the session ends; b takes a's shards over
            for worker in a:
                worker.start()
            deployment.wait_assigned(a)
            feeder.wait_for(0.5)
            _kill(b)  # a's standbys of b's shards have had little time
            for worker in b:
                worker.start()
            deployment.wait_assigned(b)
            feeder.wait_for(0.75)
            _kill(a)
            time.sleep(1.0)
            _kill(b)
            for worker in [*a, *b]:
                worker.start()
            feeder.finish()
        finally:
            feeder.join(60)
        deployment.settle(timeout_s=300)
        deployment.stop_all()
        report = deployment.verify()
        print(f"\n{deployment.prefix} report: {report}\nexits: {deployment.exits()}")
        assert report == r.clean(report)
        for worker in b:  # b took a's shards when a's session ended, from the copies it kept
            first_run = worker.runs()[0]
            assert any({0, 1} <= kept for kept in _kept_warm(first_run)), worker.name
            assert "assignment: owns shards 0, 1, 2, 3 and" in first_run, worker.name
    finally:
        deployment.kill_all()
