"""A single-node Apache Kafka broker (KRaft) on 127.0.0.1 for tests, the demo and benchmarks.

Why a project-run broker: nothing on PyPI, npm or Debian ships a Kafka broker, so the pinned
release's jars come from Maven Central into the per-user cache (:mod:`streams.broker.kafka_release`), and
the broker runs from there: an installed package needs no checkout and no Maven. This module writes
a ``server.properties``, formats the log directory once (``kafka.tools.StorageTool format``), starts
``kafka.Kafka`` as a detached JVM and records its pid, so ``start``/``stop``/``status`` work across
shell sessions. A broker's folder (``broker-<port>`` beside the release in the cache) holds its
data: the local broker is for development, tests and demos, disposable like a cache
(``kafka wipe`` deletes it).

When ``KAFKA_BOOTSTRAP_SERVERS`` is set nothing here is used: callers take that cluster instead
(see :func:`streams.config.bootstrap_servers`).

The broker settings favour quick tests on a 2-core machine over durability: replication factor 1,
few internal partitions, no initial rebalance delay, and short transaction clean-up intervals so a
SIGKILLed worker's open transaction is aborted promptly once its successor fences it.

A :class:`LocalBroker` is also one node of a local cluster (:mod:`streams.broker.kafka_cluster`): its node
id, the quorum's voters and the replication its topics default to are fields, and its folder is the
cluster's. With a SCRAM listener the broker authorizes requests (KRaft's ``StandardAuthorizer``):
the PLAINTEXT and controller listeners' ``ANONYMOUS`` principal is a super user and a resource
without ACLs is open to all, so nothing changes until a test or an operator adds an ACL (how a
revoked permission is tried, tests/kafka/test_hostile_cluster_kafka.py).
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from streams.broker import kafka_release
from streams.errors import BrokerError

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_REAUTH_MS = 10_000

# Brokers started by this process, kept so stop() can reap them (no zombie, no ResourceWarning).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class LocalBroker:
    """Where one local broker lives: its ports and its folder in the cache."""

    port: int = 19092
    controller_port: int = 19093
    heap_mb: int = 768
    home: Path = field(default_factory=kafka_release.cache_root)
    # A second client listener, SASL_PLAINTEXT with SCRAM-SHA-512, when set: how the project tests
    # that security settings reach every client. The credentials are created at format time.
    scram_port: int | None = None
    scram_user: str = "crawl"
    scram_password: str = "crawl-secret"
    # One node of a local cluster (streams.broker.kafka_cluster): its id, every controller of the quorum as
    # (node id, controller port) (empty: this node alone), the replication factor topics default to
    # (min.insync.replicas one less, at least 1), its folder under ``home``, the shared cluster id.
    node_id: int = 1
    voters: tuple[tuple[int, int], ...] = ()
    replication: int = 1
    folder: str | None = None
    cluster_id: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def scram_bootstrap(self) -> str | None:
        return None if self.scram_port is None else f"127.0.0.1:{self.scram_port}"

    def scram_client_settings(self) -> dict[str, str]:
        """librdkafka properties for the SCRAM listener (what ``STREAMS_KAFKA_*`` would carry)."""
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": self.scram_user, "sasl.password": self.scram_password}

    @property
    def lib_dir(self) -> Path:
        return kafka_release.lib_dir(kafka_release.pinned(), self.home)

    @property
    def run_dir(self) -> Path:
        return self.home / (self.folder or f"broker-{self.port}")

    @property
    def min_insync_replicas(self) -> int:
        return max(1, self.replication - 1)

    @property
    def clustered(self) -> bool:
        return len(self.voters) > 1

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "broker.log"


def ensure_jars(broker: LocalBroker) -> None:
    """The pinned Kafka release in the broker's cache, fetched from Maven Central once."""
    kafka_release.ensure(kafka_release.pinned(), broker.home, kafka_release.repository(), sys.stderr)


