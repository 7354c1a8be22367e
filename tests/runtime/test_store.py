"""One suite over the PartitionStore implementations (memory, RocksDB in both table formats, Bloom front)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import DiskFull, StateError
from streams.runtime import rocks_tables
from streams.runtime.batch import BatchState
from streams.runtime.store import (
    FORMAT_VERSION_KEY,
    MemoryStore,
    PartitionStore,
    RocksStore,
    disk_errors,
    no_space,
)
from streams.stages.url_dedup.bloom_store import BloomFrontStore


def _bloom_front(path: Path) -> PartitionStore:
    return BloomFrontStore(RocksStore(path / "rocksdb"), path, capacity_items=1000, false_positive_rate=0.01)


STORES = {
    "memory": lambda path: MemoryStore(),
    "rocksdb": lambda path: RocksStore(path / "s"),
    "rocksdb-plain": lambda path: RocksStore(path / "s", plain_table_prefix_bytes=2),
    "bloom-front": _bloom_front,
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    made: PartitionStore = STORES[request.param](tmp_path)
    yield made
    made.close()


def test_fresh_store_is_empty(store: PartitionStore) -> None:
    assert store.get(b"k") is None
    assert store.changelog_offset() is None
    assert list(store.items()) == []


@pytest.mark.parametrize(
    ("writes", "offset", "expected"),
    [
        ({b"a": b"1"}, 0, {b"a": b"1"}),
        ({b"a": b"1", b"b": b"2"}, 7, {b"a": b"1", b"b": b"2"}),
        ({b"a": None}, 3, {}),
        ({}, 9, {}),
    ],
)
def test_apply_writes_data_and_offset(store: PartitionStore, writes: dict[bytes, bytes | None],
                                      offset: int, expected: dict[bytes, bytes]) -> None:
    store.apply(writes, offset)
    assert dict(store.items()) == expected
    assert store.changelog_offset() == offset


def test_apply_without_offset_keeps_the_previous_one(store: PartitionStore) -> None:
    store.apply({b"a": b"1"}, 5)
    store.apply({b"b": b"2"}, None)
    assert store.changelog_offset() == 5
    assert store.get(b"b") == b"2"


def test_delete_removes(store: PartitionStore) -> None:
    store.apply({b"a": b"1"}, 1)
    store.apply({b"a": None}, 2)
    assert store.get(b"a") is None


def test_meta_is_not_data(store: PartitionStore) -> None:
    store.set_meta("shards", b"8")
    assert store.get_meta("shards") == b"8"
    assert store.get(b"shards") is None
    assert all(key != b"shards" for key, _ in store.items())


def test_batch_state_reads_its_own_writes_before_the_store(store: PartitionStore) -> None:
    store.apply({b"a": b"old", b"b": b"kept"}, 1)
    state = BatchState(store)
    state.set(b"a", b"new")
    state.delete(b"b")
    assert (state.get(b"a"), state.get(b"b"), state.get(b"c")) == (b"new", None, None)
    assert store.get(b"a") == b"old"  # nothing reaches the store before the commit


@pytest.mark.parametrize(("stored", "written", "left"), [
    ({}, {b"k": b"v"}, {}),  # set and deleted in the batch, never stored: nothing to write
    ({b"k": b"old"}, {b"k": b"v"}, {b"k": None}),  # stored: its tombstone
    ({b"k": b"old"}, {}, {b"k": None}),
    ({}, {}, {b"k": None}),  # not written here: the store is not asked
])
def test_a_delete_writes_a_tombstone_only_for_a_key_the_store_holds(
        store: PartitionStore, stored: dict[bytes, bytes], written: dict[bytes, bytes],
        left: dict[bytes, bytes | None]) -> None:
    store.apply(stored, 1)
    state = BatchState(store)
    for key, value in written.items():
        state.set(key, value)
    state.delete(b"k")
    assert state.writes == left
    assert state.get(b"k") is None


def test_rocks_store_survives_reopen(tmp_path: Path) -> None:
    first = RocksStore(tmp_path / "s")
    first.apply({b"a": b"1"}, 41)
    first.close()
    second = RocksStore(tmp_path / "s")
    assert (second.get(b"a"), second.changelog_offset()) == (b"1", 41)
    second.close()


def test_reopened_rocks_store_keeps_its_table_options(tmp_path: Path) -> None:
    """rocksdict reopens with the OPTIONS file's column-family options unless told otherwise."""
    RocksStore(tmp_path / "s", block_cache_mb=3).close()
    reopened = RocksStore(tmp_path / "s", block_cache_mb=5)
    assert reopened.block_cache_bytes() == 5 * 1024 * 1024
    latest = max((tmp_path / "s").glob("OPTIONS-*"), key=lambda options: int(options.name.split("-")[1]))
    assert "filter_policy=bloomfilter" in latest.read_text()
    reopened.close()


