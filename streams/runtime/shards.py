"""The shards one worker owns: their stores opened and recovered on assignment, parked on revocation.

A shard is partition *i* of every internal topic of a stage (they are co-partitioned) and store *i*,
backed by changelog partition *i*. When the group assigns a worker partitions, :meth:`Shards.assigned`
checks that no shard is split between workers (the range assignor gives one member the same
partitions of topics with one partition count; another assignor, or internal topics of different
counts, would have two workers write one changelog partition), opens the new shards' stores (the
stage's declared store, :mod:`streams.runtime.store_spec`), brings them up to date from their
changelog partitions (:mod:`streams.runtime.recovery`) and checks what they were built with
(:mod:`streams.runtime.identity`). A store this worker keeps as a standby is taken over open, and only
the changelog's tail is replayed (:mod:`streams.runtime.standby`); shards with no local state at all
are first rebuilt in processes of their own (:mod:`streams.runtime.restore`). Revocation tells the
stage and parks the stores with the standbys, open, until the new assignment says which come back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from confluent_kafka import TopicPartition

from streams.config import RuntimeSettings
from streams.errors import RuntimeFailure
from streams.runtime.batch import OwnedShards
from streams.runtime.clients import KafkaClients
from streams.runtime.counters import Counters
from streams.runtime.identity import ShardIdentities
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.lifecycle import Lifecycle
from streams.runtime.listeners import Listeners
from streams.runtime.recovery import RecoveryResult, recover
from streams.runtime.standby import Standbys
from streams.runtime.store import PartitionStore, close_all
from streams.runtime.store_spec import StateIdentity

log = logging.getLogger(__name__)

StoreFactory = Callable[[int], PartitionStore]


def _nothing_restored(shards: Sequence[int]) -> RecoveryResult:
    """No shard rebuilt apart: every one is opened and recovered in the worker."""
    return RecoveryResult()


def stage_dir(settings: RuntimeSettings, stage_name: str) -> Path:
    """Where one worker keeps one stage's shard stores."""
    return Path(settings.state_dir) / settings.app_id / stage_name / settings.worker_id


class Shards:
    """The shard stores of one worker, and what the open transaction sees of them (:attr:`owned`)."""

    def __init__(self, shard_topics: Iterable[str], changelog: str, identity: StateIdentity,
                 open_store: StoreFactory, kafka: KafkaConfig, clients: KafkaClients,
                 counters: Counters, lifecycle: Lifecycle, standbys: Standbys,
                 restore: Callable[[Sequence[int]], RecoveryResult] = _nothing_restored) -> None:
        self.topics = frozenset(shard_topics)
        self._changelog = changelog
        self._open = open_store
        self._kafka = kafka
        self._clients = clients
        self._counters = counters
        self._lifecycle = lifecycle
        self._standbys = standbys
        self._restore = restore
        self.stores: dict[int, PartitionStore] = {}
        self.identities = ShardIdentities(identity)
        self.owned = OwnedShards(self.stores, self.identities.first_use)
        self.listeners = Listeners([self.identities])  # told of shards revoked (the engine's)

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Bring the stores of the shards newly assigned up to date, check and own them."""
        shards = sorted(self._of(partitions))
        opened = self.bring_up([shard for shard in shards if shard not in self.stores])
        for partition, store in opened.items():
            self.identities.opened(partition, store)
        self.stores.update(opened)
        self.owned.generation += 1  # input partitions count too: a stage's routing changed

    def bring_up(self, shards: Sequence[int]) -> dict[int, PartitionStore]:
        """The stores of ``shards``, at their changelog's end: taken from the standbys (only their
        tail to replay), rebuilt in processes of their own (no local state), or opened; then
        recovered. For an assignment, and for a worker warming up before it joins."""
        began = time.perf_counter()
        taken = {shard: store for shard in shards if (store := self._standbys.take(shard)) is not None}
        taken_s = time.perf_counter() - began
        cold = self._restore([shard for shard in shards if shard not in taken])  # left closed
        opening = time.perf_counter()
        opened = {shard: taken[shard] if shard in taken else self._opened(shard) for shard in shards}
        opened_s = time.perf_counter() - opening
        result = recover(self._kafka, opened, self._changelog, clients=self._clients,
                         watcher=self._lifecycle)
        self._lifecycle.recovered(cold.total + result.total, cold.seconds + result.seconds)
        self._counters.recovered_records += cold.total + result.total
        if shards:
            log.info("shards: %s up in %.2f s: %d kept open here (%.2f s), %d rebuilt apart (%.2f s), "
                     "%d opened (%.2f s), %d changelog records replayed (%.2f s)",
                     ", ".join(map(str, shards)), time.perf_counter() - began, len(taken), taken_s,
                     len(cold.records), cold.seconds, len(shards) - len(taken), opened_s, result.total,
                     result.seconds,
                     extra={"fields": {"event": "shards_up", "shards": list(shards),
                                       "kept_open": sorted(taken), "opened_s": round(opened_s, 3),
                                       "replayed": result.total, "replay_s": round(result.seconds, 3)}})
        return opened

    def _opened(self, shard: int) -> PartitionStore:
        self._standbys.settle(shard)  # a store of it this worker was closing: closed first
        return self._open(shard)

    def _of(self, partitions: Sequence[TopicPartition]) -> set[int]:
        """The shards of an assignment; every shard topic's partition i must come with the others'."""
        by_topic: dict[str, set[int]] = {topic: set() for topic in self.topics}
        for tp in partitions:
            if tp.topic in self.topics:
                by_topic[tp.topic].add(tp.partition)
        shards = set().union(*by_topic.values())
        if any(found != shards for found in by_topic.values()):
            raise RuntimeFailure(f"an assignment that splits shards between workers ({by_topic}): "
                                 "every internal topic needs the same partition count, and the group "
                                 "the range assignor")
        return shards

    def revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Hand the revoked shards' stores to the standbys (kept open: most come back at once); the
        stage hears which went elsewhere."""
        shards = sorted({tp.partition for tp in partitions if tp.topic in self.topics})
        self.owned.generation += 1
        self.listeners.revoked(shards)
        for shard in shards:
            store = self.stores.pop(shard, None)
            if store is not None:
                self._standbys.park(shard, store)

    def close(self) -> None:
        """Close the owned stores and the standbys' (each flushes its memtable)."""
        stores = list(self.stores.values())
        self.stores.clear()
        try:
            self._standbys.close()
        finally:
            close_all(stores)
