"""Where the runtime's Kafka clients come from: one small interface, confluent-kafka by default.

The engine, its changelog recovery and its record reader make every consumer and producer they use
through a :class:`KafkaClients` (as httpx takes a transport), so a test can hand them an in-memory
broker (``testing/memory_kafka.py``) and drive crashes, aborts and rebalances through the engine's
public steps, with no broker and no reaching into the engine's fields. Production code never passes
one: :data:`CONFLUENT` makes librdkafka clients from the configurations
:class:`~streams.runtime.kafka_io.KafkaConfig` builds.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from confluent_kafka import Consumer, Producer

from streams.runtime.describe import Describer, ProcessDescriber


class KafkaClients(Protocol):
    """Makes a client from a librdkafka configuration."""

    def consumer(self, config: dict[str, Any]) -> Consumer: ...

    def producer(self, config: dict[str, Any]) -> Producer: ...

    def describer(self, config: dict[str, Any], group: str, timeout_s: float) -> Describer:
        """What asks the group's coordinator for its members (an admin client's configuration)."""
        ...


class ConfluentClients:
    """confluent-kafka's (librdkafka's) clients."""

    def consumer(self, config: dict[str, Any]) -> Consumer:
        return Consumer(config)

    def producer(self, config: dict[str, Any]) -> Producer:
        return Producer(config)

    def describer(self, config: dict[str, Any], group: str, timeout_s: float) -> Describer:
        return ProcessDescriber(config, group, timeout_s)


CONFLUENT: Final[KafkaClients] = ConfluentClients()


def worker_consumer(worker_id: str, session_timeout_ms: int, heartbeat_interval_ms: int) -> dict[str, Any]:
    """What a stage worker's consumer sets beyond :meth:`~streams.runtime.kafka_io.KafkaConfig.consumer`."""
    return {
        "fetch.max.bytes": 64 * 1024 * 1024,
        # librdkafka fetches 1 MB per partition per request by default: a handful of fetched
        # pages. Batches of pages need more per round trip, or the worker waits on fetches.
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "max.poll.interval.ms": 600_000,
        # Static membership (KIP-345): a restarted worker takes its old place at once
        # instead of waiting for the killed member's session to expire.
        "group.instance.id": worker_id,
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": min(heartbeat_interval_ms, session_timeout_ms // 3),
        # Partition i of every internal topic belongs to shard i: the range assignor gives one
        # member the same partitions of topics of one partition count (streams/runtime/shards.py).
        "partition.assignment.strategy": "range",
    }