def test_rocks_store_refuses_another_format(tmp_path: Path) -> None:
    first = RocksStore(tmp_path / "s")
    first.set_meta(FORMAT_VERSION_KEY, b"999")
    first.close()
    with pytest.raises(StateError, match="format"):
        RocksStore(tmp_path / "s")


def test_rocks_store_directory_is_owner_only(tmp_path: Path) -> None:
    RocksStore(tmp_path / "s").close()
    assert (tmp_path / "s").stat().st_mode & 0o077 == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=40),
       st.sampled_from([None, 1, 3]), st.integers(min_value=0, max_value=40))
def test_memory_and_rocks_agree(tmp_path_factory: pytest.TempPathFactory,
                                writes: list[tuple[bytes, bytes | None]], plain_prefix: int | None,
                                compact_after: int) -> None:
    """Both table formats, with some writes compacted into table files and the rest in the memtable
    (a PlainTable store's reads and its scan from the first key go through both)."""
    memory = MemoryStore()
    rocks = RocksStore(tmp_path_factory.mktemp("agree") / "s", plain_table_prefix_bytes=plain_prefix)
    for offset, (key, value) in enumerate(writes):
        memory.apply({key: value}, offset)
        rocks.apply({key: value}, offset)
        if offset == compact_after:
            rocks.compact()
    assert list(memory.items()) == list(rocks.items())
    assert all(rocks.get(key) == memory.get(key) for key, _ in writes)
    assert memory.changelog_offset() == rocks.changelog_offset()
    rocks.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.dictionaries(st.binary(max_size=8), st.one_of(st.none(), st.binary(max_size=8)),
                                max_size=30), max_size=8), st.sampled_from([None, 1, 3]))
def test_a_store_loaded_in_bulk_holds_what_one_loaded_normally_holds(
        tmp_path_factory: pytest.TempPathFactory, batches: list[dict[bytes, bytes | None]],
        plain_prefix: int | None) -> None:
    """A restore process's stores (rocks_tables.load_in_bulk: a vector memtable, never read while
    loading) are, once closed and opened as a worker opens them, what the same writes make of a
    store opened normally: keys, deletes, changelog offset."""
    stores = []
    for bulk in (False, True):
        path = tmp_path_factory.mktemp("bulk") / "s"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(rocks_tables, "_bulk_load", bulk)
            loaded = RocksStore(path, plain_table_prefix_bytes=plain_prefix)
            for offset, writes in enumerate(batches):
                loaded.apply(writes, offset)
            assert loaded.changelog_offset() == (len(batches) - 1 if batches else None)
            loaded.close()
        stores.append(RocksStore(path, plain_table_prefix_bytes=plain_prefix))
    normal, bulk_loaded = stores
    assert list(bulk_loaded.items()) == list(normal.items())
    assert bulk_loaded.changelog_offset() == normal.changelog_offset()
    for store in stores:
        store.close()


