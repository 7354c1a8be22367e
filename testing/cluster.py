"""Shared by the cluster tests (issue 37): a local 3-node cluster, which node leads what, the broker
faults (SIGKILL and restart, a rolling restart, SIGSTOP and SIGCONT), and a clock that notes when
each stage commits, to report the time from a fault to a stage's next commit.

A stage's commit is seen from outside, as an operator's lag monitor sees it: the sum of its group's
committed offsets on its input and shard topics (:meth:`testing.reliability.Deployment.progress`),
polled twice a second. "Seconds to the next commit" is from the fault to the first poll that finds
that sum moved; polls are 0.5 s apart plus what a committed-offsets request takes while the cluster
moves its leaders (up to the 10 s request timeout when the group's coordinator is the node that
failed), so the figure is an upper bound with that resolution.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka.admin import AdminClient

from streams import config
from streams.broker import kafka_cluster, kafka_local
from streams.broker.kafka_cluster import LocalCluster
from streams.runtime.kafka_io import KafkaConfig
from testing import reliability as r

PORT_ENV = "STREAMS_TEST_CLUSTER_PORT"
DEFAULT_PORT = 19892  # nodes on 19892-19897


@contextmanager
def local_cluster(port: int, heap_mb: int = 448) -> Iterator[LocalCluster]:
    """A fresh 3-node cluster, stopped and wiped afterwards; skipped against an external cluster
    (these tests kill its brokers)."""
    if config.bootstrap_servers():
        pytest.skip("an external cluster is configured; the cluster tests kill the local cluster's nodes")
    cluster = LocalCluster(port=port, brokers=3, heap_mb=heap_mb)
    kafka_cluster.stop(cluster)
    kafka_cluster.wipe(cluster)
    kafka_cluster.start(cluster)
    try:
        yield cluster
    finally:
        kafka_cluster.stop(cluster)
        kafka_cluster.wipe(cluster)


def leaders(kafka: KafkaConfig, topics: Iterable[str]) -> dict[int, list[str]]:
    """Node id -> the partitions (``topic[p]``) of ``topics`` it leads."""
    metadata = AdminClient(kafka.admin()).list_topics(timeout=30)
    found: dict[int, list[str]] = {}
    for topic in topics:
        for partition in metadata.topics[topic].partitions.values():
            found.setdefault(partition.leader, []).append(f"{topic}[{partition.id}]")
    return found


def busiest_leader(kafka: KafkaConfig, topics: Iterable[str]) -> tuple[int, list[str]]:
    """The node that leads the most partitions of ``topics``, and those partitions."""
    found = leaders(kafka, topics)
    node = max(found, key=lambda node_id: (len(found[node_id]), -node_id))
    return node, found[node]


def fully_replicated(kafka: KafkaConfig) -> bool:
    """Whether every partition of the cluster has all its replicas in sync."""
    try:
        metadata = AdminClient(kafka.admin()).list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - a cluster that cannot answer is not fully replicated
        return False
    return all(len(partition.isrs) == len(partition.replicas)
               for topic in metadata.topics.values() for partition in topic.partitions.values())


def wait_fully_replicated(kafka: KafkaConfig, timeout_s: float = 180.0) -> float:
    """Wait until every replica is in sync again (after a node came back); the seconds waited."""
    began = time.monotonic()
    while not fully_replicated(kafka):
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"partitions still under-replicated after {timeout_s} s")
        time.sleep(1.0)
    return time.monotonic() - began


def pid(cluster: LocalCluster, node_id: int) -> int:
    found = kafka_local.running_pid(cluster.node(node_id))
    assert found is not None, f"node {node_id} is not running"
    return found


def sigkill(cluster: LocalCluster, node_id: int) -> None:
    os.kill(pid(cluster, node_id), signal.SIGKILL)
    node = cluster.node(node_id)
    deadline = time.monotonic() + 30
    while kafka_local.running_pid(node) is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def restart_down_nodes(cluster: LocalCluster) -> None:
    """``kafka start`` again: only the nodes that are down start."""
    kafka_cluster.start(cluster, timeout_s=180)


class CommitClock(threading.Thread):
    """Polls each stage's committed progress and keeps when it moved (module docstring)."""

    def __init__(self, deployment: r.Deployment, poll_s: float = 0.5) -> None:
        super().__init__(daemon=True, name="commit-clock")
        self.deployment, self.poll_s = deployment, poll_s
        self.moves: dict[str, list[float]] = {}
        self._last: dict[str, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for stage in self.deployment.stages:
                value = self.deployment.progress(stage)
                if value is not None and value != self._last.get(stage):
                    if stage in self._last:
                        self.moves.setdefault(stage, []).append(time.monotonic())
                    self._last[stage] = value
            self._done.wait(self.poll_s)

    def stop(self) -> None:
        self._done.set()
        self.join(30)

    def committed_since(self, stage: str, moment: float) -> bool:
        return any(at > moment for at in self.moves.get(stage, []))

    def next_commit_after(self, stage: str, moment: float) -> float | None:
        """Seconds from ``moment`` to the stage's first commit seen after it (None: none yet)."""
        later = [at for at in self.moves.get(stage, []) if at > moment]
        return round(later[0] - moment, 1) if later else None


def exits_summary(deployment: r.Deployment) -> dict[str, object]:
    """What the workers did on their own and what their supervisor did: in-place restarts by the
    watchdog (``restarting in place`` in their logs), exits the supervisor restarted, stalls."""
    restarts = {w.name: w.log.read_text(errors="replace").count("restarting in place")
                for w in deployment.workers}
    kinds = Counter("exited" if i.what.startswith("exited") else "stalled" for i in deployment.interventions)
    return {"in_place_restarts": restarts, "supervisor": dict(kinds),
            "interventions": [f"{i.at_s}s {i.worker}: {i.what}" for i in deployment.interventions]}
