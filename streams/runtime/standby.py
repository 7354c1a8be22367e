"""Standby replicas: warm copies of shards this worker does not own, kept by reading their changelog.

Why: a shard's state lives in its owner's RocksDB and in its changelog partition. When the owner is
lost, the worker that takes the shard must replay the changelog before it decides anything: 13 s
for two million records here, ten minutes at 10^8 URLs a worker, while every URL of the shard waits.
Kafka Streams answers with standby tasks (``num.standby.replicas``), Faust with standbys: another
worker applies the changelog as it is written, so a takeover replays only the tail.

Here (docs/decisions/0011-standby-replicas.md):

- **Which shards.** :func:`streams.runtime.placement.standby_shards`: the shards this worker would
  be given if their owner left, by the group's range assignor; the group's members come from
  :class:`~streams.runtime.group_view.GroupView`. ``[runtime] standby_replicas`` of them per shard.
- **How.** One consumer (read_committed, assigned, never in the group) reads the changelog
  partitions of those shards, and the worker applies what it read to local stores opened exactly as
  the owner's are (same factory, same path ``shard-NNNN`` under the worker's state directory), each
  write batch with the changelog offset it reaches, as recovery does. A standby never decides,
  produces or commits anything: it only reads committed changelog records.
- **When.** On the engine's own thread, between batches, within a time budget
  (:meth:`Standbys.catch_up`): no lock, no second thread competing for the interpreter, and a worker
  under load gives its own shards priority. What a standby costs is what replaying the changelog
  costs, spread over time: about the owner's changelog rate times the replay cost a record.
- **Handover.** When the group gives this worker a shard it keeps warm, :meth:`take` hands the open
  store to the owner's side (:mod:`streams.runtime.shards`), which replays only what the standby had
  not read yet. A shard revoked from this worker is :meth:`park` ed, still open: the range assignor
  revokes every partition at every rebalance, and most come straight back; the rest become
  standbys, or are closed once the new assignment is known (:meth:`keep`), on threads of their
  own (:mod:`streams.runtime.closing`). Shards the group is about to give this worker are held
  open: a standby of one goes on following its changelog until the assignment takes it.

Correctness never rests on a standby: a store is only ever at a committed changelog offset, and the
owner's recovery always starts from the store's own offset, so a standby that is behind, stale or
missing only makes the takeover slower.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.runtime.clients import KafkaClients
from streams.runtime.closing import Closer
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import Replay
from streams.runtime.store import PartitionStore, close_all

log: Final = logging.getLogger(__name__)

CHUNK_RECORDS: Final = 5_000  # changelog records taken from the client at once


class Standbys:
    """The standby stores of one worker, and the consumer that keeps them warm."""

    def __init__(self, changelog: str, open_store: Callable[[int], PartitionStore], kafka: KafkaConfig,
                 clients: KafkaClients, replicas: int) -> None:
        self.replicas = replicas
        self.changelog = changelog
        self._open = open_store
        self._kafka = kafka
        self._clients = clients
        self.stores: dict[int, PartitionStore] = {}
        self._replays: dict[int, Replay] = {}
        self._parked: dict[int, PartitionStore] = {}
        self._consumer: Consumer | None = None
        self._at_end: set[int] = set()  # shards whose changelog end was reached since their last record
        self._warm: set[int] = set()  # shards whose changelog end was reached once since placed here
        self.applied = 0  # changelog records applied to standbys, in all
        self._closer = Closer()

    # -- what this worker keeps ------------------------------------------------------------------

    def park(self, shard: int, store: PartitionStore) -> None:
        """A shard revoked from this worker: kept open until the new assignment is known."""
        self._parked[shard] = store

    def take(self, shard: int) -> PartitionStore | None:
        """The open store of ``shard``, if this worker keeps one (parked or standby), for its owner."""
        store = self._parked.pop(shard, None)
        if store is not None:
            return store
        store = self.stores.pop(shard, None)
        if store is not None:
            self._flush(shard)
            self._replays.pop(shard, None)
            self._at_end.discard(shard)
            self._warm.discard(shard)
            self._reassign()
        return store

    def keep(self, wanted: Iterable[int], held: Iterable[int] = ()) -> None:
        """Keep standbys of exactly ``wanted`` (none of them owned here): open the new ones (a parked
        store first), close the others and every parked store not wanted, on threads of their own
        (:mod:`streams.runtime.closing`). ``held``: shards the group is about to give this worker
        (its owner left, or this worker is joining): a standby of one goes on following its
        changelog and a parked one stays parked, so the assignment takes them open, warm."""
        wanted = set(wanted)
        held = set(held) - wanted
        gone = [shard for shard in self.stores if shard not in wanted and shard not in held]
        unparked = [shard for shard in self._parked if shard not in wanted and shard not in held]
        new = sorted(wanted - set(self.stores))
        if not gone and not unparked and not new:
            return
        began = time.perf_counter()
        for shard in gone:
            self._flush(shard)
            self._replays.pop(shard, None)
            self._at_end.discard(shard)
            self._warm.discard(shard)
            self._closer.close(shard, self.stores.pop(shard))
        for shard in unparked:
            self._closer.close(shard, self._parked.pop(shard))
        opened = 0
        for shard in new:
            parked = self._parked.pop(shard, None)
            if parked is None:
                self._closer.settle(shard)
                opened += 1
            self.stores[shard] = parked if parked is not None else self._open(shard)
            self._replays[shard] = Replay(self.stores[shard], -1, -1)
        self._reassign()
        log.info("standby: keeping shards %s warm%s (%d closing, %d opened in %.2f s)",
                 ", ".join(map(str, sorted(self.stores))) or "none",
                 f", shards {', '.join(map(str, sorted(held)))} held for this worker" if held else "",
                 len(gone) + len(unparked), opened, time.perf_counter() - began,
                 extra={"fields": {"event": "standby", "shards": sorted(self.stores), "held": sorted(held),
                                   "closing": sorted([*gone, *unparked]), "opened": opened}})

    def settle(self, shard: int) -> None:
        """Wait until a store of ``shard`` this worker was closing is closed (before it opens it)."""
        self._closer.settle(shard)

    def _reassign(self) -> None:
        if not self.stores and self._consumer is None:
            return
        consumer = self._consumer_now()
        positions = []
        for shard, store in sorted(self.stores.items()):
            offset = store.changelog_offset()
            positions.append(TopicPartition(self.changelog, shard,
                                            OFFSET_BEGINNING if offset is None else offset + 1))
        consumer.assign(positions)

    def _consumer_now(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._clients.consumer(self._kafka.consumer(
                f"{self.changelog}.standby", **{"enable.partition.eof": True,
                                                  "fetch.max.bytes": 64 * 1024 * 1024}))
        return self._consumer

    # -- keeping them warm -----------------------------------------------------------------------

    def catch_up(self, budget_s: float, wait_s: float = 0.0) -> int:
        """Apply what the changelog holds for the standbys, for at most about ``budget_s``, waiting
        up to ``wait_s`` for the first records when none are fetched; the number applied."""
        self._closer.check()
        if not self.stores or self._consumer is None:
            return 0
        deadline = time.perf_counter() + budget_s
        applied = 0
        wait = wait_s
        while True:
            messages = self._consumer.consume(CHUNK_RECORDS, timeout=wait)
            wait = 0.0
            if not messages:
                break
            applied += self._apply(messages)
            if time.perf_counter() > deadline:
                break
        self.applied += applied
        return applied

    def mark_caught_up(self, timeout_s: float = 5.0) -> None:
        """Mark at its end each standby whose store holds all its changelog partition does: an
        empty changelog above all (a new application's). One request a partition, where waiting
        for the client's end-of-partition events took a fetch round or more (a worker of a new
        application warmed 8 empty shards for 1.6 s before joining). A partition not answered, or
        whose end lies past the store (transaction markers count), is left to the fetches."""
        consumer = self._consumer
        if consumer is None:
            return
        for shard, store in self.stores.items():
            if shard in self._at_end:
                continue
            partition = TopicPartition(self.changelog, shard)
            try:
                _, high = consumer.get_watermark_offsets(partition, timeout=timeout_s)
            except KafkaException:
                continue
            offset = store.changelog_offset()
            if high <= (0 if offset is None else offset + 1):
                self._at_end.add(shard)
                self._warm.add(shard)

    def _apply(self, messages: list[Message]) -> int:
        replays, at_end = self._replays, self._at_end
        count = 0
        for message in messages:
            shard = message.partition() or 0
            replay = replays.get(shard)
            if replay is None:
                continue  # fetched before the shard was taken or dropped
            error = message.error()
            if error is None:
                replay.add(message)
                at_end.discard(shard)
                count += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(shard)
                self._warm.add(shard)
            elif error.fatal():
                log.warning("standby: reading %s[%s]: %s", self.changelog, shard, error)
        for replay in replays.values():
            replay.flush()
        return count

    def _flush(self, shard: int) -> None:
        replay = self._replays.get(shard)
        if replay is not None:
            replay.flush()

    # -- what it knows ---------------------------------------------------------------------------

    @property
    def parked(self) -> bool:
        """Whether revoked stores wait for the new assignment to say what becomes of them."""
        return bool(self._parked)

    @property
    def warm(self) -> bool:
        """Whether every standby has reached its changelog's end at least once."""
        return all(shard in self._warm for shard in self.stores)

    @property
    def behind(self) -> bool:
        """Whether some standby has not reached its changelog's end since its last record."""
        return any(shard not in self._at_end for shard in self.stores)

    def lag(self) -> dict[int, int]:
        """Shard -> changelog offsets not yet applied, as of the client's last fetch (cheap)."""
        if self._consumer is None:
            return {}
        lags = {}
        for shard, store in self.stores.items():
            if shard in self._at_end:
                lags[shard] = 0
                continue
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.changelog, shard), timeout=0, cached=True)
            except Exception:  # noqa: BLE001 - a gauge: unknown until the first fetch
                continue
            offset = store.changelog_offset()
            if high >= 0:
                lags[shard] = max(0, high - (0 if offset is None else offset + 1))
        return lags

    def close(self) -> None:
        for replay in self._replays.values():
            replay.flush()
        stores = [*self.stores.values(), *self._parked.values()]
        self.stores, self._parked, self._replays = {}, {}, {}
        try:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
        finally:
            try:
                close_all(stores)
            finally:
                self._closer.wait()