@pytest.mark.parametrize(("first", "then"), [(None, 6), (6, None), (6, 2)])
def test_a_store_in_the_other_table_format_is_converted(tmp_path: Path, first: int | None,
                                                        then: int | None) -> None:
    written = {b"t%05d" % i: b"%d" % i for i in range(3000)}
    store = RocksStore(tmp_path / "s", plain_table_prefix_bytes=first)
    store.apply(dict(written), 41)
    store.compact()
    store.apply({b"t00007": None, b"late": b"memtable"}, 42)
    store.set_meta("shards", b"8")
    store.close()
    reopened = RocksStore(tmp_path / "s", plain_table_prefix_bytes=then)
    expected = {**{k: v for k, v in written.items() if k != b"t00007"}, b"late": b"memtable"}
    assert reopened.table_format == ("block" if then is None else "plain")
    assert dict(reopened.items()) == expected
    assert (reopened.changelog_offset(), reopened.get_meta("shards")) == (42, b"8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no staging or replaced store left
    assert (tmp_path / "s").stat().st_mode & 0o077 == 0
    reopened.close()


@pytest.mark.parametrize("crash_after", ["copy", "first rename", "second rename"])
def test_a_conversion_cut_short_leaves_one_whole_store(tmp_path: Path, crash_after: str) -> None:
    """The steps of rocks_tables.convert, stopped where a crash could stop them, then a reopen."""
    path = tmp_path / "s"
    store = RocksStore(path)
    store.apply({b"a": b"1"}, 5)
    store.close()
    staging, replaced = tmp_path / "s.converting", tmp_path / "s.replaced"
    rocks_tables._copy(path, rocks_tables.options("block", block_cache_mb=8, prefix_bytes=3),
                       staging, rocks_tables.options("plain", block_cache_mb=8, prefix_bytes=3))
    if crash_after != "copy":
        os.rename(path, replaced)
    if crash_after == "second rename":
        os.rename(staging, path)
    reopened = RocksStore(path, plain_table_prefix_bytes=2)
    assert (dict(reopened.items()), reopened.changelog_offset()) == ({b"a": b"1"}, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    reopened.close()


def test_table_format_on_disk(tmp_path: Path) -> None:
    assert rocks_tables.format_on_disk(tmp_path / "none") is None
    RocksStore(tmp_path / "block").close()
    RocksStore(tmp_path / "plain", plain_table_prefix_bytes=4).close()
    assert rocks_tables.format_on_disk(tmp_path / "block") == "block"
    assert rocks_tables.format_on_disk(tmp_path / "plain") == "plain"


# -- a full disk (issue 37) ------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "full"), [
    (OSError(28, "No space left on device"), True),
    (OSError(122, "Disk quota exceeded"), True),
    (Exception("IO error: No space left on device: While appending to file: /s/000008.sst: No space "
               "left on device"), True),  # RocksDB's status, as rocksdict raises it
    (OSError(13, "Permission denied"), False),
    (Exception("Corruption: block checksum mismatch"), False),
])
def test_a_full_disk_is_told_apart(error: BaseException, full: bool) -> None:
    assert no_space(error) is full


def test_a_full_disk_stops_with_one_line_naming_the_directory(tmp_path: Path) -> None:
    shard = tmp_path / "state" / "app" / "url-dedup" / "w0" / "shard-0001"
    with pytest.raises(DiskFull) as raised, disk_errors(shard):
        raise Exception("IO error: No space left on device: While appending to file")
    text = str(raised.value)
    assert "\n" not in text
    assert text.startswith(f"no space left for local state in {shard}: ") and " MiB free of " in text
    assert "start the worker again" in text
    with pytest.raises(PermissionError), disk_errors(shard):  # anything else passes through
        raise PermissionError(13, "Permission denied")


def test_a_small_memtable_reaches_the_disk_early(tmp_path: Path) -> None:
    """``rocksdb_memtable_mb``: a store flushes in steps of it (what the full-disk test relies on)."""
    store = RocksStore(tmp_path / "s", memtable_mb=1)
    try:
        for batch in range(40):
            store.apply({os.urandom(16): os.urandom(100) for _ in range(1000)}, batch)
        assert list((tmp_path / "s").glob("*.sst")), "4 MB written, nothing flushed with a 1 MB memtable"
    finally:
        store.close()
