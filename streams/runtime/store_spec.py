"""A stage's store as it declares it, and the runtime builds, checks, recovers and moves it.

As Kafka Streams' stores are declared by their processor's supplier and built by the framework, a
stage declares its shard store once (``Stage.store``): what kind of store (a RocksDB store, or one
of its own), how it is read (ranges, or point by point), what its state was built with (an
identity the runtime checks in every shard) and how its keys are laid out (how its entries move to
another shard count). The runtime opens one per owned shard, recovers it from the changelog,
checks its identity and, on a reshard, moves it; the stage only reads and writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from streams.errors import ReshardRefused, StreamsError
from streams.runtime.moves import StateMove, StateRewrite
from streams.runtime.store import PartitionStore, RocksStore
from streams.runtime.tables import Table, TablesMove, check_tables

# (path, shard count, block cache MB, memtable MB)
StoreOpener = Callable[[Path, int, int, int], PartitionStore]
MoveFactory = Callable[[int, int], StateMove]  # (old shard count, new shard count)
RewriteFactory = Callable[[int, int], StateRewrite]


@dataclass(frozen=True)
class StateIdentity:
    """What a shard's state was built with (versions, settings): ``entries``, state keys and values.

    The runtime writes them into a shard with the first record it decides there (so they are
    changelogged with it), and compares them whenever the worker opens the shard and before it
    first uses it: a shard holding other values is refused with ``refusal(partition, found)``, the
    stage's own explanation of how to upgrade, instead of mixing two kinds of state silently.
    ``adopted`` names, per entry, earlier values of a state this build still reads (a format it
    upgrades as it goes): such a shard is taken, and its entry rewritten with the first record
    decided there, after which a build that does not read the new format refuses it.
    """

    entries: Mapping[bytes, bytes]
    refusal: Callable[[int, Mapping[bytes, bytes | None]], StreamsError]
    adopted: Mapping[bytes, frozenset[bytes]] = field(default_factory=dict)

    def accepts(self, found: Mapping[bytes, bytes | None]) -> bool:
        """Whether a shard holding ``found`` is this state, or an earlier one this build adopts."""
        return all(found.get(key) == value or found.get(key) in self.adopted.get(key, frozenset())
                   for key, value in self.entries.items())


def _never_refused(partition: int, found: Mapping[bytes, bytes | None]) -> StreamsError:
    raise AssertionError("a state with no identity entries refuses no shard")


NO_IDENTITY: Final = StateIdentity({}, _never_refused)  # nothing to write, nothing to compare


@dataclass(frozen=True)
class RocksOpener:
    """Opens a RocksDB shard store; a value, not a closure, so a restore process can be handed it
    (:mod:`streams.runtime.restore`)."""

    point_read_prefix_bytes: int | None = None

    def __call__(self, path: Path, shards: int, block_cache_mb: int, memtable_mb: int) -> PartitionStore:
        return RocksStore(path, block_cache_mb, plain_table_prefix_bytes=self.point_read_prefix_bytes,
                          memtable_mb=memtable_mb)


def rocks_store(point_read_prefix_bytes: int | None) -> StoreOpener:
    """RocksDB, in PlainTable format for point reads hashed on ``point_read_prefix_bytes`` of each
    key (:mod:`streams.runtime.rocks_tables` says when that pays), else block-based with a cache."""
    return RocksOpener(point_read_prefix_bytes)


@dataclass(frozen=True)
class StoreSpec:
    """A stage's shard store (see the module docstring).

    - ``open``: the store of one shard (default: RocksDB, block-based tables with a block cache);
      :func:`rocks_store` for PlainTable point reads, or the stage's own kind (the URL stage's
      seen-set behind a Bloom filter). It must pickle (a module-level function, a ``partial`` of
      one, a dataclass): a restore from an empty state directory opens stores in processes of its
      own.
    - ``identity``: what the state must have been built with (none by default).
    - ``tables``: its named stores (:mod:`streams.runtime.tables`), each a key prefix and how its
      entries move from one shard count to another; the runtime moves the store table by table.
    - ``layout``: a move of the whole store instead (:mod:`streams.runtime.moves`), for tables whose
      entries move together (revisit rebuilds each new shard's budget from the histories it gets);
      a store with neither cannot be resharded.
    - ``rewrite``: how a state built with another identity is made this build's, its entries moved
      and rewritten (the URL stage re-fingerprints its URLs for new canonicalization settings), by
      a reshard that asks for it (:mod:`streams.runtime.reshard`; to the same shard count, the
      stage's migration); without it, or not asked, such a state is refused, as a worker refuses it.
    """

    open: StoreOpener = field(default_factory=RocksOpener)
    identity: StateIdentity = NO_IDENTITY
    tables: Mapping[str, Table] = field(default_factory=dict)
    layout: MoveFactory | None = None
    rewrite: RewriteFactory | None = None

    def __post_init__(self) -> None:
        check_tables(self.tables)

    def move(self, old_shards: int, shards: int) -> StateMove:
        """How this store's entries move from ``old_shards`` shards to ``shards``: its layout, else its
        tables' moves; refused when it declares neither."""
        if self.layout is not None:
            return self.layout(old_shards, shards)
        if self.tables:
            return TablesMove(self.tables, old_shards, shards)
        raise ReshardRefused("this stage declares no way to move its state (StoreSpec.tables or .layout)")