def _properties(broker: LocalBroker) -> str:
    voters = broker.voters or ((broker.node_id, broker.controller_port),)
    replication, min_isr = str(broker.replication), str(broker.min_insync_replicas)
    settings = _listeners(broker) | {
        "process.roles": "broker,controller",
        "node.id": str(broker.node_id),
        "controller.quorum.voters": ",".join(f"{node}@127.0.0.1:{port}" for node, port in voters),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(broker.data_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "8",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "5000",
        "log.retention.check.interval.ms": "60000",
        "log.cleaner.backoff.ms": "5000",
        "delete.topic.enable": "true",
    }
    if broker.clustered:
        settings |= CLUSTER_NODE_THREADS
    return "".join(f"{name}={value}\n" for name, value in settings.items())


# Three nodes share two cores in a local cluster: fewer request and replication threads than Kafka's
# defaults (3 network, 8 I/O threads), which are sized for a broker with a machine of its own.
CLUSTER_NODE_THREADS = {"num.network.threads": "2", "num.io.threads": "2", "num.replica.fetchers": "1",
                        "background.threads": "2", "log.cleaner.threads": "1"}
# ...and fewer JVM threads: one garbage-collector thread of each kind, two JIT compiler threads.
CLUSTER_NODE_JVM = ("-XX:ParallelGCThreads=1", "-XX:ConcGCThreads=1", "-XX:CICompilerCount=2")


def _listeners(broker: LocalBroker) -> dict[str, str]:
    """PLAINTEXT and CONTROLLER on loopback, plus SASL_PLAINTEXT/SCRAM when ``scram_port`` is set."""
    listeners = [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    extra: dict[str, str] = {}
    if broker.scram_port is not None:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{broker.scram_port}")
        protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
        extra = {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            # A credential changed or deleted must end the sessions it opened, not only refuse new
            # ones: clients re-authenticate at least this often (KIP-368).
            "listener.name.sasl_plaintext.connections.max.reauth.ms": str(SCRAM_REAUTH_MS),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "true",
        }
    return {
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{broker.controller_port}"]),
        "advertised.listeners": ",".join(listeners),
        "listener.security.protocol.map": ",".join(protocols),
        **extra,
    }


def _log4j_config(broker: LocalBroker) -> Path:
    path = broker.run_dir / "log4j2.properties"
    path.write_text(
        "rootLogger.level = WARN\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {broker.log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d %p %c: %m%n\n"
        "logger.server.name = kafka.server.KafkaServer\n"
        "logger.server.level = INFO\n"
    )
    return path


def _java(broker: LocalBroker, main_class: str, *args: str, heap_mb: int = 256) -> list[str]:
    lean = CLUSTER_NODE_JVM if broker.clustered else ()
    return [
        _java_executable(), f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC", *lean,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={_log4j_config(broker)}",
        "-cp", str(broker.lib_dir / "*"), main_class, *args,
    ]


@functools.cache
def _java_executable() -> str:
    return kafka_release.java()


def _format_storage(broker: LocalBroker, config: Path) -> None:
    if (broker.data_dir / "meta.properties").exists():
        return
    encoded = broker.cluster_id or new_cluster_id()
    command = _java(broker, "kafka.tools.StorageTool", "format", "-t", encoded, "-c", str(config))
    if broker.scram_port is not None:  # KRaft keeps SCRAM credentials in the metadata log
        command += ["--add-scram",
                    f"{SCRAM_MECHANISM}=[name={broker.scram_user},password={broker.scram_password}]"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BrokerError(f"formatting the KRaft log directory failed:\n{result.stdout}{result.stderr}")


def new_cluster_id() -> str:
    """A random KRaft cluster id (a URL-safe base64 UUID, as ``kafka-storage random-uuid`` prints)."""
    encoded = "-"
    while encoded.startswith("-"):  # the format tool would read a leading "-" as an option
        encoded = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return encoded


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def running_pid(broker: LocalBroker) -> int | None:
    """The broker's pid when its pid file names a live process, else ``None``."""
    try:
        pid = int(broker.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return None  # our own child exited (reaped now)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def start(broker: LocalBroker, timeout_s: float = 90.0) -> str:
    """Start the broker unless it runs already; return its bootstrap address once it answers."""
    launch(broker)
    wait_ready(broker, timeout_s)
    return broker.bootstrap


def launch(broker: LocalBroker) -> bool:
    """Start the broker's JVM unless it runs already, without waiting for it to answer (the nodes
    of a cluster start together: none answers before a majority of its quorum is up). Whether it
    was started."""
    if running_pid(broker) is not None:
        return False
    for port in (broker.port, broker.controller_port, broker.scram_port):
        if port is not None and _port_open(port):
            raise BrokerError(f"port {port} is taken by another process; choose another --port")
    _java_executable()  # before a download that would be of no use without it
    ensure_jars(broker)
    broker.run_dir.mkdir(parents=True, exist_ok=True)
    config = broker.run_dir / "server.properties"
    config.write_text(_properties(broker))
    _format_storage(broker, config)
    command = _java(broker, "kafka.Kafka", str(config), heap_mb=broker.heap_mb)
    with open(broker.run_dir / "stdout.log", "ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    broker.pid_file.write_text(str(process.pid))
    _CHILDREN[process.pid] = process
    return True


def wait_ready(broker: LocalBroker, timeout_s: float, brokers: int = 1) -> None:
    """Wait until the broker serves metadata naming ``brokers`` live brokers (a port that accepts
    is not enough in KRaft)."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        if running_pid(broker) is None:
            raise BrokerError(f"the broker exited during start-up; see {broker.run_dir / 'stdout.log'}")
        try:
            metadata = admin.list_topics(timeout=2)
            if len(metadata.brokers) >= brokers:
                return
        except Exception:  # noqa: BLE001 - any client error means "not ready yet"
            pass
        time.sleep(0.3)
    raise BrokerError(f"the broker at {broker.bootstrap} did not answer within {timeout_s:.0f} s; "
                      f"see {broker.log_file}")


def stop(broker: LocalBroker, timeout_s: float = 30.0) -> bool:
    """Stop the broker (SIGTERM, then SIGKILL); return whether one was running."""
    pid = running_pid(broker)
    if pid is None:
        broker.pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)  # a stopped (SIGSTOP) broker takes its SIGTERM once it runs again
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running_pid(broker) is not None:
        time.sleep(0.2)
    if running_pid(broker) is not None:
        os.kill(pid, signal.SIGKILL)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait(timeout_s)
    broker.pid_file.unlink(missing_ok=True)
    return True


def wipe(broker: LocalBroker) -> None:
    """Delete the broker's data (only when it is stopped)."""
    if running_pid(broker) is not None:
        raise BrokerError("stop the broker before wiping its data")
    shutil.rmtree(broker.run_dir, ignore_errors=True)


def status(broker: LocalBroker) -> str:
    pid = running_pid(broker)
    if pid is None:
        return f"stopped ({broker.bootstrap})"
    return f"running pid {pid} at {broker.bootstrap}"


def node_status(broker: LocalBroker) -> dict[str, object]:
    """What ``kafka status --json`` prints for one node."""
    pid = running_pid(broker)
    return {"node_id": broker.node_id, "pid": pid, "port": broker.port, "running": pid is not None}
