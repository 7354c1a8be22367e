"""Kafka's default partitioner computed in Python (``streams/runtime/partitioner.py``): Kafka's own
``Utils.murmur2`` test vectors and, against the broker, the very partitions librdkafka's
``murmur2_random`` picks for the same keys."""

from __future__ import annotations

import ctypes
import random

import pytest
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.partitioner import murmur2, partition_for
from testing import harness as h

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2 (signed ints).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafkas_test_vectors(data: bytes, expected: int) -> None:
    assert ctypes.c_int32(murmur2(data)).value == expected


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=1000))
def test_partitions_are_in_range(key: bytes, partitions: int) -> None:
    assert 0 <= partition_for(key, partitions) < partitions


@pytest.mark.parametrize("partitions", [8, 5])
def test_librdkafka_puts_each_key_where_we_say(kafka: KafkaConfig, prefix: str, partitions: int) -> None:
    topic = f"{prefix}partitioner"
    h.create_topics(kafka, [topic], partitions)
    rng = random.Random(partitions)
    keys = [rng.randbytes(16) for _ in range(300)] + [rng.randbytes(rng.randint(1, 40)) for _ in range(100)]
    chosen: dict[bytes, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        chosen[message.key()] = message.partition()  # type: ignore[attr-defined]

    producer = Producer(kafka.producer())
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert chosen == {key: partition_for(key, partitions) for key in keys}
