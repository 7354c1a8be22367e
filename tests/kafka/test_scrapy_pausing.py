"""A Scrapy process's intake paused at its buffer through a rebalance (streams/integrations/pausing.py),
on the real broker: the partitions it is given back are read again once there is room."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from streams.integrations.pausing import Pausing
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.topic_admin import TopicSpec, ensure_topics


def _until(condition: Callable[[], bool], consumers: list[Consumer], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        for consumer in consumers:
            consumer.consume(10, timeout=0.05)


def test_partitions_given_back_while_paused_are_read_again(kafka: KafkaConfig, prefix: str) -> None:
    topic = f"{prefix}new-urls"
    ensure_topics(kafka, [TopicSpec(topic, 4)])
    producer = Producer(kafka.producer())
    for number in range(40):
        producer.produce(topic, b"{}", str(number).encode(), partition=number % 4)
    assert producer.flush(30) == 0
    events: list[str] = []
    first = Consumer(kafka.consumer(f"{prefix}crawl"))
    pausing = Pausing(first)

    def changed(kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def record(_: Consumer, __: list[TopicPartition]) -> None:
            events.append(kind)
            pausing.assignment_changed()
        return record

    first.subscribe([topic], on_assign=changed("assign"), on_revoke=changed("revoke"))
    _until(lambda: bool(first.assignment()), [first])
    pausing.hold(True)  # at its buffer
    second = Consumer(kafka.consumer(f"{prefix}crawl"))
    second.subscribe([topic])
    deadline = time.monotonic() + 30
    while events[-1:] != ["revoke"]:  # the turn between revocation and assignment
        assert time.monotonic() < deadline, events
        first.consume(10, timeout=0)  # serves what is there: the revocation before the rejoin is done
        second.consume(10, timeout=0)
        time.sleep(0.005)
    assert not first.assignment()
    pausing.hold(False)  # room again, before the assignment: nothing to resume yet
    _until(lambda: events[-1:] == ["assign"] and bool(first.assignment()), [first, second])
    pausing.hold(False)
    read: list[int] = []
    deadline = time.monotonic() + 20
    mine = {tp.partition for tp in first.assignment()}
    while len(read) < 10 * len(mine) and time.monotonic() < deadline:
        read += [message.partition() or 0 for message in first.consume(100, timeout=0.2)
                 if message.error() is None]
        second.consume(10, timeout=0)
    assert sorted(set(read)) == sorted(mine) and len(read) == 10 * len(mine)
    first.close()
    second.close()
