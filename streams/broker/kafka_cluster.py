"""A local Apache Kafka cluster of several KRaft nodes on 127.0.0.1, to try what a replicated
cluster does to the stages: a partition leader killed, restarted or stalled, a rolling restart.

Why combined nodes (each ``broker,controller``) rather than a quorum of three controllers beside
three brokers: three JVMs instead of six on a 2-core machine, and killing a node then takes a
controller with it, which is the harder case (a leader election of the metadata quorum beside the
partitions'). Every node is a voter of the quorum (``controller.quorum.voters``, static), so three
nodes keep a majority with one down.

Topics default to replication factor 3 (or the node count, when smaller) and
``min.insync.replicas`` one less: with 3 nodes, any one may be down while every acknowledged write
still has two copies (Kafka's promise: no acknowledged write is lost while ``min.insync.replicas``
replicas live). The transaction log and the group offsets topic get the same. Each node is a
:class:`~streams.broker.kafka_local.LocalBroker` with its own folder under the cluster's,
``<cache>/cluster-<port>/node-<id>``; ``cluster.json`` beside them records the layout, so
``kafka start|stop|status|wipe --port P`` find the cluster without being told its size again.

Ports, for base port P: node *k* (node id *k*, from 1) listens for clients on P + 2(k-1) and for
its quorum on the port above; with a SCRAM listener at S, node *k*'s is S + k - 1. Heaps: 512 MB a
node by default (1.5 GB for three, on a 24 GB machine), with fewer threads than Kafka's defaults
(:data:`~streams.broker.kafka_local.CLUSTER_NODE_THREADS`).
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from streams.broker import kafka_local, kafka_release
from streams.broker.kafka_local import LocalBroker
from streams.errors import BrokerError

LAYOUT_FILE = "cluster.json"
MAX_REPLICATION = 3


@dataclass(frozen=True)
class LocalCluster:
    """A local cluster: its base port, node count, heap per node and optional SCRAM base port."""

    port: int = 19092
    brokers: int = 3
    heap_mb: int = 512
    home: Path = field(default_factory=kafka_release.cache_root)
    scram_port: int | None = None

    @property
    def run_dir(self) -> Path:
        return self.home / f"cluster-{self.port}"

    @property
    def replication(self) -> int:
        return min(MAX_REPLICATION, self.brokers)

    @property
    def voters(self) -> tuple[tuple[int, int], ...]:
        return tuple((node_id, self.port + 2 * (node_id - 1) + 1) for node_id in self.node_ids)

    @property
    def node_ids(self) -> range:
        return range(1, self.brokers + 1)

    def node(self, node_id: int, cluster_id: str | None = None) -> LocalBroker:
        """Node ``node_id`` (from 1); ``cluster_id`` is needed only to format its storage."""
        offset = node_id - 1
        return LocalBroker(
            port=self.port + 2 * offset, controller_port=self.port + 2 * offset + 1, heap_mb=self.heap_mb,
            home=self.home, scram_port=None if self.scram_port is None else self.scram_port + offset,
            node_id=node_id, voters=self.voters, replication=self.replication,
            folder=f"cluster-{self.port}/node-{node_id}", cluster_id=cluster_id)

    def nodes(self, cluster_id: str | None = None) -> list[LocalBroker]:
        return [self.node(node_id, cluster_id) for node_id in self.node_ids]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes())

    @property
    def scram_bootstrap(self) -> str | None:
        found = [node.scram_bootstrap for node in self.nodes()]
        return None if None in found else ",".join(str(address) for address in found)


def find(port: int, home: Path | None = None) -> LocalCluster | None:
    """The cluster whose base port is ``port``, as its ``cluster.json`` records it, if there is one."""
    root = home or kafka_release.cache_root()
    path = root / f"cluster-{port}" / LAYOUT_FILE
    try:
        layout = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise BrokerError(f"cannot read {path}: {error}; 'kafka wipe --port {port}' removes it") from error
    return LocalCluster(port=port, brokers=int(layout["brokers"]), heap_mb=int(layout["heap_mb"]),
                        home=root, scram_port=layout.get("scram_port"))


def _cluster_id(cluster: LocalCluster) -> str:
    """The cluster id every node is formatted with: recorded at the first start, read after."""
    path = cluster.run_dir / LAYOUT_FILE
    recorded = find(cluster.port, cluster.home)
    if recorded is not None:
        if recorded.brokers != cluster.brokers:
            raise BrokerError(f"the cluster at port {cluster.port} has {recorded.brokers} nodes, not "
                              f"{cluster.brokers}; 'kafka wipe --port {cluster.port}' (stopped) removes it")
        return str(json.loads(path.read_text())["cluster_id"])
    cluster.run_dir.mkdir(parents=True, exist_ok=True)
    cluster_id = kafka_local.new_cluster_id()
    path.write_text(json.dumps({"brokers": cluster.brokers, "heap_mb": cluster.heap_mb,
                                "scram_port": cluster.scram_port, "cluster_id": cluster_id}) + "\n")
    return cluster_id


def start(cluster: LocalCluster, timeout_s: float = 120.0) -> str:
    """Start the nodes that are down (all, the first time), wait until every node serves metadata
    naming all of them, and return the bootstrap list. Nodes already running are left alone."""
    nodes = cluster.nodes(_cluster_id(cluster))
    for node in nodes:
        kafka_local.launch(node)
    for node in nodes:
        kafka_local.wait_ready(node, timeout_s, brokers=cluster.brokers)
    return cluster.bootstrap


def stop(cluster: LocalCluster, timeout_s: float = 30.0) -> int:
    """Stop every node at once (SIGTERM, then SIGKILL after ``timeout_s``); how many were running."""
    with ThreadPoolExecutor(max_workers=cluster.brokers) as pool:
        return sum(pool.map(lambda node: kafka_local.stop(node, timeout_s), cluster.nodes()))


def wipe(cluster: LocalCluster) -> None:
    """Delete the cluster's data and layout (every node stopped)."""
    if any(kafka_local.running_pid(node) is not None for node in cluster.nodes()):
        raise BrokerError("stop the cluster before wiping its data")
    shutil.rmtree(cluster.run_dir, ignore_errors=True)


def status(cluster: LocalCluster) -> list[dict[str, object]]:
    """One ``{"node_id", "pid", "port", "running"}`` per node."""
    return [kafka_local.node_status(node) for node in cluster.nodes()]
