"""Topics this project creates, and what a record written to each may weigh.

:func:`ensure_topics` creates a stage's missing topics (retrying a request cut short while the
cluster's brokers change) and refuses an internal topic whose partition count is not the shard
count; :func:`output_limits` reads each written topic's ``max.message.bytes``, so a record too
large for it becomes a dead letter instead of failing the whole transaction
(:mod:`streams.runtime.outputs`). Client configurations are :mod:`streams.runtime.kafka_io`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # re-exported by confluent_kafka.admin, undeclared
from confluent_kafka.cimpl import NewTopic  # re-exported by confluent_kafka.admin, not declared there

from streams.errors import BrokerError, ConfigError, ShardCountMismatch
from streams.runtime.kafka_io import RECORD_OVERHEAD, TOPIC_MAX_MESSAGE_BYTES, KafkaConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic this project creates: name, partitions, and topic configs."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    fixed_partitions: bool = False  # internal topics: a different existing count is an error


COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
CLUSTER_DEFAULT = -1  # a NewTopic's replication factor that takes the broker's default.replication.factor


@dataclass(frozen=True)
class Replication:
    """How many copies a created topic keeps (its replication factor), and how many must hold a write
    before the broker acknowledges it (its ``min.insync.replicas``). How a stage chooses them, and
    checks the cluster can keep them: :mod:`streams.runtime.replication`."""

    factor: int
    min_insync: int

    def config(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


def ensure_topics(kafka: KafkaConfig, specs: Iterable[TopicSpec], replication: Replication | None = None,
                  timeout_s: float = 30.0) -> None:
    """Create missing topics (with ``replication``, else the cluster's defaults); refuse internal
    topics whose partition count differs."""
    admin = AdminClient(kafka.admin())
    specs = list(specs)
    existing = admin.list_topics(timeout=timeout_s).topics
    for spec in specs:
        if spec.name in existing and spec.fixed_partitions:
            found = len(existing[spec.name].partitions)
            if found != spec.partitions:
                raise ShardCountMismatch(
                    f"topic {spec.name} has {found} partitions but shards={spec.partitions}; "
                    f"state is partitioned by shard, so start with shards={found}, or move the state "
                    f"to {spec.partitions} shards with 'python -m streams reshard' "
                    f"(docs/production.md, 'Scaling out')"
                )
    missing = [spec for spec in specs if spec.name not in existing]
    if not missing:
        return
    factor = CLUSTER_DEFAULT if replication is None else replication.factor
    extra = {} if replication is None else replication.config()
    pending = missing
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, factor, config={**extra, **s.config}) for s in pending],
            operation_timeout=timeout_s,
        )
        failed = {name: _create_failure(name, future, attempt) for name, future in futures.items()}
        pending = [spec for spec in pending if failed.get(spec.name)]
        if not pending:
            break
        time.sleep(1.0)
    _wait_until_visible(admin, [spec.name for spec in missing], timeout_s)
    log.info("created topics %s", ", ".join(s.name for s in missing))


# A request cut short while the cluster's brokers change (one restarting, or just started: librdkafka
# drops the handle of a broker that left the metadata, failing what it had in flight) is tried again.
CREATE_ATTEMPTS = 3
_CREATE_TRANSIENT = frozenset({KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                               KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER})


def _create_failure(name: str, future: Any, attempt: int) -> bool:
    """Whether creating ``name`` must be tried again; raises when it cannot be created."""
    try:
        future.result()
    except KafkaException as error:
        code = error.args[0].code()
        if code == KafkaError.TOPIC_ALREADY_EXISTS:  # another worker won the race (or a retry did)
            return False
        if code in _CREATE_TRANSIENT and attempt < CREATE_ATTEMPTS:
            log.warning("creating topic %s: %s; trying again", name, error.args[0].str())
            return True
        raise ConfigError(f"cannot create topic {name}: {error}") from error
    return False


def output_limits(kafka: KafkaConfig, topics: Iterable[str], timeout_s: float = 30.0) -> dict[str, int]:
    """The largest key plus value a worker may write to each of ``topics``.

    That is the topic's ``max.message.bytes`` (which the broker enforces on the batch, turning a
    larger record into an error that fails the whole transaction) less :data:`RECORD_OVERHEAD`,
    and never more than a ``message.max.bytes`` set by the operator (which librdkafka enforces
    before sending). A topic whose configuration cannot be read (no DescribeConfigs permission) is
    taken to have the broker's default, which errs on the side of a dead letter.
    """
    names = list(dict.fromkeys(topics))
    if not names:
        return {}
    admin = AdminClient(kafka.admin())
    futures = admin.describe_configs([ConfigResource("topic", name) for name in names],
                                     request_timeout=timeout_s)
    client = kafka.client_max_message_bytes()
    limits: dict[str, int] = {}
    for resource, future in futures.items():
        try:
            topic_limit = int(future.result()["max.message.bytes"].value)
        except (KafkaException, KeyError, ValueError) as error:
            log.warning("max.message.bytes of %s unreadable (%s): assuming %d", resource.name, error,
                        TOPIC_MAX_MESSAGE_BYTES)
            topic_limit = TOPIC_MAX_MESSAGE_BYTES
        if client is not None:
            topic_limit = min(topic_limit, client)
        limits[resource.name] = topic_limit - RECORD_OVERHEAD
    admin.poll(0)  # serve the request's last event, which librdkafka would otherwise log as unserved
    return limits


def _wait_until_visible(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Return once every topic has partitions in the metadata clients will fetch.

    A created topic can be missing from a broker's metadata for a moment; a consumer that subscribes
    then drops it as unknown until its next metadata refresh (``topic.metadata.refresh.interval.ms``,
    5 minutes), so a worker would route into its shard topic and never read it back.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        topics = admin.list_topics(timeout=timeout_s).topics
        if all(name in topics and topics[name].error is None and topics[name].partitions for name in names):
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"created topics not visible after {timeout_s} s: {', '.join(names)}")
        time.sleep(0.1)
