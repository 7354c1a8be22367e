"""Partition state stores: one small interface, a RocksDB and an in-memory implementation.

A stage keeps one store per internal shard partition (shard *i* of the re-keyed topic owns store
*i* and changelog partition *i*). The interface is deliberately tiny so that the runtime's commit
and recovery steps can be tested against :class:`MemoryStore` and then, unchanged, against
:class:`RocksStore`; ``tests/runtime/test_store.py`` runs one suite over both.

Layout (the house style, after quix-streams' ``state/rocksdb``): data keys under the prefix
``b"d"``, metadata under ``b"m"``. The changelog offset of the last applied record is written in
the same RocksDB ``WriteBatch`` as the data it stands for, so after a crash the store is either
before or after a batch, never half-way, and recovery resumes from exactly that offset.

The runtime applies a batch here only *after* its Kafka transaction has committed, so a store is
never ahead of its changelog; at worst it is one batch behind, and recovery replays that batch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from streams.errors import DiskFull, StateError, StreamsError
from streams.runtime import rocks_tables
from streams.runtime.rocks_tables import TableFormat

DATA_PREFIX = b"d"
META_PREFIX = b"m"
CHANGELOG_OFFSET = "changelog_offset"
FORMAT_VERSION_KEY = "format_version"
FORMAT_VERSION = b"1"


class PartitionStore(Protocol):
    """Key/value state of one shard partition, with its changelog position."""

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or ``None``."""
        ...

    def apply(self, writes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        """Atomically write ``writes`` (``None`` deletes) and the changelog offset they reach."""
        ...

    def changelog_offset(self) -> int | None:
        """Offset of the last changelog record reflected here, ``None`` for a fresh store."""
        ...

    def get_meta(self, name: str) -> bytes | None: ...

    def set_meta(self, name: str, value: bytes) -> None: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every data key and value (for migrations and tests, not the hot path)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Measured(Protocol):
    """A store that can say how big it is (``state_bytes``) and, for Bloom filters, how full."""

    def measurements(self) -> dict[str, float]:
        """Gauge name (without the ``crawl_dedup_`` prefix) -> value; cheap enough for every scrape."""
        ...


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parent owner-only (0700), whatever the umask.

    ``Path.mkdir(parents=True, mode=0o700)`` applies the mode to the last component only; the
    parents it creates get the umask's default (often 0755), which would let other local users list
    the state tree. Directories that already exist are left as the operator made them.
    """
    missing = [parent for parent in (path, *path.parents) if not parent.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        os.chmod(directory, 0o700)
    return path


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# How RocksDB's status says it (rocksdict raises it as a plain Exception, "IO error: No space left on
# device: While appending to file: ..."): strerror(ENOSPC) and strerror(EDQUOT).
NO_SPACE_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))


def no_space(error: BaseException) -> bool:
    """Whether ``error`` says the filesystem is full (or the user's quota is)."""
    if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
        return True
    return any(text in str(error) for text in NO_SPACE_TEXTS)


def disk_full(path: Path) -> DiskFull:
    """What a worker stops with when ``path``'s filesystem is full: one line naming the directory,
    the space left there, and what to do."""
    existing = next((folder for folder in (path, *path.parents) if folder.exists()), Path("/"))
    stats = os.statvfs(existing)
    free, total = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
    return DiskFull(f"no space left for local state in {path}: {_mib(free)} free of {_mib(total)} on its "
                    "filesystem; free space there, or move [runtime] state_dir (STREAMS_RUNTIME_STATE_DIR) "
                    "to a larger disk, then start the worker again: it resumes from its last commit, its "
                    "state catching up from the changelog")


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


@contextlib.contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """Raise :class:`DiskFull` for ``path`` in place of a no-space error (OS or RocksDB)."""
    try:
        yield
    except StreamsError:
        raise
    except Exception as error:
        if no_space(error):
            raise disk_full(path) from error
        raise


def _decode_offset(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


class MemoryStore:
    """A dict-backed :class:`PartitionStore` for unit tests and ``--offline`` runs without a dir."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._meta: dict[str, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def apply(self, writes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        for key, value in writes.items():
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        if changelog_offset is not None:
            self._meta[CHANGELOG_OFFSET] = str(changelog_offset).encode()

    def changelog_offset(self) -> int | None:
        return _decode_offset(self._meta.get(CHANGELOG_OFFSET))

    def get_meta(self, name: str) -> bytes | None:
        return self._meta.get(name)

    def set_meta(self, name: str, value: bytes) -> None:
        self._meta[name] = value

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        yield from sorted(self._data.items())

    def close(self) -> None:
        pass


class RocksStore:
    """A :class:`PartitionStore` in one RocksDB database (rocksdict), created owner-only (0700).

    In block-based tables with a Bloom filter and a ``block_cache_mb`` block cache, or, given
    ``plain_table_prefix_bytes``, in RocksDB's PlainTable format with a hash index on that many
    leading bytes of each key (:mod:`streams.runtime.rocks_tables` says when and why). A store
    found in the other format is converted when it is opened. The options hold for the default
    column family too (:func:`~streams.runtime.rocks_tables.open_db` says why).

    Writes skip RocksDB's write-ahead log, as Kafka Streams' RocksDB stores do: the changelog is
    the log. A process killed before RocksDB flushed its memtable reopens the store at its last
    flush, which is a consistent earlier state (one column family; each :meth:`apply` is one
    atomic write batch holding its changelog offset), and recovery replays the changelog from that
    offset. A clean close flushes the memtable. The log cost the URL worker about 2 % of its time
    (a file append per shard per batch) and doubled what it wrote to disk.
    """

    def __init__(self, path: Path, block_cache_mb: int = 64, *,
                 plain_table_prefix_bytes: int | None = None,
                 memtable_mb: int = rocks_tables.MEMTABLE_MB) -> None:
        self._path = path
        with disk_errors(path):
            self._open(path, block_cache_mb, plain_table_prefix_bytes, memtable_mb)

    def _open(self, path: Path, block_cache_mb: int, plain_table_prefix_bytes: int | None,
              memtable_mb: int) -> None:
        private_dir(path.parent)
        wanted: TableFormat = "block" if plain_table_prefix_bytes is None else "plain"
        prefix_bytes = len(DATA_PREFIX) + (plain_table_prefix_bytes or 0)
        rocks_tables.settle(path)
        found = rocks_tables.format_on_disk(path)
        if found is not None and found != wanted:
            rocks_tables.convert(path, found, wanted, block_cache_mb=block_cache_mb,
                                 prefix_bytes=prefix_bytes)
        options = rocks_tables.options(wanted, block_cache_mb=block_cache_mb, prefix_bytes=prefix_bytes,
                                       memtable_mb=memtable_mb)
        self.table_format = wanted
        self._db = rocks_tables.open_db(path, options)
        self._db.set_write_options(rocks_tables.without_wal())
        if wanted == "plain":
            rocks_tables.release_freed_heap()
        os.chmod(path, 0o700)
        self._check_format()
        self._offset = _decode_offset(self.get_meta(CHANGELOG_OFFSET))

    def _check_format(self) -> None:
        found = self.get_meta(FORMAT_VERSION_KEY)
        if found is None:
            self.set_meta(FORMAT_VERSION_KEY, FORMAT_VERSION)
        elif found != FORMAT_VERSION:
            raise StateError(
                f"state at {self._path} has format {found!r}, this version reads {FORMAT_VERSION!r}"
            )

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(DATA_PREFIX + key)
        return value

    def apply(self, writes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key, value in writes.items():
            if value is None:
                batch.delete(DATA_PREFIX + key)
            else:
                batch.put(DATA_PREFIX + key, value)
        if changelog_offset is not None:
            batch.put(META_PREFIX + CHANGELOG_OFFSET.encode(), str(changelog_offset).encode())
        with disk_errors(self._path):  # a memtable flush that failed fails the writes after it
            self._db.write(batch)
        if changelog_offset is not None:
            self._offset = changelog_offset

    def changelog_offset(self) -> int | None:
        """Kept in memory from the store's opening and its writes (it is read once per batch, and a
        store loaded in bulk must not be read: :func:`~streams.runtime.rocks_tables.load_in_bulk`)."""
        return self._offset

    def get_meta(self, name: str) -> bytes | None:
        value: bytes | None = self._db.get(META_PREFIX + name.encode())
        return value

    def set_meta(self, name: str, value: bytes) -> None:
        with disk_errors(self._path):
            self._db.put(META_PREFIX + name.encode(), value)
        if name == CHANGELOG_OFFSET:
            self._offset = _decode_offset(value)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Data keys in order (not the hot path: migrations, rebuilding a Bloom filter, tests)."""
        for key, value in rocks_tables.scan(self._db):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw_mode
            if key < DATA_PREFIX:
                continue
            if not key.startswith(DATA_PREFIX):
                break
            yield key[len(DATA_PREFIX):], value

    def measurements(self) -> dict[str, float]:
        """SST files on disk plus memtables: what the shard costs (RocksDB's own counters, O(1))."""
        names = ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables")
        return {"state_bytes": float(sum(self._db.property_int_value(name) or 0 for name in names))}

    def index_memory_bytes(self) -> int:
        """Memory the open files' indexes and filters take outside the block cache (PlainTable's hash
        indexes and Bloom filters; RocksDB's estimate)."""
        return self._db.property_int_value("rocksdb.estimate-table-readers-mem") or 0

    def block_cache_bytes(self) -> int:
        """The block cache's capacity in bytes, as RocksDB reports it."""
        return self._db.property_int_value("rocksdb.block-cache-capacity") or 0

    def block_cache_usage_bytes(self) -> int:
        """Bytes the block cache holds now (benchmarks: does the working set fit?)."""
        return self._db.property_int_value("rocksdb.block-cache-usage") or 0

    def compact(self) -> None:
        """Compact the whole store (after a bulk load, so reads do not search many level-0 files)."""
        self._db.compact_range(None, None)

    def close(self) -> None:
        with disk_errors(self._path):  # closing flushes the memtable
            self._db.close()


def close_all(stores: Iterable[PartitionStore]) -> None:
    """Close every store, even after one failed (each flushes its memtable); raise the first error."""
    failures: list[Exception] = []
    for store in stores:
        try:
            store.close()
        except Exception as failure:  # noqa: BLE001 - raised below, once the others are closed
            failures.append(failure)
    if failures:
        raise failures[0]


def destroy(path: Path) -> None:
    """Remove a store's files (a reset: the changelog rebuilds it on the next start)."""
    shutil.rmtree(path, ignore_errors=True)
