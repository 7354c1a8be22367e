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

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from streams.runtime.describe import Answer, Describer

log: Final = logging.getLogger(__name__)


@dataclass(frozen=True)
class Membership:
    """The group as the coordinator described it once."""

    members: frozenset[str]  # worker ids (group.instance.id; the member id of a dynamic member)
    owners: Mapping[tuple[str, int], str] = field(default_factory=dict)  # (topic, partition) -> worker id
    stable: bool = True


class GroupView:
    """The latest :class:`Membership` of one group: asked for every ``interval_s`` without waiting
    (:meth:`poll`, from the engine's loop), or now (:meth:`refresh`), through a :class:`Describer`
    (in a process of its own: :mod:`streams.runtime.describe`)."""

    def __init__(self, describer: Describer, group: str, me: str, interval_s: float,
                 timeout_s: float) -> None:
        self._describer = describer
        self._group = group
        self._me = me
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self.latest: Membership | None = None
        self.owners_before: dict[tuple[str, int], str] = {}
        self._asked_at = -math.inf
        self._warned = False

    def poll(self) -> None:
        """Take the answer to the last question if it came; ask again once ``interval_s`` passed."""
        if self._describer.wait(0):
            self._take()
        elif time.monotonic() - self._asked_at >= self._interval_s:
            self.ask()

    def ask(self) -> None:
        """Ask now, without waiting: the next :meth:`refresh` waits for this answer."""
        self._asked_at = time.monotonic()
        self._describer.ask()

    def refresh(self) -> Membership | None:
        """Ask now (unless a question is outstanding) and wait for the answer (at an assignment,
        before joining)."""
        self.ask()
        if not self._describer.wait(self._timeout_s + 1):
            self._unknown("no answer")
            return None
        return self._take()

    def _take(self) -> Membership | None:
        answer = self._describer.take()
        if answer is None:
            self._unknown("the coordinator did not answer")
            return None
        found = membership(answer)
        if found.stable:
            others = {part: owner for part, owner in found.owners.items() if owner != self._me}
            self.owners_before = {**self.owners_before, **others}
        self.latest = found
        return found

    def _unknown(self, why: str) -> None:
        log.debug("describing group %s: %s", self._group, why)
        if not self._warned:
            self._warned = True
            log.warning("cannot describe the consumer group %s (%s): standbys are not placed, a join is "
                        "not warmed and a lost worker's open transaction is left to time out until it "
                        "answers (grant DESCRIBE on the group)", self._group, why)

    def close(self) -> None:
        self._describer.close()


def membership(answer: Answer) -> Membership:
    """A :mod:`describe <streams.runtime.describe>` answer as a :class:`Membership`."""
    members: set[str] = set()
    owners: dict[tuple[str, int], str] = {}
    for name, assigned in answer["members"]:
        members.add(name)
        for topic, partition in assigned:
            owners[(topic, partition)] = name
    return Membership(frozenset(members), owners, bool(answer["stable"]))
