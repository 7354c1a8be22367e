"""The seen-set stores of the URL stage: Bloom front snapshots, Bloom-only restarts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from streams.errors import StateError
from streams.runtime.store import RocksStore
from streams.stages.url_dedup.bloom_store import SNAPSHOT, BloomFrontStore, BloomOnlyStore


def _keys(count: int, seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(count)]


def _front(path: Path) -> BloomFrontStore:
    return BloomFrontStore(RocksStore(path / "rocksdb"), path, capacity_items=5000, false_positive_rate=0.01)


def test_front_answers_new_keys_without_reading_the_store(tmp_path: Path) -> None:
    store = _front(tmp_path)
    store.apply({key: b"u" for key in _keys(1000)}, 999)
    fresh = _keys(1000, seed=4)
    assert all(store.get(key) is None for key in fresh)
    assert store.bloom_reads_saved >= 950  # about 1 % false positives go on to RocksDB
    store.close()


def test_front_snapshot_is_used_when_it_matches_the_store(tmp_path: Path) -> None:
    keys = _keys(500)
    store = _front(tmp_path)
    store.apply({key: b"u" for key in keys}, 41)
    store.close()
    reopened = _front(tmp_path)
    assert all(reopened.get(key) == b"u" for key in keys)
    reopened.close()


def test_front_rebuilds_from_the_local_store_when_the_snapshot_is_stale(tmp_path: Path) -> None:
    keys = _keys(500)
    store = _front(tmp_path)
    store.apply({key: b"u" for key in keys[:250]}, 10)
    store.close()                                  # snapshot at offset 10
    inner = RocksStore(tmp_path / "rocksdb")
    inner.apply({key: b"u" for key in keys[250:]}, 20)  # written after it, as before a crash
    inner.close()
    reopened = _front(tmp_path)
    assert all(reopened.get(key) == b"u" for key in keys)  # no false negative
    reopened.close()


def test_bloom_only_resumes_from_its_snapshot(tmp_path: Path) -> None:
    keys = _keys(3000)
    store = BloomOnlyStore(tmp_path, capacity_items=1000, false_positive_rate=0.01)
    store.apply({key: b"" for key in keys[:2000]}, 1999)
    store.apply({b"meta:v": b"1:safe"}, None)
    store.close()
    reopened = BloomOnlyStore(tmp_path, capacity_items=1000, false_positive_rate=0.01)
    assert reopened.changelog_offset() == 1999
    assert reopened.get(b"meta:v") == b"1:safe"
    assert all(reopened.get(key) == b"" for key in keys[:2000])
    assert len(reopened.bloom.slices) > 1  # grew past its capacity
    reopened.close()


def test_bloom_only_measured_false_positive_rate_is_near_its_target(tmp_path: Path) -> None:
    store = BloomOnlyStore(tmp_path, capacity_items=20_000, false_positive_rate=0.01)
    store.apply({key: b"" for key in _keys(20_000)}, 0)
    false_positives = sum(store.get(key) is not None for key in _keys(20_000, seed=9))
    assert 0.007 <= false_positives / 20_000 <= 0.013
    store.close()


def test_a_damaged_bloom_only_snapshot_is_a_state_error(tmp_path: Path) -> None:
    store = BloomOnlyStore(tmp_path, capacity_items=100, false_positive_rate=0.01)
    store.apply({key: b"" for key in _keys(10)}, 9)
    store.close()
    data = (tmp_path / SNAPSHOT).read_bytes()
    (tmp_path / SNAPSHOT).write_bytes(data[:-7])
    with pytest.raises(StateError, match="damaged"):
        BloomOnlyStore(tmp_path, capacity_items=100, false_positive_rate=0.01)
