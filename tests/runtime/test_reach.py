"""A worker's first contact with the cluster (``streams/runtime/reach.py``): said at once, and re-said
while nothing answers, instead of half a minute of silence before the error. A worker against a
running cluster says it once and nothing more: tests/kafka/test_lifecycle_kafka.py."""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import KafkaException

from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.reach import reach_cluster


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_an_unreachable_cluster_is_named_then_retold_until_it_fails(caplog: pytest.LogCaptureFixture) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    caplog.set_level(logging.INFO, logger="streams.runtime.reach")
    with pytest.raises(KafkaException):
        reach_cluster(KafkaConfig(address), timeout_s=1.5, say_every_s=0.5)
    said = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert said[0] == ("INFO", f"connecting to Kafka at {address}")
    waits = [message for level, message in said[1:] if level == "WARNING"]
    assert len(waits) == 2, said  # after 0.5 s and 1 s; the attempt in the last 0.5 s raises
    assert all(message.startswith(f"no answer from Kafka at {address} after ") for message in waits)
    assert all("waiting up to" in message for message in waits)

