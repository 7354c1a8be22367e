"""Test fixtures: one real Kafka broker per session, fresh topic and group names per test.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set; otherwise the project's local KRaft broker on
127.0.0.1:19192 (``STREAMS_TEST_KAFKA_PORT``), started here and, if this session started it,
stopped and wiped at the end so ``make test`` leaves nothing behind. Tests that use the ``kafka``
fixture are marked ``kafka`` automatically (``make unit`` runs the others).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from streams import config, kafka_local
from streams.runtime.kafka_io import KafkaConfig

# Workers started by tests serve their metrics on any free port, never on the stages' own: several
# workers of a test, and other test runs on the machine, would take each other's (a taken port is a
# start-up error). Tests that need a known port set STREAMS_METRICS_PORT themselves.
os.environ.setdefault("STREAMS_METRICS_PORT", "0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kafka" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaConfig]:
    external = config.bootstrap_servers()
    if external:
        yield KafkaConfig(external, config.kafka_client_settings())
        return
    port = int(os.environ.get("STREAMS_TEST_KAFKA_PORT", "19192"))
    broker = kafka_local.LocalBroker(port=port, controller_port=port + 1)
    started_here = kafka_local.running_pid(broker) is None
    bootstrap = kafka_local.start(broker)
    yield KafkaConfig(bootstrap)
    if started_here:
        kafka_local.stop(broker)
        kafka_local.wipe(broker)


@pytest.fixture
def prefix() -> str:
    """A fresh topic-name prefix (and app id stem) for one test."""
    return f"t{uuid.uuid4().hex[:10]}."
