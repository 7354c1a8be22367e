"""What a worker knows of its group: who the members are and which worker owns which shard.

The group coordinator knows both; a consumer only learns its own assignment. So a worker asks the
coordinator (``DescribeConsumerGroups``, one small request) every ``interval_s``, from its loop
without waiting for the answer, and keeps the answer as one immutable :class:`Membership`. Three
things stand on it:

- standby placement (:mod:`streams.runtime.placement`: a function of the members' worker ids);
- a worker about to join computes the shards it will own, and warms them first;
- takeover: a worker that gains shards whose last owner is no longer a member fences that owner's
  transactional id (:mod:`streams.runtime.takeover`), so its open transaction is aborted at once
  instead of holding every read_committed reader of the partitions it wrote for up to
  ``transaction_timeout_s`` plus the broker's abort interval.

``owners_before`` remembers, for every partition, the last worker other than this one seen owning it:
the previous owner of a partition just gained, even when the coordinator was asked again between
the rebalance and the assignment callback.

A worker that cannot describe its group (an ACL missing ``DESCRIBE`` on it, a coordinator moving)
goes on without a view: no standbys are placed, a join is not warmed, a takeover is not fenced
(each as before, slower, never less correct), and one warning says why.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import ConsumerGroupState, KafkaException

log: Final = logging.getLogger(__name__)


@dataclass(frozen=True)
class Membership:
    """The group as the coordinator described it once."""

    members: frozenset[str]  # worker ids (group.instance.id; the member id of a dynamic member)
    owners: Mapping[tuple[str, int], str] = field(default_factory=dict)  # (topic, partition) -> worker id
    stable: bool = True


class GroupView:
    """The latest :class:`Membership` of one group: asked for every ``interval_s`` without waiting
    (:meth:`poll`, from the engine's loop: the request runs in librdkafka's thread), or now
    (:meth:`refresh`)."""

    def __init__(self, admin: Any, group: str, me: str, interval_s: float, timeout_s: float) -> None:
        self._admin = admin
        self._group = group
        self._me = me
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self.latest: Membership | None = None
        self.owners_before: dict[tuple[str, int], str] = {}
        self._pending: Future[Any] | None = None
        self._asked_at = -math.inf
        self._warned = False

    def poll(self) -> None:
        """Take the answer to the last question if it came; ask again once ``interval_s`` passed."""
        if self._pending is not None:
            if not self._pending.done():
                return
            answer, self._pending = self._pending, None
            self._take(answer)
        elif time.monotonic() - self._asked_at >= self._interval_s:
            self._pending = self._ask()

    def refresh(self) -> Membership | None:
        """Ask now and wait for the answer (at an assignment, before joining)."""
        self._pending = None
        answer = self._ask()
        if answer is not None:
            with contextlib.suppress(Exception):  # _take says what went wrong
                answer.result(timeout=self._timeout_s + 1)
        return self._take(answer)

    def _ask(self) -> Future[Any] | None:
        self._asked_at = time.monotonic()
        try:
            return self._admin.describe_consumer_groups(  # type: ignore[no-any-return]
                [self._group], request_timeout=self._timeout_s)[self._group]
        except (KafkaException, ValueError) as error:
            self._unknown(error)
            return None

    def _take(self, answer: Future[Any] | None) -> Membership | None:
        if answer is None or not answer.done():
            self._unknown(TimeoutError("no answer"))
            return None
        try:
            found = membership(answer.result())
        except Exception as error:  # noqa: BLE001 - a view is an optimisation: never stop the worker for it
            self._unknown(error)
            return None
        if found.stable:
            others = {part: owner for part, owner in found.owners.items() if owner != self._me}
            self.owners_before = {**self.owners_before, **others}
        self.latest = found
        return found

    def _unknown(self, error: BaseException) -> None:
        log.debug("describing group %s: %s", self._group, error)
        if not self._warned:
            self._warned = True
            log.warning("cannot describe the consumer group %s (%s): standbys are not placed, a join is "
                        "not warmed and a lost worker's open transaction is left to time out; grant "
                        "DESCRIBE on the group", self._group, error)


def membership(found: Any) -> Membership:
    """A ``ConsumerGroupDescription`` as a :class:`Membership`."""
    members: set[str] = set()
    owners: dict[tuple[str, int], str] = {}
    for member in found.members:
        name = member.group_instance_id or member.member_id
        members.add(name)
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = name
    return Membership(frozenset(members), owners, found.state == ConsumerGroupState.STABLE)
