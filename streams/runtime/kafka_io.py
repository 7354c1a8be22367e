"""Kafka clients and topics: the one place that builds confluent-kafka configurations.

Every producer uses the ``murmur2_random`` partitioner, the Java client's (and aiokafka's)
partitioner: librdkafka's default, ``consistent_random``, hashes keys with CRC32, so a record keyed
by host would land on a different partition than a Java fetcher's record with the same key
(field notes, confluent-kafka-python). Security and tuning properties from
:func:`streams.config.kafka_client_settings` are laid over every configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # re-exported by confluent_kafka.admin, not declared there

from streams.errors import ConfigError, ShardCountMismatch

log = logging.getLogger(__name__)

PARTITIONER = "murmur2_random"


@dataclass(frozen=True)
class KafkaConfig:
    """Bootstrap address plus pass-through client properties (SASL, TLS...)."""

    bootstrap_servers: str
    client: Mapping[str, str] = field(default_factory=dict)

    def _base(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.client}

    def producer(self, **extra: Any) -> dict[str, Any]:
        return {"partitioner": PARTITIONER, "linger.ms": 5, **self._base(), **extra}

    def transactional_producer(self, transactional_id: str, timeout_s: float) -> dict[str, Any]:
        return self.producer(**{
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": int(timeout_s * 1000),
        })

    def consumer(self, group_id: str, **extra: Any) -> dict[str, Any]:
        return {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            **self._base(),
            **extra,
        }

    def admin(self) -> dict[str, Any]:
        return self._base()


@dataclass(frozen=True)
class TopicSpec:
    """A topic this project creates: name, partitions, and topic configs."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    fixed_partitions: bool = False  # internal topics: a different existing count is an error


COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}


def ensure_topics(kafka: KafkaConfig, specs: Iterable[TopicSpec], replication_factor: int = 1,
                  timeout_s: float = 30.0) -> None:
    """Create missing topics; refuse internal topics whose partition count differs."""
    admin = AdminClient(kafka.admin())
    specs = list(specs)
    existing = admin.list_topics(timeout=timeout_s).topics
    for spec in specs:
        if spec.name in existing and spec.fixed_partitions:
            found = len(existing[spec.name].partitions)
            if found != spec.partitions:
                raise ShardCountMismatch(
                    f"topic {spec.name} has {found} partitions but shards={spec.partitions}; "
                    f"state is partitioned by shard, so start with shards={found} or migrate "
                    "(see README, 'Changing the shard count')"
                )
    missing = [spec for spec in specs if spec.name not in existing]
    if not missing:
        return
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, replication_factor, config=dict(s.config)) for s in missing],
        operation_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as error:
            if error.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: another worker won the race
                raise ConfigError(f"cannot create topic {name}: {error}") from error
    log.info("created topics %s", ", ".join(s.name for s in missing))


def new_producer(config: Mapping[str, Any]) -> Producer:
    return Producer(dict(config))


def new_consumer(config: Mapping[str, Any]) -> Consumer:
    return Consumer(dict(config))
