"""Taking partitions from a worker that is gone: fence its transactional id first.

A worker killed inside a transaction leaves it open. Until the transaction coordinator aborts it
(``transaction.timeout.ms`` after it began, then up to the broker's
``transaction.abort.timed.out.transaction.cleanup.interval.ms``: 30 s and 10 s by default), the last
stable offset of every partition it wrote stays where its first record is, and every
read_committed reader of those partitions waits: the new owner's recovery of the lost shards, the
shard topics' next processor, and the crawler reading new URLs or verdicts, even those another
worker wrote after it. A restarted worker ends this at once by initialising its transactions with
its own id (the epoch bump aborts what its predecessor left open). A worker that is not coming back
never does; this module does it for it.

When a rebalance gives this worker partitions, :class:`Takeover` looks up who owned them last
(:attr:`streams.runtime.group_view.GroupView.owners_before`) and who the members are now (the view,
asked again at the assignment). Every previous owner no longer in the group is fenced: a producer
with its transactional id (``<group>.<worker id>``, as :class:`~streams.runtime.engine.Engine` names
it) calls ``init_transactions``, which aborts whatever it left open, and is closed. Whether it left a
transaction open cannot be told from outside for every stage (a page worker's routing transaction
writes only the shard topic, which every worker writes), and fencing one that left none costs one
round trip.

Who is never fenced, or is fenced harmlessly:

- a previous owner still in the group: it gave its partitions up inside its consumer's poll,
  between two transactions, so it has nothing open;
- a previous owner restarting under the same worker id (a crash and a supervisor, or a rolling
  restart that outlasted the session), warming up before it joins: it aborts what its predecessor
  left open when it starts, with a producer of its own id used for nothing else, and initialises
  its own producer only in its first assignment (:meth:`streams.runtime.engine.Engine._join`). A
  fence in an assignment of a generation without it comes before that: the range assignor's
  rebalances are eager, so the generation that lets it in completes only once every member has
  finished its callbacks of the one before, the fence among them. (Initialised just before it
  joined, as it first was, a worker whose warm-up took its old session's length was fenced there
  and failed its first commit, seen in a rolling restart and a reshard's drain.) Should a fence
  still land before its first commit, having committed nothing, it restarts in place
  (:meth:`streams.runtime.watchdog.Watchdog.fenced_while_joining`).

Fencing a worker that was only slow (paused past its session with a transaction open) is safe: its
partitions were already given away, its next transactional call fails as fenced, it stops with that
said, and when started again it resumes from its last commit, as after any crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from streams.runtime.clients import KafkaClients
from streams.runtime.group_view import GroupView
from streams.runtime.kafka_io import KafkaConfig

log: Final = logging.getLogger(__name__)

Partition = tuple[str, int]


def transactional_id(group: str, worker_id: str) -> str:
    """The transactional id of worker ``worker_id`` of the stage whose group is ``group``."""
    return f"{group}.{worker_id}"


def fence(kafka: KafkaConfig, clients: KafkaClients, group: str, worker_id: str, timeout_s: float) -> None:
    """Abort whatever transaction worker ``worker_id`` left open, and fence it."""
    producer = clients.producer(kafka.transactional_producer(transactional_id(group, worker_id), timeout_s))
    producer.init_transactions(timeout_s)
    producer.flush(0)


class Takeover:
    """What a worker does, before recovering them, with the partitions a rebalance just gave it."""

    def __init__(self, view: GroupView, kafka: KafkaConfig, clients: KafkaClients, group: str, me: str,
                 timeout_s: float) -> None:
        self._view = view
        self._kafka = kafka
        self._clients = clients
        self._group = group
        self._me = me
        self._timeout_s = timeout_s
        self.fenced: list[str] = []  # every worker fenced by this one, in order

    def __call__(self, gained: Iterable[Partition]) -> None:
        before = self._view.owners_before
        lost_owners: dict[str, set[Partition]] = {}
        for partition in gained:
            owner = before.get(partition)
            if owner is not None and owner != self._me:
                lost_owners.setdefault(owner, set()).add(partition)
        now = self._view.latest
        if not lost_owners or now is None:
            return
        for owner, partitions in sorted(lost_owners.items()):
            if owner not in now.members:
                self._fence(owner, partitions)

    def _fence(self, owner: str, partitions: set[Partition]) -> None:
        began = time.monotonic()
        try:
            fence(self._kafka, self._clients, self._group, owner, self._timeout_s)
        except Exception as error:  # noqa: BLE001 - its transaction times out as before: slower, as safe
            log.warning("takeover: could not fence worker %s (%s); its open transaction, if any, ends "
                        "when the broker times it out", owner, error)
            return
        self.fenced.append(owner)
        log.info("takeover: worker %s left the group; its open transaction aborted and its id fenced "
                 "in %.2f s, taking %d of its partitions", owner, time.monotonic() - began, len(partitions),
                 extra={"fields": {"event": "takeover_fence", "worker": owner,
                                   "partitions": sorted(f"{t}[{p}]" for t, p in partitions)}})
