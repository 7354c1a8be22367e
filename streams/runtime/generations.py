"""Which generation of a stage's state is current, and the checks a worker makes against it.

A reshard (:mod:`streams.runtime.reshard`) writes a new generation of the stage's internal topics
beside the old one, so its commit point must be one record: the stage's ``generations`` topic
(compacted, one partition, :meth:`streams.topics.Topics.generations_topic`) holds the current
generation and its shard count, and while a reshard runs, the generation it is writing. A stage
that was never resharded has no record there: generation 0, whatever shard count its topics have.

A worker reads it when it starts and again whenever it is assigned partitions, and refuses to run
(:class:`~streams.errors.StaleGeneration`) on a generation that is not the current one, while a
reshard is under way, or with a shard count other than the generation's. The second read closes the
race with a reshard that began after the first: the reshard marks itself first and only then waits
for the group to empty, so a worker that joined in between reads the mark once it is assigned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

from streams.errors import StaleGeneration
from streams.runtime.kafka_io import KafkaConfig, partition_count, read_from
from streams.runtime.topic_admin import COMPACTED, Replication, TopicSpec, ensure_topics
from streams.topics import Topics

RECORD_KEY = b"generation"


@dataclass(frozen=True)
class Generation:
    """The current generation of a stage's state, its shard count, and a reshard under way."""

    number: int
    shards: int
    moving_to: int | None = None
    moving_shards: int | None = None

    @property
    def moving(self) -> bool:
        return self.moving_to is not None

    def encode(self) -> bytes:
        return orjson.dumps({"generation": self.number, "shards": self.shards, "moving_to": self.moving_to,
                             "moving_shards": self.moving_shards,
                             "at": datetime.now(UTC).isoformat(timespec="seconds")})

    @classmethod
    def decode(cls, raw: bytes) -> Generation:
        fields = orjson.loads(raw)
        return cls(fields["generation"], fields["shards"], fields.get("moving_to"),
                   fields.get("moving_shards"))


def read_generation(kafka: KafkaConfig, topic: str, timeout_s: float = 30.0) -> Generation | None:
    """The last record of ``topic`` (read_committed); None when the stage was never resharded."""
    if partition_count(kafka, topic, timeout_s) is None:
        return None
    found: bytes | None = None
    for message in read_from(kafka, [TopicPartition(topic, 0, OFFSET_BEGINNING)], timeout_s):
        if message.key() == RECORD_KEY:
            found = message.value()
    return None if found is None else Generation.decode(found)


def write_generation(kafka: KafkaConfig, topic: str, generation: Generation,
                     replication: Replication | None = None) -> None:
    """Make ``generation`` the stage's record, durably (acks=all, flushed) before returning."""
    ensure_topics(kafka, [TopicSpec(topic, 1, COMPACTED, fixed_partitions=True)], replication)
    producer = Producer(kafka.producer())
    producer.produce(topic, generation.encode(), RECORD_KEY)
    if producer.flush(60) != 0:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"{topic}: generation record unflushed"))


def require_current(found: Generation | None, stage: str, generation: int, shards: int) -> None:
    """Refuse a worker built for ``generation`` with ``shards`` unless that is the current state."""
    current = 0 if found is None else found.number
    if found is not None and found.moving:
        raise StaleGeneration(
            f"{stage}'s state is being resharded from generation {found.number} ({found.shards} shards) "
            f"to generation {found.moving_to} ({found.moving_shards} shards): start the workers once "
            "'python -m streams reshard' has finished (if it was stopped, run it again)")
    if generation != current:
        raise StaleGeneration(f"this worker is built for generation {generation} of {stage}'s state, "
                              f"but generation {current} is current: restart it")
    if found is not None and shards != found.shards:
        raise StaleGeneration(f"generation {current} of {stage}'s state has {found.shards} shards "
                              f"(resharded), this worker has shards={shards}: set shards={found.shards}")


def current_topics(kafka: KafkaConfig, topics: Topics, app_id: str, stage: str) -> Topics:
    """``topics`` with the stage's internal topics those of its current generation (after reshards)."""
    found = read_generation(kafka, topics.generations_topic(app_id, stage))
    return topics.at_generation(stage, 0 if found is None else found.number)
