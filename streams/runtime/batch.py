"""What a stage's two steps work with inside one batch: the shards' state and the records to emit.

Kept apart from the protocols of :mod:`streams.runtime.stage` because these classes are on the
hot path of every record and are compiled with mypyc (``setup.py``), which cannot compile the
``runtime_checkable`` protocols the engine tests stages against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from streams.runtime.store import PartitionStore


@dataclass(slots=True)
class Emit:
    """One record to produce. ``partition=None`` leaves it to the murmur2 partitioner.

    Not frozen, and its ``__init__`` written out: a frozen dataclass sets each field through
    ``object.__setattr__``, and even a plain one's generated ``__init__`` runs interpreted in a
    compiled module, several times the cost of this one, on a path run once per routed URL
    (docs/decisions/0002, "Records built on the hot path, measured").
    """

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None

    def __init__(self, topic: str, value: bytes | None, key: bytes | None = None,
                 partition: int | None = None) -> None:
        self.topic = topic
        self.value = value
        self.key = key
        self.partition = partition


class BatchState:
    """A shard's state as seen inside one batch: committed store plus this batch's writes.

    Writes stay in memory until the batch's transaction commits; only then does the runtime apply
    them to the store (so local state is never ahead of Kafka), and it also sends them to the
    changelog inside the transaction.
    """

    __slots__ = ("_store", "writes")

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self.writes: dict[bytes, bytes | None] = {}

    def get(self, key: bytes) -> bytes | None:
        if key in self.writes:
            return self.writes[key]
        return self._store.get(key)

    def set(self, key: bytes, value: bytes) -> None:
        self.writes[key] = value

    def delete(self, key: bytes) -> None:
        """A key written in this batch that the store does not hold leaves nothing to write: no
        tombstone goes to the changelog for a key it never had (the page stage's entries of a page
        decided in the transaction it arrived in, deleted at its verdict)."""
        if key in self.writes and self._store.get(key) is None:
            del self.writes[key]
        else:
            self.writes[key] = None

    @property
    def store(self) -> PartitionStore:
        return self._store


class OwnedShards:
    """The shards this worker owns, each as the open transaction sees it.

    The engine keeps one, over its live map of owned stores, and starts it afresh for each
    transaction (:meth:`begin`); the shard records of a batch are decided against its
    :meth:`state`, and so are records sent to an owned shard in the same transaction
    (:mod:`streams.runtime.local_path`): both see the same writes, which commit or abort together.
    Ownership changes only between batches (a rebalance runs inside the consumer's poll, never
    during a transaction). ``first_use`` is called with each shard's state when a transaction
    first reads it (the runtime checks the shard's identity there,
    :class:`streams.runtime.identity.ShardIdentities`).

    ``generation`` counts this worker's assignments and revocations (of its input partitions too):
    a stage that keeps anything about what it owns (the page stage's :mod:`local path
    <streams.stages.content_seen.local>`) starts it afresh when the count moves.

    ``pending``: the shards owned whose shard topic still holds records routed to them before this
    worker took them (:mod:`streams.runtime.backlog`); :meth:`settled` leaves them to the topic.
    ``detours`` counts the records the local path sent through their topic for one of them (owned,
    not settled): a stage that vouches for what its own records did (the page stage's tokens)
    starts its vouching afresh when the count moves, since such a record is still on its way.
    """

    __slots__ = ("_first_use", "_stores", "detours", "generation", "pending", "states")

    def __init__(self, stores: Mapping[int, PartitionStore],
                 first_use: Callable[[int, BatchState], None] | None = None) -> None:
        self._stores = stores
        self._first_use = first_use
        self.states: dict[int, BatchState] = {}
        self.generation = 0
        self.pending: set[int] = set()
        self.detours = 0

    def __contains__(self, partition: int) -> bool:
        return partition in self._stores

    def begin(self) -> dict[int, BatchState]:
        """A new transaction: no writes yet. Returns the map its states will be kept in."""
        self.states = {}
        return self.states

    def state(self, partition: int) -> BatchState | None:
        """Shard ``partition`` as the open transaction sees it, or None when it is not owned here."""
        state = self.states.get(partition)
        if state is None:
            store = self._stores.get(partition)
            if store is None:
                return None
            state = self.states[partition] = BatchState(store)
            if self._first_use is not None:
                self._first_use(partition, state)
        return state

    def settled(self, partition: int) -> BatchState | None:
        """Shard ``partition`` for the local path to decide a record of at once: None when it is not owned
        here, or when records routed to it before this worker took it wait in its shard topic (the
        record goes there too, after them, so sightings are decided in the order they came)."""
        if partition in self.pending:
            return None
        return self.state(partition)
