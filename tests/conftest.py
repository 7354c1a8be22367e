"""Test fixtures: one real Kafka broker per session, fresh topic and group names per test.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set; otherwise the project's local KRaft broker on
127.0.0.1:19192 (``STREAMS_TEST_KAFKA_PORT``), started here and, if this session started it,
stopped and wiped at the end so ``make test`` leaves nothing behind. Tests that use the ``kafka``
fixture are marked ``kafka`` automatically (``make unit`` runs the others).

Under pytest-xdist (``-n 2``) the workers share that one broker: the first worker that needs it
starts it (a file lock beside the broker's folder orders them), and the session's controller, the
process the workers belong to, stops and wipes it once they are all done.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from streams import config
from streams.broker import kafka_local
from streams.runtime.kafka_io import KafkaConfig

# Workers started by tests serve their metrics on any free port, never on the stages' own: several
# workers of a test, and other test runs on the machine, would take each other's (a taken port is a
# start-up error). Tests that need a known port set STREAMS_METRICS_PORT themselves.
os.environ.setdefault("STREAMS_METRICS_PORT", "0")

STARTED_BY = "started-by-test-session"  # in the broker's folder: the pid of the session that started it

# No Hypothesis deadline: a deadline is a timed assertion, and on a machine shared with other jobs
# (or beside the suite's other process) an example's time says nothing about the code. Tests that
# set their own settings keep them; speed is measured by make bench.
settings.register_profile("crawl-dedup", deadline=None)
settings.load_profile("crawl-dedup")


# The modules of two minutes or more of broker time in a fresh-clone CI, longest first: they run
# first, so that the suite does not end with one process still in one of them and the others idle
# (pytest-xdist hands out whole modules, --dist loadscope, in collection order). The reshard
# scenarios alone took 6 to 7 minutes of a 12-minute suite, and used to start two thirds in.
LONGEST_FIRST = ("test_reshard_kafka.py", "test_reliability_kafka.py", "test_scrapy_kafka.py",
                 "test_stage_kafka.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kafka" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
    items.sort(key=_start_rank)  # stable: the others keep their order


def _start_rank(item: pytest.Item) -> int:
    name = item.path.name
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def _session_broker() -> kafka_local.LocalBroker:
    port = int(os.environ.get("STREAMS_TEST_KAFKA_PORT", "19192"))
    return kafka_local.LocalBroker(port=port, controller_port=port + 1)


def _xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.fixture(scope="session")
def kafka(pytestconfig: pytest.Config) -> Iterator[KafkaConfig]:
    external = config.bootstrap_servers()
    if external:
        yield KafkaConfig(external, config.kafka_client_settings())
        return
    broker = _session_broker()
    if _xdist_worker(pytestconfig):
        yield KafkaConfig(_shared(broker))
        return
    started_here = kafka_local.running_pid(broker) is None
    bootstrap = kafka_local.start(broker)
    yield KafkaConfig(bootstrap)
    if started_here:
        _stop_and_wipe(broker)


def _shared(broker: kafka_local.LocalBroker) -> str:
    """Start the broker unless it runs; when this session started it, its controller (this worker's
    parent) is written down as the one to stop it."""
    broker.home.mkdir(parents=True, exist_ok=True)
    with open(broker.home / f"broker-{broker.port}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kafka_local.running_pid(broker) is None:
            kafka_local.start(broker)
            (broker.run_dir / STARTED_BY).write_text(str(os.getppid()))
        return kafka_local.start(broker)  # running: waits until it answers


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller of an xdist session stops the shared broker its workers started."""
    if _xdist_worker(session.config) or config.bootstrap_servers():
        return
    broker = _session_broker()
    marker: Path = broker.run_dir / STARTED_BY
    try:
        owner = marker.read_text().strip()
    except FileNotFoundError:
        return
    if owner == str(os.getpid()):
        _stop_and_wipe(broker)
        (broker.home / f"broker-{broker.port}.lock").unlink(missing_ok=True)


def _stop_and_wipe(broker: kafka_local.LocalBroker) -> None:
    """The session's broker is deleted once stopped, so its clean shutdown buys nothing: a few
    seconds for it, then SIGKILL (a loaded machine saw 27 s of shutdown)."""
    kafka_local.stop(broker, timeout_s=3.0)
    kafka_local.wipe(broker)


@pytest.fixture
def prefix() -> str:
    """A fresh topic-name prefix (and app id stem) for one test."""
    return f"t{uuid.uuid4().hex[:10]}."
