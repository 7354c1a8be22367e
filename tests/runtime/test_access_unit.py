"""A worker's credentials that stop working, told from a passing hiccup (issue 37):
:class:`streams.runtime.access.ClusterWatch` on client errors, with a clock of the test's own.
The diagnoses that ask the cluster are tried against a broker in tests/kafka/test_hostile_cluster_kafka.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.errors import AccessDenied
from streams.runtime import access
from streams.runtime.access import CREDENTIALS_GRACE_S, ClusterWatch
from streams.runtime.kafka_io import KafkaConfig

AUTH = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(access.time, "monotonic", found)
    return found


def _watch() -> ClusterWatch:
    return ClusterWatch(KafkaConfig("127.0.0.1:1"), "g", reads=["in"], writes=["out"])


def test_authentication_failing_past_the_grace_stops_the_worker(clock: Clock) -> None:
    watch = _watch()
    watch.client_error(AUTH)
    for _ in range(int(CREDENTIALS_GRACE_S)):  # failing on and on, within the grace: goes on
        clock.now += 1
        watch.client_error(AUTH)
        watch.check()
    clock.now += 2
    watch.client_error(AUTH)
    with pytest.raises(AccessDenied, match="refuses this worker's credentials .*invalid credentials"):
        watch.check()


def test_a_passing_authentication_hiccup_is_forgotten(clock: Clock) -> None:
    watch = _watch()
    watch.client_error(AUTH)
    clock.now += CREDENTIALS_GRACE_S + 1  # nothing since: it passed
    watch.check()
    clock.now += CREDENTIALS_GRACE_S + 1
    watch.check()
    watch.client_error(AUTH)  # a new failure starts a new grace
    watch.check()


def test_other_client_errors_are_logged_not_fatal(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    watch = _watch()
    watch.client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    clock.now += 10 * CREDENTIALS_GRACE_S
    watch.check()
    assert "1/1 brokers are down" in caplog.text


def test_a_fatal_producer_error_is_said_plainly() -> None:
    fatal = KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True))
    found = access.fenced(fatal)
    assert found is not None and "transaction_timeout_s" in str(found) and "worker id" in str(found)
    assert access.fenced(KafkaException(KafkaError(KafkaError._TIMED_OUT, "x", retriable=True))) is None
    assert access.fenced(ValueError("not Kafka")) is None
