"""Restore: shards with no local state rebuilt from their changelogs, in processes of their own.

Rebuilding a shard from nothing is the one time a worker reads a whole changelog partition: a new
worker, a lost disk, a worker that never held the shard and keeps no standby of it. Replaying is
CPU work for every record (the message, its key and value, a RocksDB write and its share of a
memtable flush, for the URL stage a Bloom filter insert), three to four times what a plain
consumer spends reading it (docs/restore.md has the costs). Shards are independent (store *i* reads only
changelog partition *i*), so the cold shards of an assignment are split over
``[runtime] restore_processes`` processes (default: one per CPU), each opening its shards' stores
itself (RocksDB's lock lets one process open a store), replaying them with the same
:func:`~streams.runtime.recovery.recover`, and closing them (the URL stage's store writes its Bloom
filter's snapshot, so the worker opens it without a rebuild); then the worker opens them and
replays the little tail written meanwhile. Kafka Streams restores with one restore consumer per
stream thread.

A restore process writes its stores and reads nothing from them, so it opens them for loading in
bulk (:func:`~streams.runtime.rocks_tables.load_in_bulk`: a vector memtable, sorted once when it is
flushed, in place of the hash memtable a worker reads through, whose flush alone cost more than
reading the changelog). RocksDB's other bulk load, SST files written in key order and ingested,
would need each chunk sorted in Python first, and its files would overlap one another as the
memtable's do; docs/restore.md has the measurements.

Only shards whose store directory does not exist are restored this way, and only when their
changelogs hold at least :data:`PARALLEL_MIN_OFFSETS` offsets in all: starting a process (a new
interpreter importing the package) costs about a second. Progress is reported as the in-process
recovery's (:class:`~streams.runtime.recovery.RecoveryWatcher`), so the log's recovery lines and
the gauges cover it; a process that fails stops the worker with the process's own error.

Processes are started with ``spawn``, never ``fork``: librdkafka's threads in the worker would not
survive a fork. What a process is handed (the stage's store opener, the Kafka settings) is this
worker's own configuration, pickled between its own processes; nothing read from a topic is.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Consumer, TopicPartition

from streams.errors import RuntimeFailure
from streams.runtime import rocks_tables
from streams.runtime.cores import this_process_cores
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import RecoveryResult, RecoveryWatcher, recover, watermarks
from streams.runtime.store import PartitionStore, close_all
from streams.runtime.store_spec import StoreOpener

log: Final = logging.getLogger(__name__)

PARALLEL_MIN_OFFSETS: Final = 200_000
PROGRESS_INTERVAL_S: Final = 0.5


def tune_garbage_collector() -> None:
    """Keep the cyclic garbage collector off a worker's hot path.

    Every batch allocates thousands of objects the collector tracks (a ``Message`` per record, the
    records' dicts, their ``Emit`` s) and frees them, almost all by reference counting, when the
    batch ends. At CPython's default generation-0 threshold (700 allocations) the collector ran
    several times a batch and each time traversed the batch's live records, and promoted them, only
    for them to die a moment later; in the URL stage that cost 9 % of its throughput (A/B in
    docs/decisions/0002-compiled-hot-path.md). With a threshold above a batch's allocations it
    rarely runs while a batch is alive. ``gc.freeze`` moves what start-up built (modules, schemas,
    tables) out of every later collection: it is never garbage. Cycles are still collected.
    """
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


@dataclass(frozen=True)
class ShardOpener:
    """How one worker opens shard *i*'s store: the stage's opener, under the worker's directory."""

    open: StoreOpener
    directory: Path
    shards: int
    block_cache_mb: int
    memtable_mb: int

    def path(self, shard: int) -> Path:
        return self.directory / f"shard-{shard:04d}"

    def __call__(self, shard: int) -> PartitionStore:
        return self.open(self.path(shard), self.shards, self.block_cache_mb, self.memtable_mb)


def processes_for(setting: int | str) -> int:
    """The restore processes of the ``restore_processes`` setting (``auto``: one per usable core)."""
    return this_process_cores() if setting == "auto" else int(setting)


def restore_cold(kafka: KafkaConfig, opener: ShardOpener | None, shards: Sequence[int], topic: str,
                 processes: int, watcher: RecoveryWatcher | None = None) -> RecoveryResult:
    """Rebuild those of ``shards`` with no store directory yet, in up to ``processes`` processes,
    when there is enough to replay; the stores are left closed, up to their changelog's end as it
    was. Nothing is done (an empty result) when it would not pay: the caller opens and recovers."""
    if opener is None or processes < 2:
        return RecoveryResult()
    cold = [shard for shard in shards if not opener.path(shard).exists()]
    backlog = _backlog(kafka, topic, cold)
    if len(cold) < 2 or sum(backlog.values()) < PARALLEL_MIN_OFFSETS:
        return RecoveryResult()
    groups = _split(backlog, min(processes, len(cold)))
    began = time.monotonic()
    log.info("restore: %d shards from nothing, %d changelog offsets, in %d processes", len(cold),
             sum(backlog.values()), len(groups),
             extra={"fields": {"event": "restore", "shards": cold, "offsets": sum(backlog.values()),
                               "processes": len(groups)}})
    records = _run(kafka, opener, groups, topic, watcher)
    return RecoveryResult(records, time.monotonic() - began)


def _backlog(kafka: KafkaConfig, topic: str, shards: Sequence[int]) -> dict[int, int]:
    """Offsets each shard's changelog partition holds (its end less its start)."""
    consumer = Consumer(kafka.consumer(f"{topic}.restore"))
    try:
        found = {}
        for shard in shards:
            low, high = watermarks(consumer, TopicPartition(topic, shard))
            found[shard] = max(0, high - low)
        return found
    finally:
        consumer.close()


def _split(backlog: Mapping[int, int], count: int) -> list[list[int]]:
    """Shards in ``count`` groups of about equal backlog (largest first, each to the lightest)."""
    groups: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for shard in sorted(backlog, key=lambda s: (-backlog[s], s)):
        lightest = loads.index(min(loads))
        groups[lightest].append(shard)
        loads[lightest] += backlog[shard]
    return [sorted(group) for group in groups if group]


def _run(kafka: KafkaConfig, opener: ShardOpener, groups: list[list[int]], topic: str,
         watcher: RecoveryWatcher | None) -> dict[int, int]:
    context = multiprocessing.get_context("spawn")
    running: dict[Connection, Any] = {}
    for group in groups:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=restore_process, args=(send, kafka, opener, group, topic),
                                  name=f"restore-{'-'.join(map(str, group))}", daemon=True)
        process.start()
        send.close()
        running[receive] = process
    records: dict[int, int] = {}
    positions: dict[int, tuple[int, int, int]] = {}
    try:
        while running:
            for ready in wait(list(running), timeout=PROGRESS_INTERVAL_S):
                assert isinstance(ready, Connection)
                _take(ready, running, records, positions)
            if watcher is not None and positions:
                watcher.recovering(dict(positions))
    finally:
        for process in running.values():
            process.kill()
    return records


