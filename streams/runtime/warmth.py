"""Which shards a worker keeps warm, and when it works on them: the engine's side of standbys.

Two moments (docs/decisions/0011-standby-replicas.md):

- **Before joining** (:meth:`Warmth.warm_up`). A worker about to join the group computes the shards
  the range assignor will give it once it is a member (:func:`~streams.runtime.placement.owned_after_join`),
  and those it will keep standby copies of, and catches up on their changelogs (a restore in
  processes of their own for those it has no state of), outside the group, where nobody waits for it;
  then it joins, and the rebalance moves the shards to a worker that replays only their tail. So a
  worker added to a running stage never stalls it for a rebuild (Kafka Streams' warm-up replicas,
  KIP-441, without the probing rebalances: the group does not know this worker until it is warm).
  A restarted worker does the same with its own shards: its tail, then it takes its place back.
- **While running** (:meth:`Warmth.tick`, once per loop turn). The standby shards follow the group's
  membership (:func:`~streams.runtime.placement.standby_shards`, none of them owned here); the
  stores of shards the group is about to give this worker are held open meanwhile (:meth:`Warmth._place`), and
  the standbys apply what their changelogs gained, within a time budget: after a batch, half the
  batch's time (so a worker that is also a standby gives at least two thirds of its time to its
  own shards), when idle a tenth of a second at a time, and the engine does not wait for input
  while a standby is behind (:attr:`Warmth.behind`).

The group view (:class:`~streams.runtime.group_view.GroupView`) is asked before joining and at each
assignment, and with standbys every second besides (never waited for in the loop): with no view,
nothing is placed, and a worker joins at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from streams.config import RuntimeSettings
from streams.runtime.clients import KafkaClients
from streams.runtime.group_view import GroupView
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.placement import owned_after_join, standby_shards
from streams.runtime.standby import Standbys
from streams.runtime.store import PartitionStore
from streams.runtime.takeover import Partition, Takeover

log: Final = logging.getLogger(__name__)

BATCH_SHARE: Final = 0.5  # standby time after a batch, as a share of the batch's own time
MIN_BUDGET_S: Final = 0.005
IDLE_BUDGET_S: Final = 0.1
IDLE_WAIT_S: Final = 0.05  # for a standby's first records, when it is behind and nothing is fetched
WARM_UP_STEP_S: Final = 0.5
VIEW_INTERVAL_S: Final = 1.0  # how often the group view asks the coordinator
REPORT_INTERVAL_S: Final = 1.0  # how often the standbys' lag is told (lifecycle: gauges, /readyz)
DESCRIBE_TIMEOUT_S: Final = 5.0


def _unreported(lags: dict[int, int], warm: bool) -> None:
    """Standby lag told to nobody."""


class Warmth:
    """One worker's standbys, placed from the group view and caught up between batches, and what it
    does with partitions taken from a worker that is gone (:class:`~streams.runtime.takeover.Takeover`)."""

    def __init__(self, standbys: Standbys, view: GroupView, takeover: Callable[[list[Partition]], None],
                 me: str, shards: int, bring_up: Callable[[Sequence[int]], dict[int, PartitionStore]],
                 report: Callable[[dict[int, int], bool], None] = _unreported) -> None:
        self.standbys = standbys
        self._bring_up = bring_up
        self._report = report
        self._reported_at = 0.0
        self._view = view
        self._takeover = takeover
        self._me = me
        self._shards = shards
        self._placed_for: tuple[frozenset[str], frozenset[int]] | None = None

    def close(self) -> None:
        """Stop asking the coordinator (the describing process ends)."""
        self._view.close()

    def ask_early(self) -> None:
        """Ask the coordinator for the group now: the describing process starts, and the answer
        :meth:`warm_up` waits for comes while the worker does its other start-up work."""
        self._view.ask()

    def gained(self, partitions: list[Partition]) -> None:
        """A rebalance gave this worker ``partitions``: the group changed, so look at it again (the
        standbys follow at the next tick), and fence their owners that are gone, before anything of
        theirs is read."""
        self._view.refresh()
        self._takeover(partitions)


    @property
    def behind(self) -> bool:
        return self.standbys.behind

    def tick(self, owned: frozenset[int], batch_s: float | None) -> None:
        """Place the standbys for the group as last seen, then catch up: after a batch that took
        ``batch_s``, or idle (``None``)."""
        if self.standbys.replicas > 0:  # else the view is asked at assignments only
            self._view.poll()
        self._place(owned)
        if batch_s is None:  # the engine did not wait for input while a standby was behind
            self.standbys.catch_up(IDLE_BUDGET_S, wait_s=IDLE_WAIT_S if self.standbys.behind else 0.0)
        else:
            self.standbys.catch_up(max(MIN_BUDGET_S, BATCH_SHARE * batch_s))
        if time.monotonic() - self._reported_at >= REPORT_INTERVAL_S:
            self._reported_at = time.monotonic()
            self._report(self.standbys.lag(), self.standbys.warm)

    def _place(self, owned: frozenset[int]) -> None:
        """Keep the standbys the group as last seen wants of this worker, and hold open the stores of
        the shards it is about to be given (``due``): those of an owner that left, seen here before
        the rebalance gives them, or, between the revocation and the assignment of a rebalance, its
        own. Closed and opened again instead, a store pays its memtable's flush on the way (seconds
        for a few hundred thousand URLs, :mod:`streams.runtime.closing`), which a standby was
        placed to save."""
        membership = self._view.latest
        if membership is None:
            self.standbys.keep(())  # parked stores not taken back are closed
            return
        key = (membership.members, owned)
        if key == self._placed_for and not self.standbys.parked:
            return
        self._placed_for = key
        due = owned_after_join(self._me, membership.members, self._shards) - owned
        wanted = standby_shards(self._me, membership.members, self._shards, self.standbys.replicas) - owned
        self.standbys.keep(wanted, held=due)

    def _after_join(self, members: frozenset[str]) -> set[int]:
        """The shards this worker will own once a member of a group of ``members``, and those it will
        keep standby copies of: both warmed before it joins, so it is ready to stand in as soon as
        it is in."""
        owned = owned_after_join(self._me, members, self._shards)
        return owned | standby_shards(self._me, members, self._shards, self.standbys.replicas)

    def warm_up(self, stopping: Callable[[], bool], alive: Callable[[], None]) -> None:
        """Catch up on the shards this worker will own, before it joins; ``alive`` is called at
        every step (a sign of life for the health endpoint), ``stopping`` ends it early."""
        membership = self._view.refresh()
        if membership is None:
            return
        began, last_look = time.monotonic(), time.monotonic()
        future = self._after_join(membership.members)
        if future:
            log.info("warm-up: catching up shards %s before joining the group (members now: %s)",
                     ", ".join(map(str, sorted(future))), ", ".join(sorted(membership.members)) or "none",
                     extra={"fields": {"event": "warm_up", "shards": sorted(future),
                                       "members": sorted(membership.members)}})
        for shard, store in self._bring_up(sorted(future)).items():  # recovered as an assignment is
            self.standbys.park(shard, store)
        self.standbys.keep(future)  # followed as standbys until the group gives them
        self.standbys.mark_caught_up()
        while self.standbys.behind and not stopping():
            alive()
            self.standbys.catch_up(WARM_UP_STEP_S, wait_s=IDLE_WAIT_S)
            if time.monotonic() - last_look > 1.0:
                last_look = time.monotonic()
                membership = self._view.refresh() or membership
                self.standbys.keep(self._after_join(membership.members))
        if future:
            log.info("warm-up: done in %.1f s (%d changelog records applied); joining",
                     time.monotonic() - began, self.standbys.applied,
                     extra={"fields": {"event": "warm_up_done", "seconds": round(time.monotonic() - began, 3),
                                       "applied": self.standbys.applied}})


def warmth_for(kafka: KafkaConfig, clients: KafkaClients, group: str, settings: RuntimeSettings,
               standbys: Standbys,
               bring_up: Callable[[Sequence[int]], dict[int, PartitionStore]],
               report: Callable[[dict[int, int], bool], None] = _unreported) -> Warmth:
    """A worker's :class:`Warmth`, its group view asking the coordinator through ``clients``."""
    describer = clients.describer(kafka.admin(), group, DESCRIBE_TIMEOUT_S)
    view = GroupView(describer, group, settings.worker_id, VIEW_INTERVAL_S, DESCRIBE_TIMEOUT_S)
    takeover = Takeover(view, kafka, clients, group, settings.worker_id, settings.transaction_timeout_s)
    return Warmth(standbys, view, takeover, settings.worker_id, settings.shards, bring_up, report)
