"""The local cluster's layout without starting it (issue 37): ports, quorum, replication, the
recorded layout, and ``kafka status --json`` of a cluster whose nodes are down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.broker import kafka_cluster, kafka_local
from streams.broker.kafka_cluster import LocalCluster
from streams.errors import BrokerError


def _settings(broker: kafka_local.LocalBroker) -> dict[str, str]:
    lines = kafka_local._properties(broker).splitlines()
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize(("brokers", "replication", "min_isr"), [(2, 2, 1), (3, 3, 2), (5, 3, 2)])
def test_nodes_ports_quorum_and_replication(brokers: int, replication: int, min_isr: int,
                                            tmp_path: Path) -> None:
    cluster = LocalCluster(port=19800, brokers=brokers, home=tmp_path, scram_port=19900)
    nodes = cluster.nodes()
    assert [node.port for node in nodes] == [19800 + 2 * k for k in range(brokers)]
    assert [node.controller_port for node in nodes] == [19801 + 2 * k for k in range(brokers)]
    assert [node.scram_port for node in nodes] == [19900 + k for k in range(brokers)]
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{19800 + 2 * k}" for k in range(brokers))
    settings = _settings(nodes[-1])
    assert settings["node.id"] == str(brokers)
    assert settings["controller.quorum.voters"] == ",".join(
        f"{k + 1}@127.0.0.1:{19801 + 2 * k}" for k in range(brokers))
    for name in ("default.replication.factor", "offsets.topic.replication.factor",
                 "transaction.state.log.replication.factor"):
        assert settings[name] == str(replication), name
    assert settings["min.insync.replicas"] == settings["transaction.state.log.min.isr"] == str(min_isr)
    assert settings["num.io.threads"] == "2"
    assert nodes[0].run_dir == tmp_path / "cluster-19800" / "node-1"
    assert {node.run_dir for node in nodes} == {tmp_path / "cluster-19800" / f"node-{k + 1}"
                                                 for k in range(brokers)}


def test_the_single_broker_keeps_its_settings(tmp_path: Path) -> None:
    broker = kafka_local.LocalBroker(port=19810, controller_port=19811, home=tmp_path)
    settings = _settings(broker)
    assert settings["controller.quorum.voters"] == "1@127.0.0.1:19811"
    assert settings["default.replication.factor"] == settings["min.insync.replicas"] == "1"
    assert "num.io.threads" not in settings
    assert broker.run_dir == tmp_path / "broker-19810"
    assert "authorizer.class.name" not in settings
    scram = _settings(kafka_local.LocalBroker(port=19810, controller_port=19811, scram_port=19812))
    assert scram["authorizer.class.name"].endswith("StandardAuthorizer")
    assert scram["allow.everyone.if.no.acl.found"] == "true" and scram["super.users"] == "User:ANONYMOUS"


def test_the_layout_is_recorded_and_found_again(tmp_path: Path) -> None:
    assert kafka_cluster.find(19820, tmp_path) is None
    cluster = LocalCluster(port=19820, brokers=3, heap_mb=384, home=tmp_path)
    cluster_id = kafka_cluster._cluster_id(cluster)
    assert kafka_cluster._cluster_id(cluster) == cluster_id  # the same for every node, every start
    assert kafka_cluster.find(19820, tmp_path) == cluster
    with pytest.raises(BrokerError, match="has 3 nodes, not 5"):
        kafka_cluster._cluster_id(LocalCluster(port=19820, brokers=5, home=tmp_path))
    assert [node["running"] for node in kafka_cluster.status(cluster)] == [False, False, False]
    kafka_cluster.wipe(cluster)
    assert kafka_cluster.find(19820, tmp_path) is None


def test_status_json_prints_one_object_per_node(tmp_path: Path) -> None:
    kafka_cluster._cluster_id(LocalCluster(port=19830, brokers=3, home=tmp_path))
    env = {**os.environ, "CRAWL_DEDUP_CACHE_DIR": str(tmp_path)}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    result = subprocess.run([sys.executable, "-m", "streams", "kafka", "status", "--port", "19830", "--json"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 3, result.stderr  # nodes down
    nodes = [json.loads(line) for line in result.stdout.splitlines()]
    assert nodes == [{"node_id": k, "pid": None, "port": 19830 + 2 * (k - 1), "running": False}
                     for k in (1, 2, 3)]
    single = subprocess.run([sys.executable, "-m", "streams", "kafka", "status", "--port", "19836", "--json"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert single.returncode == 3
    assert json.loads(single.stdout) == {"node_id": 1, "pid": None, "port": 19836, "running": False}
