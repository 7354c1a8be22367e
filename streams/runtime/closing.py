"""Shard stores closed off the engine's thread, when the worker no longer needs them.

A RocksDB store closes by flushing its memtable to a file, and the stages' stores skip the
write-ahead log, so that flush cannot be skipped (:class:`~streams.runtime.store.RocksStore`). With
the hash memtable of the block-based stores (:func:`streams.runtime.rocks_tables.options`) a flush
sorts every entry first: a URL store holding 250,000 unflushed URLs took 2.8-3.5 s to close on the
development machine, one of 500,000 5.5 s. A worker closes stores when the group changes: a standby
copy no longer wanted, a shard revoked that went to another worker. Closed on the engine's thread,
each one paused every shard the worker owns for as long, and longer the larger the state: a worker
that gave four shards to a joining one held its own URLs back for seconds.

rocksdict releases the interpreter while RocksDB closes (a loop on the main thread went on with
pauses of at most 0.12 s while a store closed on another), so each store closes on a thread of its
own and the engine goes on. A shard's directory is opened again only once its close has finished
(:meth:`Closer.settle`), and a worker's own close waits for every one (each flushes its memtable,
so a clean stop leaves nothing to replay). A close that failed (a full disk) is raised at the next
:meth:`Closer.check`, from the engine's loop, as it would have been on the engine's thread.
"""

from __future__ import annotations

import threading

from streams.runtime.store import PartitionStore


class Closer:
    """The stores of one worker being closed, each on a thread of its own."""

    def __init__(self) -> None:
        self._closing: dict[int, threading.Thread] = {}
        self._failures: list[Exception] = []  # appended by the closing threads (atomic)

    def close(self, shard: int, store: PartitionStore) -> None:
        """Close ``store`` (shard ``shard``'s) on a thread of its own."""
        self.settle(shard)
        thread = threading.Thread(target=self._close, args=(store,), name=f"close-shard-{shard}", daemon=True)
        self._closing[shard] = thread
        thread.start()

    def _close(self, store: PartitionStore) -> None:
        try:
            store.close()
        except Exception as failure:  # noqa: BLE001 - raised on the engine's thread, by check
            self._failures.append(failure)

    def settle(self, shard: int) -> None:
        """Wait until shard ``shard``'s store is closed, if it is closing: before its directory is
        opened again (RocksDB locks it while it is open)."""
        thread = self._closing.pop(shard, None)
        if thread is not None:
            thread.join()
        self.check()

    def check(self) -> None:
        """Raise the first close that failed, if one did; forget the closes that finished."""
        for shard in [shard for shard, thread in self._closing.items() if not thread.is_alive()]:
            del self._closing[shard]
        if self._failures:
            raise self._failures.pop(0)

    @property
    def closing(self) -> list[int]:
        """The shards whose store is still closing."""
        return sorted(shard for shard, thread in self._closing.items() if thread.is_alive())

    def wait(self) -> None:
        """Wait for every close under way; raise the first that failed."""
        for shard in list(self._closing):
            self._closing.pop(shard).join()
        self.check()
