"""The two RocksDB table formats a shard store is kept in, and moving a store from one to the other.

*Block-based* tables, RocksDB's default, hold sorted keys in compressed blocks behind a block
cache, with a Bloom filter per file. They suit every stage and any access pattern.

*PlainTable* (RocksDB wiki, "PlainTable Format") is built for point reads of data held in memory:
keys and values lie unencoded in memory-mapped files, and a key is found through an in-memory hash
index of its prefix and a Bloom filter, instead of an index-block search, a filter block and a
data-block search through the block cache. The page stage reads its block tables this way, 10
random buckets per page (:mod:`streams.stages.content_seen.buckets`). Once the store is gigabytes,
each of those block-cache structures misses the CPU caches, so a lookup costs less in PlainTable
than in block-based tables even when the block cache holds the whole store
(docs/decisions/0003-plaintable-for-block-tables.md has the timings, from
``bench/content_lookup.py``).

PlainTable has costs (the same document measures them):
- no compression: more bytes per page on disk;
- the OS page cache holds the files, so ``rocksdb_block_cache_mb`` does not apply;
- the hash index is built in memory when a file is opened, in time and heap that grow with the
  pages stored;
- a scan is defined only from the first key, which is how :meth:`RocksStore.items` reads.

A store keeps the format it was created in: RocksDB cannot read one format with the other's
options. A store found in the other format is converted (:func:`convert`): its keys are copied
into a new store beside it, then the directories are swapped. A crash at any step leaves either
the old store in place or the new one; :func:`settle` finishes or undoes a swap that a crash cut
short, before the store is opened.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

TableFormat = Literal["block", "plain"]
_FACTORY_NAMES: dict[str, TableFormat] = {"BlockBasedTable": "block", "PlainTable": "plain"}
COPY_BATCH_KEYS = 10_000
BLOOM_BITS_PER_KEY = 10  # about 1 % false positives: an absent key rarely touches the files
PLAIN_HASH_TABLE_RATIO = 0.75  # RocksDB's default: index buckets per prefix, 1 / 0.75
PLAIN_INDEX_SPARSENESS = 16  # RocksDB's default: keys sharing a prefix are binary-searched 16 apart
MEMTABLE_MB = 64  # RocksDB's default write_buffer_size, made explicit ([runtime] rocksdb_memtable_mb)
# Block-based stores keep their memtable in hash buckets (see options): 8 bytes each, 1/32 of the
# memtable's size, about one bucket per 2 entries of a full memtable of ~120-byte entries.
MEMTABLE_BYTES_PER_HASH_BUCKET = 256
MEMTABLE_HASH_PREFIX_BYTES = 32  # every state key of the block-based stages, whole (at most 18 bytes)
_bulk_load = False  # set once in a restore process: see load_in_bulk


def load_in_bulk() -> None:
    """Open every store of this process, from now on, for loading in bulk: their memtables are
    RocksDB's vector memtable, an append-only array sorted once when it is flushed.

    For a process that only writes a store from nothing and closes it (a restore process,
    :mod:`streams.runtime.restore`): a hash memtable's flush, which must first copy every entry into
    a skip list to write them in order, cost 4 µs per key, more than reading the record from Kafka;
    a vector's sort costs about a third of the hash memtable's writes and flush together (timings
    in docs/restore.md). A read from a vector memtable sorts
    a copy of it, so such a store must not be read while it is loaded; :class:`RocksStore` keeps
    the one value it reads then, its changelog offset, in memory. The memtable lives only in
    memory: the files written are those of the ordinary options, opened with them afterwards.
    """
    global _bulk_load  # one switch per process, set before its first store opens
    _bulk_load = True


def options(table_format: TableFormat, *, block_cache_mb: int, prefix_bytes: int,
            memtable_mb: int = MEMTABLE_MB) -> Any:
    """rocksdict ``Options`` for a store in ``table_format``, with ``memtable_mb`` memtables (a full one
    is flushed to disk: the store's disk writes come in memtable-sized steps).

    ``prefix_bytes`` is how much of a raw key the PlainTable hash index hashes. Keys that share
    their first ``prefix_bytes`` are told apart by a short search among themselves; a shorter key
    is its own prefix. Block-based stores ignore it.

    Block-based stores keep their memtable as a hash table of short lists (RocksDB's
    ``HashLinkList`` memtable, hashed on each key's first :data:`MEMTABLE_HASH_PREFIX_BYTES`)
    instead of the default skip list: their stages read and write random keys (fingerprints), which
    a skip list of several hundred thousand entries finds through about 20 levels of pointers, a
    cache miss each, where a hash bucket is one. Reads and writes of random keys are then several
    times cheaper (docs/decisions/0005-browser-url-parsing.md, "Routing speed", has the runs). The
    cost: a scan in key order must ask for it (:func:`scan`), and the memtable takes one writer.
    """
    from rocksdict import (
        BlockBasedOptions,
        Cache,
        MemtableFactory,
        Options,
        PlainTableFactoryOptions,
        SliceTransform,
    )

    made = Options(raw_mode=True)
    made.create_if_missing(True)
    memtable_bytes = memtable_mb * 1024 * 1024
    made.set_write_buffer_size(memtable_bytes)
    if table_format == "plain":
        plain = PlainTableFactoryOptions()
        plain.user_key_length = 0  # keys of any length
        plain.bloom_bits_per_key = BLOOM_BITS_PER_KEY
        plain.hash_table_ratio = PLAIN_HASH_TABLE_RATIO
        plain.index_sparseness = PLAIN_INDEX_SPARSENESS
        made.set_plain_table_factory(plain)
        made.set_prefix_extractor(SliceTransform.create_max_len_prefix(prefix_bytes))
        made.set_allow_mmap_reads(True)  # PlainTable reads its files through mmap
    else:
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_mb * 1024 * 1024))
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
        made.set_block_based_table_factory(table)
        made.set_prefix_extractor(SliceTransform.create_max_len_prefix(MEMTABLE_HASH_PREFIX_BYTES))
        factories: Any = MemtableFactory  # rocksdict's stubs leave out the bucket count it takes
        made.set_memtable_factory(factories.hash_link_list(memtable_bytes // MEMTABLE_BYTES_PER_HASH_BUCKET))
        made.set_allow_concurrent_memtable_write(False)
    if _bulk_load:
        made.set_memtable_factory(MemtableFactory.vector())
        made.set_allow_concurrent_memtable_write(False)
    return made


def scan(db: Any) -> Any:
    """Every raw key and value of ``db`` in key order. Both formats hash keys by a prefix, and an
    iterator that is not told to keep total order may then skip keys (a hash memtable's, or a
    PlainTable's beyond the first prefix)."""
    from rocksdict import ReadOptions

    total_order = ReadOptions()
    total_order.set_total_order_seek(True)
    return db.items(read_opt=total_order)


def without_wal() -> Any:
    """rocksdict ``WriteOptions`` that skip the write-ahead log (:class:`~streams.runtime.store.RocksStore`
    says why that is safe for a changelogged store)."""
    from rocksdict import WriteOptions

    made: Any = WriteOptions()  # rocksdict's stubs declare a method; it is a property
    made.disable_wal = True
    return made


def open_db(path: Path, db_options: Any) -> Any:
    """The rocksdict ``Rdict`` at ``path``, with ``db_options`` for its default column family too.

    Given options only, rocksdict reopens an existing database with the column-family options it
    loads from the OPTIONS file, and those lose the Bloom filter (``filter_policy: nullptr`` in
    RocksDB's LOG) and the block cache (rocksdict's 8 MB default). A reopened store, so a restarted
    worker, would then read every absent key from a data block instead of ruling it out by the
    filter, several times slower (docs/decisions/0003-plaintable-for-block-tables.md, "Store size
    and opening, measured").
    """
    from rocksdict import Rdict

    return Rdict(str(path), db_options, column_families={"default": db_options})


def release_freed_heap() -> None:
    """Hand the heap that opening PlainTable files freed back to the OS (glibc's ``malloc_trim``).

    Building a file's hash index allocates temporaries that glibc keeps after they are freed, more
    than the indexes themselves hold; this call returns most of the difference
    (docs/decisions/0003-plaintable-for-block-tables.md, "Store size and opening, measured").
    Without glibc, nothing to do.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)


def format_on_disk(path: Path) -> TableFormat | None:
    """The table format of the store at ``path``, from its newest OPTIONS file (None: no store yet)."""
    if not path.is_dir():
        return None
    files = [(int(name.split("-")[1]), name) for name in os.listdir(path)
             if name.startswith("OPTIONS-") and name.split("-")[1].isdigit()]
    if not files:
        return None
    newest = path / max(files)[1]
    for line in newest.read_text(errors="replace").splitlines():
        name, _, value = line.strip().partition("=")
        if name == "table_factory" and value in _FACTORY_NAMES:
            return _FACTORY_NAMES[value]
    return None


def _staging(path: Path) -> Path:
    return path.with_name(path.name + ".converting")


def _replaced(path: Path) -> Path:
    return path.with_name(path.name + ".replaced")


def settle(path: Path) -> None:
    """Finish or undo a conversion a crash interrupted, so ``path`` holds one whole store.

    A ``.replaced`` store exists only between the two renames of :func:`convert`'s swap or after
    them: with ``path`` present the new store is in place and the old one goes; without it, the
    old one comes back (and is converted again). A ``.converting`` store is never in use.
    """
    replaced = _replaced(path)
    if replaced.exists():
        if path.exists():
            shutil.rmtree(replaced)
        else:
            os.rename(replaced, path)
    shutil.rmtree(_staging(path), ignore_errors=True)


def convert(path: Path, found: TableFormat, wanted: TableFormat, *, block_cache_mb: int,
            prefix_bytes: int) -> int:
    """Rewrite the store at ``path`` from ``found`` to ``wanted`` table format; returns keys copied."""
    log.warning("state at %s is in %s tables, this stage keeps %s tables: converting it", path, found,
                wanted)
    staging = _staging(path)
    copied = _copy(path, options(found, block_cache_mb=block_cache_mb, prefix_bytes=prefix_bytes),
                   staging, options(wanted, block_cache_mb=block_cache_mb, prefix_bytes=prefix_bytes))
    _swap(path, staging)
    log.warning("state at %s converted to %s tables: %d keys", path, wanted, copied)
    return copied


def _copy(source: Path, source_options: Any, target: Path, target_options: Any) -> int:
    """Every raw key of the store at ``source`` (data and metadata alike) into a new store at ``target``."""
    from rocksdict import WriteBatch

    shutil.rmtree(target, ignore_errors=True)
    old, new = open_db(source, source_options), open_db(target, target_options)
    copied = 0
    try:
        batch = WriteBatch(raw_mode=True)
        for key, value in scan(old):
            batch.put(key, value)
            copied += 1
            if copied % COPY_BATCH_KEYS == 0:
                new.write(batch)
                batch = WriteBatch(raw_mode=True)
        new.write(batch)
        new.flush()
        new.compact_range(None, None)
    finally:
        new.close()
        old.close()
    os.chmod(target, 0o700)
    return copied


def _swap(path: Path, staging: Path) -> None:
    """Put the store at ``staging`` in place of the one at ``path`` (see :func:`settle` for crashes)."""
    replaced = _replaced(path)
    os.rename(path, replaced)
    os.rename(staging, path)
    shutil.rmtree(replaced)
