"""Named stores: the tables a stage's shard store is made of, each with its key prefix and its move.

A stage keeps one store and one changelog partition per shard, so that everything a transaction
writes there reaches RocksDB in one ``WriteBatch`` with the changelog offset it stands for
(:mod:`streams.runtime.store`). Inside it, each kind of entry is a *table*, declared by name in the
stage's :class:`~streams.runtime.store_spec.StoreSpec` (``tables``), as a Kafka Streams topology
declares its stores by name: a table is its entries' key prefix, in the store and in the changelog,
and how they move to another shard count (``python -m streams reshard``):

- by default, to the shard the key after the prefix routes to (:class:`~streams.runtime.moves.KeyedMove`:
  a table keyed by what the stage routes its records by);
- :func:`starts_afresh`: dropped, for what a shard keeps about the old shards themselves (progress,
  a token); the new shards begin it as on a first start;
- :func:`refused`: a state still holding any refuses the reshard, for work in flight (the page
  stage's waiting pages: drain first);
- the stage's own :class:`~streams.runtime.moves.StateMove` factory for anything else (entries
  copied to several shards, or merged).

Because the runtime holds the layout, a reshard moves each table by its own rule, reports what it
moved per table, and refuses an entry no table declares (a layout the build does not know), and
no stage module needs to know another's prefixes to move them. A table is also its processors' way
in: ``SEEN.get(state, key)`` reads ``key`` of table ``SEEN`` as the open transaction sees it.

What a table cannot have of its own is RocksDB options: the tables of a shard share one database,
whose options are the store's (``StoreSpec.open``). RocksDB's column families would give each its
own, at the price of one write-ahead log shared across them and a changelog that would need the
family in every record; nothing here has needed it (the page stage's point-read format suits every
one of its tables).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from streams.errors import ConfigError, ReshardRefused, StateError
from streams.runtime.batch import BatchState
from streams.runtime.moves import KeyedMove, Placed, StateMove
from streams.runtime.store import PartitionStore

TableMove = Callable[[int, int], StateMove]  # (old shard count, new shard count) -> its entries' move


@dataclass(frozen=True)
class Table:
    """One named store of a stage's shard store: entries under ``prefix``, moved by ``move``
    (``None``: to the shard the key after the prefix routes to)."""

    prefix: bytes
    move: TableMove | None = None

    def get(self, state: BatchState, key: bytes) -> bytes | None:
        """``key``'s value as the open transaction sees it."""
        return state.get(self.prefix + key)

    def set(self, state: BatchState, key: bytes, value: bytes) -> None:
        state.set(self.prefix + key, value)

    def delete(self, state: BatchState, key: bytes) -> None:
        state.delete(self.prefix + key)

    def read(self, store: PartitionStore, key: bytes) -> bytes | None:
        """``key``'s committed value (a worker's ``/status`` reads a shard's store this way)."""
        return store.get(self.prefix + key)

    def items(self, store: PartitionStore) -> Iterator[tuple[bytes, bytes]]:
        """Every committed entry, keys without the prefix (inspection and tests, not the hot path)."""
        size = len(self.prefix)
        return ((key[size:], value) for key, value in store.items() if key.startswith(self.prefix))

    def mover(self, old_shards: int, shards: int) -> StateMove:
        if self.move is None:
            return KeyedMove(old_shards, shards, prefix_bytes=len(self.prefix))
        return self.move(old_shards, shards)


class _Dropped:
    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        return ()

    def finish(self) -> Iterable[Placed]:
        return ()


def starts_afresh(old_shards: int, shards: int) -> StateMove:
    """A table's move that drops its entries: each new shard begins it as on a first start."""
    return _Dropped()


@dataclass(frozen=True)
class refused:  # noqa: N801 (used as a function: ``Table(b"w", refused("drain first"))``)
    """A table's move that refuses the reshard while the state holds any entry of it, saying why."""

    reason: str

    def __call__(self, old_shards: int, shards: int) -> StateMove:
        return _Refusing(self.reason)


@dataclass(frozen=True)
class _Refusing:
    reason: str

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        raise ReshardRefused(self.reason)

    def finish(self) -> Iterable[Placed]:
        return ()


def check_tables(tables: Mapping[str, Table]) -> None:
    """Refuse a layout where an entry could belong to two tables (or to none by an empty prefix)."""
    prefixes = sorted((table.prefix, name) for name, table in tables.items())
    for (prefix, name), (following, other) in zip(prefixes, prefixes[1:], strict=False):
        if following.startswith(prefix):
            raise ConfigError(f"tables {name!r} and {other!r}: prefix {prefix!r} begins {following!r}, so "
                              "an entry of one could be read as the other's; give each its own prefix")
    if prefixes and not prefixes[0][0]:
        raise ConfigError(f"table {prefixes[0][1]!r} has an empty prefix; every table needs one")


class TablesMove:
    """A store's :class:`~streams.runtime.moves.StateMove` made of its tables' moves: each entry goes
    to the move of the table whose prefix it starts with; :meth:`summary` says how many each placed."""

    def __init__(self, tables: Mapping[str, Table], old_shards: int, shards: int) -> None:
        self._moves = {table.prefix: (name, table.mover(old_shards, shards))
                       for name, table in tables.items()}
        self._lengths = sorted({len(prefix) for prefix in self._moves}, reverse=True)
        self.placed: Counter[str] = Counter({name: 0 for name in tables})

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        for length in self._lengths:
            found = self._moves.get(key[:length])
            if found is not None:
                name, move = found
                placed = list(move.place(old_shard, key, value))
                self.placed[name] += len(placed)
                return placed
        raise StateError(f"the state holds a key no table of this build declares: {key[:40]!r}")

    def finish(self) -> Iterable[Placed]:
        placed: list[Placed] = []
        for name, move in self._moves.values():
            finished = list(move.finish())
            self.placed[name] += len(finished)
            placed += finished
        return placed

    def summary(self) -> str:
        counts = ", ".join(f"{name} {count:,}" for name, count in self.placed.items())
        return f"entries written per table: {counts}"