def _take(ready: Connection, running: dict[Connection, Any], records: dict[int, int],
          positions: dict[int, tuple[int, int, int]]) -> None:
    """One message of a restore process: progress, its result, or its error (then stop)."""
    process = running[ready]
    try:
        kind, body = ready.recv()
    except EOFError:
        process.join(5)
        del running[ready]
        raise RuntimeFailure(f"restore process {process.name} exited ({process.exitcode}) before it "
                             "finished; start the worker again") from None
    if kind == "progress":
        positions.update(body)
    elif kind == "done":
        records.update(body)
        process.join(30)
        del running[ready]
    else:
        process.join(5)
        del running[ready]
        raise RuntimeFailure(f"restoring shards from the changelog failed in {process.name}: {body}")


class _Reporter:
    """A restore process's recovery watcher: its progress, sent to the worker now and then."""

    def __init__(self, send: Connection) -> None:
        self._send = send
        self._last = 0.0

    def recovering(self, positions: Mapping[int, tuple[int, int, int]]) -> None:
        if time.monotonic() - self._last >= PROGRESS_INTERVAL_S:
            self._last = time.monotonic()
            self._send.send(("progress", dict(positions)))


def restore_process(send: Connection, kafka: KafkaConfig, opener: ShardOpener, shards: list[int],
                    topic: str) -> None:
    """One restore process: open ``shards``, replay their changelogs, close them, say how it went."""
    tune_garbage_collector()
    rocks_tables.load_in_bulk()
    try:
        stores = {shard: opener(shard) for shard in shards}
        try:
            result = recover(kafka, stores, topic, watcher=_Reporter(send))
        finally:
            close_all(stores.values())
        send.send(("done", result.records))
    except Exception as error:  # noqa: BLE001 - said to the worker, which stops with it
        send.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        send.close()
