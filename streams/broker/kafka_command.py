"""The ``kafka`` command: the local broker, or a local cluster of several nodes, for development,
tests and the demo (:mod:`streams.broker.kafka_local`, :mod:`streams.broker.kafka_cluster`).

``start``, ``stop``, ``status`` and ``wipe`` find a cluster by its base ``--port`` (the layout its
first start recorded), so only the first ``start`` needs ``--brokers``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from streams import config
from streams.broker import kafka_cluster, kafka_local
from streams.errors import StreamsError


def add_parser(commands: Any) -> None:
    """The ``kafka`` command."""
    kafka = commands.add_parser(
        "kafka", help="the local KRaft broker or cluster (development, tests)",
        description="A single-node Apache Kafka broker (KRaft) on 127.0.0.1 for development, tests and "
                    "the demo, or with --brokers N a local cluster of N nodes (each a combined "
                    "controller and broker; topics default to replication factor 3, or N when "
                    "smaller, and min.insync.replicas one less). Its pinned release is fetched from "
                    "Maven Central into the user's cache on first use (CRAWL_DEDUP_CACHE_DIR, else "
                    "XDG_CACHE_HOME/crawl-dedup, else ~/.cache/crawl-dedup; "
                    "CRAWL_DEDUP_MAVEN_REPOSITORY names a mirror); it needs Java 17 or later. fetch only "
                    "fetches the release. start starts what is down and prints the bootstrap "
                    "address(es); status exits 3 when a node is down.")
    kafka.add_argument("action", choices=["start", "stop", "status", "wipe", "fetch"])
    kafka.add_argument("--port", type=int, default=19092,
                       help="client port (controller: port+1); of a cluster, node k's client port is "
                            "port+2(k-1), its controller port the one above")
    kafka.add_argument("--brokers", type=int, default=None,
                       help="start a local cluster of this many nodes (default: the cluster already at "
                            "--port, else one broker); stop, status and wipe find it by --port")
    kafka.add_argument("--scram-port", type=int, default=None,
                       help="also listen with SASL_PLAINTEXT/SCRAM-SHA-512 here (of a cluster, node k at "
                            "this port + k-1; user crawl, password crawl-secret; set when the data "
                            "directory is first formatted)")
    kafka.add_argument("--json", action="store_true",
                       help='status: one JSON object per node, {"node_id", "pid", "port", "running"}')
    kafka.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``kafka <action>``; the exit status (3: status found a node down)."""
    broker = kafka_local.LocalBroker(port=args.port, controller_port=args.port + 1,
                                     scram_port=args.scram_port)
    if args.action == "fetch":
        kafka_local.ensure_jars(broker)
        print(broker.lib_dir)
        return 0
    external = config.bootstrap_servers()
    if external and args.action in {"start", "stop"}:
        print(f"KAFKA_BOOTSTRAP_SERVERS={external} is set: using that cluster, no local broker")
        return 0
    cluster = _local_cluster(args)
    if cluster is not None:
        return _kafka_cluster(args, cluster)
    if args.action == "start":
        print(kafka_local.start(broker))
    elif args.action == "stop":
        print("stopped" if kafka_local.stop(broker) else "not running")
    elif args.action == "wipe":
        kafka_local.wipe(broker)
        print(f"wiped {broker.run_dir}")
    else:
        print(json.dumps(kafka_local.node_status(broker)) if args.json else kafka_local.status(broker))
        return 0 if kafka_local.running_pid(broker) else 3
    return 0


def _local_cluster(args: argparse.Namespace) -> kafka_cluster.LocalCluster | None:
    """``--brokers N`` above 1, or the cluster already recorded at ``--port``; else None (one node)."""
    if args.brokers is None:
        return kafka_cluster.find(args.port)
    if args.brokers < 1:
        raise StreamsError(f"--brokers must be at least 1, not {args.brokers}")
    if args.brokers == 1:
        return None
    return kafka_cluster.LocalCluster(port=args.port, brokers=args.brokers, scram_port=args.scram_port)


def _kafka_cluster(args: argparse.Namespace, cluster: kafka_cluster.LocalCluster) -> int:
    if args.action == "start":
        print(kafka_cluster.start(cluster))
    elif args.action == "stop":
        stopped = kafka_cluster.stop(cluster)
        print(f"stopped {stopped} of {cluster.brokers} nodes" if stopped else "not running")
    elif args.action == "wipe":
        kafka_cluster.wipe(cluster)
        print(f"wiped {cluster.run_dir}")
    else:
        nodes = kafka_cluster.status(cluster)
        for node in nodes:
            state = f"running pid {node['pid']}" if node["running"] else "stopped"
            text = f"node {node['node_id']}: {state} at 127.0.0.1:{node['port']}"
            print(json.dumps(node) if args.json else text)
        return 0 if all(node["running"] for node in nodes) else 3
    return 0
