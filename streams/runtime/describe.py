"""Describing a consumer group without putting the worker at risk: in a process of its own.

A worker learns its group's members from the coordinator (``DescribeConsumerGroups``,
:mod:`streams.runtime.group_view`). librdkafka's admin client can ``abort()`` the whole process on a
group request while the group's coordinator moves (the assertion in
``rd_kafka_enq_once_del_source_return``, librdkafka #3663 and #4605): seen here when a worker
described its group once a second through a broker restart (tests/kafka/test_reliability_kafka.py),
as the lag monitor had before (:mod:`streams.ops.lag` reads commits with a consumer for that
reason). So a worker asks a small child process (``spawn``, never ``fork``), which holds the admin
client; if it dies, the worker starts another at the next question, and meanwhile goes without a
view, as when the coordinator does not answer.

The answer crosses the pipe as JSON (members, each with its assignment, and whether the group is
stable), never pickled. :class:`AdminDescriber` is the same question asked in-process, for clients
that cannot crash the worker (the in-memory broker of the unit tests).
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from multiprocessing.connection import Connection
from typing import Any, Final, Protocol

import orjson
from confluent_kafka import ConsumerGroupState

log: Final = logging.getLogger(__name__)

RESTART_AFTER_S: Final = 5.0  # a describing process that died is started again this long after

Answer = dict[str, Any]  # {"members": [[name, [[topic, partition], ...]], ...], "stable": bool}


def answer_of(found: Any) -> Answer:
    """A ``ConsumerGroupDescription`` as plain data: each member by its ``group.instance.id`` (the
    worker id; its member id if it has none), with the partitions it is assigned."""
    members = [[member.group_instance_id or member.member_id,
                [[tp.topic, tp.partition] for tp in member.assignment.topic_partitions]]
               for member in found.members]
    return {"members": members, "stable": found.state == ConsumerGroupState.STABLE}


class Describer(Protocol):
    """Asks the coordinator for the group, and hands the answer over when it came."""

    def ask(self) -> None:
        """Ask (again, unless a question is outstanding); returns at once."""

    def wait(self, timeout_s: float) -> bool:
        """Whether the answer is there, waiting up to ``timeout_s`` for it."""

    def take(self) -> Answer | None:
        """The answer (None: the question failed), once :meth:`wait` said it is there."""

    def close(self) -> None: ...


class AdminDescriber:
    """The question asked in this process, through ``admin`` (its futures: no waiting)."""

    def __init__(self, admin: Any, group: str, timeout_s: float) -> None:
        self._admin, self._group, self._timeout_s = admin, group, timeout_s
        self._future: Any = None

    def ask(self) -> None:
        if self._future is None:
            self._future = self._admin.describe_consumer_groups([self._group],
                                                               request_timeout=self._timeout_s)[self._group]

    def wait(self, timeout_s: float) -> bool:
        if self._future is None:
            return False
        if not self._future.done():
            deadline = time.monotonic() + timeout_s
            while not self._future.done() and time.monotonic() < deadline:
                time.sleep(0.01)
        return bool(self._future.done())

    def take(self) -> Answer | None:
        future, self._future = self._future, None
        try:
            return answer_of(future.result(timeout=0))
        except Exception as error:  # noqa: BLE001 - a failed question is no view, not a failure
            log.debug("describing group %s: %s", self._group, error)
            return None

    def close(self) -> None:
        self._future = None


class ProcessDescriber:
    """The question asked by a child process (see the module docstring)."""

    def __init__(self, config: dict[str, Any], group: str, timeout_s: float) -> None:
        # librdkafka's log callback is this process's logger: the child logs to stderr itself
        self._config = {name: value for name, value in config.items() if name != "logger"}
        self._group, self._timeout_s = group, timeout_s
        self._process: Any = None
        self._conn: Connection | None = None
        self._outstanding = False
        self._died_at = -RESTART_AFTER_S

    def ask(self) -> None:
        if self._outstanding:
            return
        conn = self._connection()
        if conn is None:
            return
        try:
            conn.send_bytes(b"?")
            self._outstanding = True
        except OSError:
            self._died()

    def wait(self, timeout_s: float) -> bool:
        if not self._outstanding or self._conn is None:
            return False
        try:
            return self._conn.poll(timeout_s)
        except OSError:
            self._died()
            return False

    def take(self) -> Answer | None:
        if self._conn is None:
            return None
        self._outstanding = False
        try:
            found: Answer | None = orjson.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            self._died()
            return None
        return found

    def _connection(self) -> Connection | None:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            return self._conn
        if self._conn is not None:
            self._died()
        if time.monotonic() - self._died_at < RESTART_AFTER_S:
            return None
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        self._process = context.Process(target=describe_process, name="describe-group", daemon=True,
                                        args=(theirs, self._config, self._group, self._timeout_s))
        self._process.start()
        theirs.close()
        self._conn = mine
        return mine

    def _died(self) -> None:
        code = None if self._process is None else self._process.exitcode
        log.warning("the process describing the consumer group ended (%s); another starts in %.0f s",
                    code, RESTART_AFTER_S)
        self.close()
        self._died_at = time.monotonic()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.kill()
            self._process.join(5)
        self._conn, self._process, self._outstanding = None, None, False


def describe_process(conn: Connection, config: dict[str, Any], group: str, timeout_s: float) -> None:
    """The child: answer each question with the group's description, until the worker goes."""
    from confluent_kafka.admin import AdminClient

    asking = AdminDescriber(AdminClient(config), group, timeout_s)
    while True:
        try:
            conn.recv_bytes()
        except (EOFError, OSError):
            return
        asking.ask()
        asking.wait(timeout_s + 1)
        conn.send_bytes(orjson.dumps(asking.take()))
