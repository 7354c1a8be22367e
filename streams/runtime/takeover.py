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
asked again at the assignment). A previous owner no longer in the group is fenced if it left a
transaction open: a producer with its transactional id (``<group>.<worker id>``, as
:class:`~streams.runtime.engine.Engine` names it) calls ``init_transactions``, which aborts the
open transaction, and is closed. Whether one is open is read from the changelog partitions of the
shards taken from it, which only their owner writes: a read_committed consumer's end offset there is
the last stable offset, a read_uncommitted one's the high watermark, and they differ while a
transaction that wrote the partition is open (every transaction that decides anything in a shard
writes its changelog partition).

Who is never fenced:

- a previous owner still in the group: it gave its partitions up inside its consumer's poll,
  between two transactions, so it has nothing open;
- a previous owner restarting under the same worker id (a crash and a supervisor, or a rolling
  restart that outlasted the session), warming up before it joins: it initialised its transactions
  when it started, which aborted whatever its predecessor left open, and begins none before it is
  a member again. Fencing it would fail its first commit for nothing (the race a test of rolling
  restarts found when every absent owner was fenced).

Fencing a worker that was only slow (paused past its session while a transaction was open) is
safe: its partitions were already given away, its next transactional call fails as fenced, it
stops with that said, and when started again it resumes from its last commit, as after any crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from confluent_kafka import KafkaException, TopicPartition

from streams.errors import RuntimeFailure
from streams.runtime.clients import KafkaClients
from streams.runtime.group_view import GroupView
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import watermarks

log: Final = logging.getLogger(__name__)

Partition = tuple[str, int]
END_TIMEOUT_S: Final = 10.0  # for the end offsets of the changelog partitions taken over


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
                 changelog: str, shard_topics: Iterable[str], timeout_s: float) -> None:
        self._view = view
        self._changelog = changelog
        self._shard_topics = frozenset(shard_topics)
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
            if owner not in now.members and self._left_open(partitions):
                self._fence(owner, partitions)

    def _left_open(self, partitions: set[Partition]) -> bool:
        """Whether a transaction is open on the changelog partitions of the shards in ``partitions``
        (input partitions alone tell nothing: then no)."""
        shards = sorted({partition for topic, partition in partitions if topic in self._shard_topics})
        if not shards:
            return False
        stable = self._clients.consumer(self._kafka.consumer(f"{self._changelog}.takeover"))
        written = self._clients.consumer(self._kafka.consumer(f"{self._changelog}.takeover",
                                                              **{"isolation.level": "read_uncommitted"}))
        try:
            return any(watermarks(stable, TopicPartition(self._changelog, shard), END_TIMEOUT_S)[1]
                       < watermarks(written, TopicPartition(self._changelog, shard), END_TIMEOUT_S)[1]
                       for shard in shards)
        except (KafkaException, RuntimeFailure) as error:  # not fencing: its transaction times out
            log.warning("takeover: cannot read the end offsets of %s (%s); a transaction it left open, "
                        "if any, ends when the broker times it out", self._changelog, error)
            return False
        finally:
            stable.close()
            written.close()

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
