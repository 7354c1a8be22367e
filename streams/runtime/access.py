"""Why a worker's Kafka calls fail when the cause is the cluster's doing rather than a fault: its
credentials stopped working, a permission it needs was taken away, or a topic it uses was deleted.

Why a module of its own: librdkafka reports these causes badly for a transactional worker. A SASL
password changed under it shows up as a transaction that times out 30 s later; a topic ACL revoked
as an "Erroneous state" of the producer once the first abort fails; a deleted changelog as records
that time out (librdkafka waits for a topic to come back, and a producer must never create an
internal topic with the broker's defaults). Each of those would stop the worker, but with a message
that sends an operator to the wrong place, or, retried, would stall it in silence.

So the engine hands every client error to :meth:`ClusterWatch.client_error` (librdkafka's
``error_cb``: authentication failures arrive there), and when a Kafka call fails in a way that may
be the cluster's doing it asks :meth:`ClusterWatch.diagnose`, which asks the cluster without writing
anything: ``DescribeTopics`` with the authorized operations of each topic the worker reads or writes
(KIP-430; a topic that is gone answers ``UNKNOWN_TOPIC_OR_PART``, one the principal may not see
``TOPIC_AUTHORIZATION_FAILED``), and the same for its consumer group. A cause found becomes one
error, :class:`~streams.errors.AccessDenied` or :class:`~streams.errors.TopicDeleted`, that names it
and what to do (docs/reliability.md). Nothing is lost meanwhile: the open transaction never
commits, so a worker started again once the cause is fixed resumes from the last commit.

A cluster that is merely down or moving its leaders answers the diagnosis with timeouts, which say
nothing: then the original error stands and the worker goes on (or stops) as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclOperation  # re-exported by confluent_kafka.admin, undeclared

from streams.errors import AccessDenied, RuntimeFailure, TopicDeleted
from streams.runtime.kafka_io import KafkaConfig

log = logging.getLogger(__name__)

AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
AUTHORIZATION = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                           KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                           KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
# What a deleted topic looks like from a client, or a denied one.
UNKNOWN = AUTHORIZATION | frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                     KafkaError._UNKNOWN_PARTITION})
# Failed calls worth a diagnosis: those, and records that timed out (waiting for a deleted topic to
# come back). Only failed calls: a client error of the kind is reported every few seconds while
# brokers are down, and a diagnosis then waits for its timeout.
SUSPECT = AUTHENTICATION | UNKNOWN | frozenset({KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT})
CREDENTIALS_GRACE_S = 30.0  # authentication failing this long is no passing hiccup
DIAGNOSIS_INTERVAL_S = 5.0  # suspect client errors come in bursts (one per partition): one look each
# A topic created a moment ago may be missing from another broker's metadata for a while (seconds on
# a loaded cluster: a worker's consumer can find its new shard topic unknown): missing means missing
# at every look, CONFIRMATION_S apart.
CONFIRMATIONS, CONFIRMATION_S = 3, 4.0
RECOVERY = "docs/reliability.md, 'Hostile cluster events'"


class Watch(Protocol):
    """What the engine asks of a watch (:class:`ClusterWatch`, or :data:`NO_WATCH` for a worker
    that does not diagnose: a test's)."""

    def client_config(self) -> dict[str, Any]:
        """What the worker's clients set so that their errors reach the watch."""
        ...

    def check(self) -> None: ...

    def consumer_error(self, error: KafkaError) -> None: ...

    def cause_of(self, error: BaseException, producer: Producer) -> RuntimeFailure | None: ...

    def after_abort(self, error: KafkaError) -> RuntimeFailure | None: ...


class NoWatch:
    """No diagnosis: client errors are librdkafka's to log, a failure is what it says it is."""

    def client_config(self) -> dict[str, Any]:
        return {}

    def check(self) -> None:
        pass

    def consumer_error(self, error: KafkaError) -> None:
        pass

    def cause_of(self, error: BaseException, producer: Producer) -> RuntimeFailure | None:
        return None

    def after_abort(self, error: KafkaError) -> RuntimeFailure | None:
        return None


NO_WATCH: Final = NoWatch()


@dataclass
class ClusterWatch:
    """What one worker uses of the cluster, and the causes of failure found so far."""

    kafka: KafkaConfig
    group: str
    reads: Sequence[str]
    writes: Sequence[str]
    timeout_s: float = 10.0
    _auth_first: float | None = field(default=None, init=False)
    _auth_last: float = field(default=0.0, init=False)
    _auth_error: str = field(default="", init=False)
    _suspect: bool = field(default=False, init=False)
    _looked: float = field(default=0.0, init=False)

    def client_config(self) -> dict[str, Any]:
        return {"error_cb": self.client_error}

    def client_error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: note authentication failures and errors worth a diagnosis (a
        subscribed topic that is gone arrives here); log every error (with an ``error_cb`` set,
        librdkafka no longer logs them itself)."""
        if error.code() in AUTHENTICATION:
            now = time.monotonic()
            self._auth_first = self._auth_first or now
            self._auth_last, self._auth_error = now, error.str()
        elif error.code() in UNKNOWN:
            self._suspect = True
        log.warning("kafka: %s", error.str())

    def check(self) -> None:
        """Between batches: raise :class:`AccessDenied` once authentication has failed for longer
        than the grace, and the cause of suspect client errors when the cluster caused them."""
        now = time.monotonic()
        if self._auth_first is not None:
            if now - self._auth_last > CREDENTIALS_GRACE_S:
                self._auth_first = None  # it passed
            elif now - self._auth_first > CREDENTIALS_GRACE_S:
                raise self._credentials()
        if self._suspect and now - self._looked > DIAGNOSIS_INTERVAL_S:
            self._suspect, self._looked = False, now
            found = self.diagnose()
            if found is not None:
                raise found

    def consumer_error(self, error: KafkaError) -> None:
        """A consumer error the engine would only log: raise its cause when it is the cluster's doing."""
        if error.code() in UNKNOWN:
            found = self.diagnose()
            if found is not None:
                raise found

    def cause_of(self, error: BaseException, producer: Producer) -> RuntimeFailure | None:
        """The cause of ``error`` that stops a worker, when the cluster caused it. ``producer``'s
        error callbacks queued while the failed call blocked are served first."""
        if not isinstance(error, (KafkaException, RuntimeFailure)) or isinstance(error, (AccessDenied,
                                                                                       TopicDeleted)):
            return None
        try:
            producer.poll(0)
        except Exception:  # noqa: BLE001 - a producer in a fatal state: nothing more to learn from it
            log.debug("serving the producer's callbacks after the failure failed too", exc_info=True)
        return self.diagnose() or fenced(error)

    def after_abort(self, error: KafkaError) -> RuntimeFailure | None:
        """The cause of an aborted transaction's error when it may be the cluster's doing."""
        return self.diagnose() if error.code() in SUSPECT else None

    def diagnose(self) -> RuntimeFailure | None:
        """The cause of a failure when it is the cluster's doing (module docstring), else None."""
        if self._auth_first is not None and time.monotonic() - self._auth_last < 4 * CREDENTIALS_GRACE_S:
            return self._credentials()
        try:
            return self._topics() or self._group()
        except (KafkaException, ValueError) as error:  # the cluster cannot say now: no cause found
            log.info("diagnosis inconclusive: %s", error)
            return None

    def _credentials(self) -> AccessDenied:
        return AccessDenied(
            f"the cluster refuses this worker's credentials ({self._auth_error}): check the SASL "
            "settings (STREAMS_KAFKA_SASL_USERNAME, STREAMS_KAFKA_SASL_PASSWORD or the [kafka] table) "
            "against the cluster's user, then start the worker again; nothing after its last commit "
            f"was committed, and it resumes from there ({RECOVERY})")

    def _topics(self) -> RuntimeFailure | None:
        missing, denied = self._describe(list(dict.fromkeys([*self.reads, *self.writes])))
        for _ in range(CONFIRMATIONS - 1):
            if not missing:
                break
            time.sleep(CONFIRMATION_S)
            missing = [name for name in self._describe(missing)[0] if name in missing]
        if missing:
            return TopicDeleted(
                f"topic {', '.join(missing)} was deleted while this worker ran: it stops rather than "
                "lose what it would write there or read back; nothing after its last commit was "
                f"committed. Recovery depends on the topic: {RECOVERY}")
        return self._denied(denied)

    def _describe(self, names: list[str]) -> tuple[list[str], list[str]]:
        """Which of ``names`` are missing, and what is denied of them."""
        admin = AdminClient(self.kafka.admin())
        futures = admin.describe_topics(TopicCollection(names), include_authorized_operations=True,
                                        request_timeout=self.timeout_s)
        missing: list[str] = []
        denied: list[str] = []
        for name, future in futures.items():
            try:
                operations = future.result().authorized_operations
            except KafkaException as error:
                code = error.args[0].code()
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    missing.append(name)
                elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    denied.append(f"{'WRITE' if name in self.writes else 'READ'} on topic {name}")
                continue
            if operations is None:
                continue  # the broker did not say (before KIP-430)
            if name in self.writes and AclOperation.WRITE not in operations:
                denied.append(f"WRITE on topic {name}")
            if name in self.reads and AclOperation.READ not in operations:
                denied.append(f"READ on topic {name}")
        return missing, denied

    def _group(self) -> RuntimeFailure | None:
        admin = AdminClient(self.kafka.admin())
        future = admin.describe_consumer_groups([self.group], include_authorized_operations=True,
                                                request_timeout=self.timeout_s)[self.group]
        try:
            operations = future.result().authorized_operations
        except KafkaException as error:
            if error.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                return self._denied([f"READ on group {self.group}"])
            raise
        if operations is not None and AclOperation.READ not in operations:
            return self._denied([f"READ on group {self.group}"])
        return None

    @staticmethod
    def _denied(denied: list[str]) -> AccessDenied | None:
        if not denied:
            return None
        return AccessDenied(
            f"the cluster denies this worker {', '.join(denied)}: grant its principal the ACLs a worker "
            f"needs ({RECOVERY}), then start it again; the transaction that failed was not committed, "
            "and the worker resumes from its last commit")


def fenced(error: BaseException) -> RuntimeFailure | None:
    """A fatal error of the transactional producer, said plainly: the cluster aborted its open
    transaction (open past ``transaction_timeout_s``, as when a stalled broker held it) or another
    producer with its ``transactional.id`` took over. The producer cannot go on; the worker stops,
    and started again (by its supervisor) resumes from its last commit."""
    cause = error if isinstance(error, KafkaException) else error.__cause__  # RuntimeFailure from one
    failure = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    if not isinstance(failure, KafkaError) or not failure.fatal():
        return None
    return RuntimeFailure(
        f"the cluster ended this worker's transaction ({failure.str()}): it stayed open past "
        "[runtime] transaction_timeout_s (a broker stalled that long?) or another worker with the same "
        "worker id took over; start the worker again (a supervisor does): it resumes from its last "
        "commit. If this recurs at once, two workers share a worker id")
