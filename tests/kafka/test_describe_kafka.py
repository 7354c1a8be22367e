"""The group's description from a process of its own (streams/runtime/describe.py): what a worker's
group view reads, and a describing process that dies is replaced."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from streams.runtime import describe
from streams.runtime.describe import ProcessDescriber
from streams.runtime.group_view import membership
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.topic_admin import TopicSpec, ensure_topics


def _answer(describer: ProcessDescriber, timeout_s: float = 30.0) -> describe.Answer | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        describer.ask()
        if describer.wait(1.0):
            found = describer.take()
            if found is not None and found["members"]:
                return found
        time.sleep(0.2)
    return None


def test_a_child_process_describes_the_group_and_is_replaced_when_it_dies(
        kafka: KafkaConfig, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, group = f"{prefix}in", f"{prefix}group"
    ensure_topics(kafka, [TopicSpec(topic, 2)])
    consumer = Consumer(kafka.consumer(group, **{"group.instance.id": "w7", "partition.assignment.strategy":
                                                 "range"}))
    consumer.subscribe([topic])
    describer = ProcessDescriber(kafka.admin(), group, 5.0)
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.consume(1, timeout=0.2)
        found = _answer(describer)
        assert found is not None
        view = membership(found)
        assert view.members == {"w7"}
        assert view.owners == {(topic, 0): "w7", (topic, 1): "w7"}
        monkeypatch.setattr(describe, "RESTART_AFTER_S", 0.0)
        dead = describer._process
        dead.kill()  # as librdkafka's abort() would
        dead.join(5)
        assert _answer(describer) is not None  # a new process answers
        assert describer._process is not dead
    finally:
        describer.close()
        consumer.close()
