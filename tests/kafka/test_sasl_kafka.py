"""A stage through a SASL/SCRAM listener: security settings reach every client the stage makes.

A broker of its own (ports 19492-19494, or ``STREAMS_TEST_SCRAM_PORT`` and the two above it),
with a SCRAM-SHA-512 listener and credentials created at format time; the worker gets the cluster
and its credentials only the way an operator would give them: ``KAFKA_BOOTSTRAP_SERVERS`` and
``STREAMS_KAFKA_*`` variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams import config
from streams.broker import kafka_local
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h
from testing.cli import run_cli

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def scram_broker() -> Iterator[kafka_local.LocalBroker]:
    if config.bootstrap_servers():
        pytest.skip("an external cluster is configured; the SCRAM listener is the local broker's")
    port = int(os.environ.get("STREAMS_TEST_SCRAM_PORT", "19492"))
    broker = kafka_local.LocalBroker(port=port, controller_port=port + 1, scram_port=port + 2, heap_mb=512)
    kafka_local.stop(broker)
    kafka_local.wipe(broker)  # credentials are written when the data directory is formatted
    kafka_local.start(broker)
    yield broker
    kafka_local.stop(broker)
    kafka_local.wipe(broker)


def test_wrong_password_is_refused(scram_broker: kafka_local.LocalBroker) -> None:
    settings = {**scram_broker.scram_client_settings(), "sasl.password": "wrong"}
    admin = AdminClient({"bootstrap.servers": scram_broker.scram_bootstrap, **settings, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_url_dedup_runs_through_scram(scram_broker: kafka_local.LocalBroker, tmp_path: Path) -> None:
    assert scram_broker.scram_bootstrap is not None
    secure = KafkaConfig(scram_broker.scram_bootstrap, scram_broker.scram_client_settings())
    topics = Topics("scram.")
    h.create_topics(secure, [topics.frontier], 2)
    urls = [f"http://secure.example/{i % 40}" for i in range(100)]
    h.produce(secure, topics.frontier, ((None, orjson.dumps({"url": url})) for url in urls))
    environment = {f"STREAMS_KAFKA_{name.upper().replace('.', '_')}": value
                   for name, value in scram_broker.scram_client_settings().items()}
    os.environ.update(environment)
    try:
        result = run_cli(secure, "url-dedup", "--topic-prefix", topics.prefix, "--app-id", "app",
                         "--worker-id", "w0", "--state-dir", str(tmp_path), "--shards", "2",
                         "--idle-exit-s", "4")
    finally:
        for name in environment:
            os.environ.pop(name)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    found = h.read_all(secure, topics.new_urls, idle_s=1.0, value_of=lambda _k, v: v)
    assert sorted(orjson.loads(v)["url"] for v in found.elements()) == sorted(set(urls))
