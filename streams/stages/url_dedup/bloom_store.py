"""Seen-sets as :class:`~streams.runtime.store.PartitionStore` s: a Bloom filter in front of the exact
store, or a Bloom filter alone.

:class:`BloomFrontStore` (exact mode, the default) answers "never seen" from memory for most new
keys, so a new URL costs no RocksDB read; a Bloom "maybe" is confirmed by the exact store, so a
false positive never drops a new key (a Bloom filter alone drops the share of new keys its
false positives hit, silently: rmax/scrapy-redis issue #56). Extra Bloom bits are harmless,
missing ones are not, so the filter is updated on every applied write, including those replayed
by recovery.

:class:`BloomOnlyStore` (opt-in, memory-bound crawls) keeps only a scalable Bloom filter: about
1.2 bytes per key at 1 % (``streams.stages.url_dedup.bloom``), at the price of dropping that share
of new keys.

A front filter cannot delete, and the exact store can (a forget, :mod:`streams.stages.url_dedup.
forgetting`): a key deleted from the store stays in the filter, where it answers "maybe" (the store
then says "no": nothing is lost) and fills bits that raise the false-positive rate for every new
key. So the filter counts the keys deleted since it was built and is rebuilt from the store
(:meth:`BloomFrontStore.rebuild_if_stale`) once its estimated false-positive rate has risen past the
configured one and the deleted keys are at least a tenth of those it took in: then a rebuild brings
the rate back under the configured one whenever the keys left fit the filter's capacity, and its
cost, a scan of the shard, is paid at most once per tenth of the filter deleted. (A counting
filter would delete in place, for four times the memory on every lookup; generations of filters
would double the lookups. Forgets are rare and large: rebuilding fits them.)

Restarts: both write a snapshot of the filter (``bloom.snapshot``, versioned and checksummed by
``streams.stages.url_dedup.bloom``) beside the shard, with the changelog offset it covers. An intact
store with a matching snapshot starts without rebuilding anything; the front filter is otherwise
rebuilt from the local RocksDB (a local scan, not a changelog replay); the Bloom-only filter resumes
from its snapshot and recovery replays only the changelog after the snapshot's offset.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import orjson

from streams.errors import StateError
from streams.runtime.api import PartitionStore
from streams.runtime.extras import Measured, disk_errors, private_dir
from streams.stages.url_dedup.bloom import BloomFilter, BloomFormatError, ScalableBloomFilter, bloom_size

log = logging.getLogger(__name__)

SNAPSHOT: Final = "bloom.snapshot"
REMOVED_META: Final = "bloom_removed"  # keys deleted since the snapshot's filter was built
STALE_SHARE: Final = 10  # rebuild once the deleted keys are a tenth of those the filter took in
_OFFSET: Final = struct.Struct(">q")  # the changelog offset a snapshot covers; -1 for none
KEY_BYTES: Final = 16  # fingerprints; other keys are metadata, kept exactly
REBUILD_CHUNK: Final = 20_000  # keys added to a filter rebuilt from the store at once


def _write_snapshot(path: Path, offset: int | None, payload: bytes) -> None:
    """Atomically replace ``path`` (write, fsync, rename) so a crash, or a full disk, leaves the old
    or the new."""
    temporary = path.with_suffix(".tmp")
    with disk_errors(path.parent):
        try:
            with open(temporary, "wb") as out:
                out.write(_OFFSET.pack(-1 if offset is None else offset) + payload)
                out.flush()
                os.fsync(out.fileno())
        except OSError:
            temporary.unlink(missing_ok=True)  # what was written of it would only take space
            raise
        os.replace(temporary, path)


def _read_snapshot(path: Path) -> tuple[int | None, bytes] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < _OFFSET.size:
        return None
    (offset,) = _OFFSET.unpack_from(data)
    return (None if offset < 0 else offset), data[_OFFSET.size:]


class BloomFrontStore:
    """An exact store with a Bloom filter in front (exact mode of the URL seen-set)."""

    def __init__(self, inner: PartitionStore, directory: Path, capacity_items: int,
                 false_positive_rate: float) -> None:
        self._inner = inner
        self._snapshot = directory / SNAPSHOT
        self._capacity_items, self._false_positive_rate = capacity_items, false_positive_rate
        self.bloom_reads_saved = 0
        self.rebuilds = 0
        self.removed = 0  # keys deleted from the store since the filter was built
        self._meta: dict[bytes, bytes | None] = {}  # metadata keys read (the stage's, per record)
        loaded = self._load(capacity_items, false_positive_rate)
        if loaded is not None:
            self.bloom = loaded
            self.removed = int(inner.get_meta(REMOVED_META) or b"0")
        else:
            self.bloom = self._rebuild(capacity_items, false_positive_rate)

    def _load(self, capacity_items: int, false_positive_rate: float) -> BloomFilter | None:
        found = _read_snapshot(self._snapshot)
        if found is None or found[0] != self._inner.changelog_offset():
            return None  # missing, or older than the store (a crash after the last snapshot)
        try:
            bloom = BloomFilter.from_bytes(found[1])
        except BloomFormatError:
            return None
        if (bloom.size_bits, bloom.hash_count) != bloom_size(capacity_items, false_positive_rate):
            return None  # resized by the operator
        return bloom

    def _rebuild(self, capacity_items: int, false_positive_rate: float) -> BloomFilter:
        bloom = BloomFilter(capacity_items, false_positive_rate)
        chunk: list[bytes] = []
        for key, _ in self._inner.items():
            if len(key) == KEY_BYTES:
                chunk.append(key)
                if len(chunk) >= REBUILD_CHUNK:
                    bloom.add_all(chunk)
                    chunk = []
        bloom.add_all(chunk)
        return bloom

    def get(self, key: bytes) -> bytes | None:
        if len(key) == KEY_BYTES:
            if key not in self.bloom:
                self.bloom_reads_saved += 1
                return None
            return self._inner.get(key)
        meta = self._meta
        if key in meta:
            return meta[key]
        value = meta[key] = self._inner.get(key)
        return value

    def apply(self, writes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        self._inner.apply(writes, changelog_offset)
        added: list[bytes] = []
        removed = 0
        for key, value in writes.items():
            if len(key) == KEY_BYTES:
                if value is not None:
                    added.append(key)
                else:
                    removed += 1
            else:
                self._meta[key] = value
        self.bloom.add_all(added)
        if removed or self.removed:
            self.removed += removed
            self.rebuild_if_stale()

    def rebuild_if_stale(self) -> bool:
        """Rebuild the filter from the store when the keys deleted since it was built have raised its
        estimated false-positive rate past the configured one and are a tenth of the keys it took in
        (module docstring); whether it did."""
        bloom = self.bloom
        if (self.removed * STALE_SHARE < bloom.count_items
                or bloom.estimated_false_positive_rate() <= self._false_positive_rate):
            return False
        began = time.monotonic()
        stale = self.removed
        self.bloom = self._rebuild(self._capacity_items, self._false_positive_rate)
        self.removed = 0
        self.rebuilds += 1
        log.info("Bloom filter rebuilt from the store after %d keys were deleted: false-positive rate "
                 "%.4f -> %.4f, %.2f s", stale, bloom.estimated_false_positive_rate(),
                 self.bloom.estimated_false_positive_rate(), time.monotonic() - began)
        return True

    def changelog_offset(self) -> int | None:
        return self._inner.changelog_offset()

    def measurements(self) -> dict[str, float]:
        found = self._inner.measurements() if isinstance(self._inner, Measured) else {}
        return {**found, "bloom_fill_ratio": self.bloom.fill_ratio(),
                "bloom_false_positive_rate": self.bloom.estimated_false_positive_rate()}

    def get_meta(self, name: str) -> bytes | None:
        return self._inner.get_meta(name)

    def set_meta(self, name: str, value: bytes) -> None:
        self._inner.set_meta(name, value)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self._inner.items()

    def close(self) -> None:
        try:
            self._inner.set_meta(REMOVED_META, str(self.removed).encode())
            _write_snapshot(self._snapshot, self._inner.changelog_offset(), self.bloom.to_bytes())
        finally:  # without a snapshot the filter is rebuilt from the store at the next start
            self._inner.close()


class BloomOnlyStore:
    """A scalable Bloom filter as the whole seen-set; metadata keys are kept exactly.

    ``get`` answers ``b""`` for a key the filter (probably) holds. Snapshots are written at most
    every ``snapshot_interval_s`` and on close; after a crash, recovery replays the changelog
    from the snapshot's offset, and adding a key twice to a Bloom filter changes nothing.
    """

    def __init__(self, directory: Path, capacity_items: int, false_positive_rate: float,
                 snapshot_interval_s: float = 60.0) -> None:
        private_dir(directory)
        self._snapshot = directory / SNAPSHOT
        self._interval_s = snapshot_interval_s
        self._last_snapshot = time.monotonic()
        self._meta: dict[str, bytes] = {}
        self._exact: dict[bytes, bytes] = {}
        found = _read_snapshot(self._snapshot)
        self._offset: int | None = None
        self.bloom = ScalableBloomFilter(capacity_items, false_positive_rate)
        if found is not None:
            self._offset, payload = found
            self._restore(payload)

    def _restore(self, payload: bytes) -> None:
        try:
            (size,) = struct.unpack_from(">I", payload)
            extra = orjson.loads(payload[4:4 + size])
            self._meta = {k: bytes.fromhex(v) for k, v in extra["meta"].items()}
            self._exact = {bytes.fromhex(k): bytes.fromhex(v) for k, v in extra["exact"].items()}
            self.bloom = ScalableBloomFilter.from_bytes(payload[4 + size:])
        except (ValueError, KeyError, struct.error, BloomFormatError) as error:
            raise StateError(f"{self._snapshot} is damaged ({error}); delete it to rebuild "
                             "from the changelog") from error

    def get(self, key: bytes) -> bytes | None:
        if len(key) != KEY_BYTES:
            return self._exact.get(key)
        return b"" if key in self.bloom else None

    def apply(self, writes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        add = self.bloom.add
        for key, value in writes.items():
            if len(key) != KEY_BYTES:
                if value is None:
                    self._exact.pop(key, None)
                else:
                    self._exact[key] = value
            elif value is not None:
                add(key)
        if changelog_offset is not None:
            self._offset = changelog_offset
        if time.monotonic() - self._last_snapshot > self._interval_s:
            self.snapshot()

    def snapshot(self) -> None:
        extra = orjson.dumps({"meta": {k: v.hex() for k, v in self._meta.items()},
                              "exact": {k.hex(): v.hex() for k, v in self._exact.items()}})
        _write_snapshot(self._snapshot, self._offset,
                        struct.pack(">I", len(extra)) + extra + self.bloom.to_bytes())
        self._last_snapshot = time.monotonic()

    def changelog_offset(self) -> int | None:
        return self._offset

    def measurements(self) -> dict[str, float]:
        return {"state_bytes": float(self.bloom.size_bytes), "bloom_fill_ratio": self.bloom.fill_ratio(),
                "bloom_false_positive_rate": self.bloom.estimated_false_positive_rate()}

    def get_meta(self, name: str) -> bytes | None:
        return self._meta.get(name)

    def set_meta(self, name: str, value: bytes) -> None:
        self._meta[name] = value

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        yield from sorted(self._exact.items())  # a Bloom filter cannot list its keys

    def close(self) -> None:
        self.snapshot()
