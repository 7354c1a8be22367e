"""Where the runtime's Kafka clients come from: one small interface, confluent-kafka by default.

The engine, its changelog recovery and its record reader make every consumer and producer they use
through a :class:`KafkaClients` (as httpx takes a transport), so a test can hand them an in-memory
broker (``tests/memory_kafka.py``) and drive crashes, aborts and rebalances through the engine's
public steps, with no broker and no reaching into the engine's fields. Production code never passes
one: :data:`CONFLUENT` makes librdkafka clients from the configurations
:class:`~streams.runtime.kafka_io.KafkaConfig` builds.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from confluent_kafka import Consumer, Producer


class KafkaClients(Protocol):
    """Makes a client from a librdkafka configuration."""

    def consumer(self, config: dict[str, Any]) -> Consumer: ...

    def producer(self, config: dict[str, Any]) -> Producer: ...


class ConfluentClients:
    """confluent-kafka's (librdkafka's) clients."""

    def consumer(self, config: dict[str, Any]) -> Consumer:
        return Consumer(config)

    def producer(self, config: dict[str, Any]) -> Producer:
        return Producer(config)


CONFLUENT: Final[KafkaClients] = ConfluentClients()
