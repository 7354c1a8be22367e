"""Near-duplicate lookup time against RocksDB block tables holding 10^5 .. 10^7 fingerprints.

A lookup is what the content_seen stage does for one page across its probes: for each table of
the block design, one point read of the bucket, decode it, and keep the best earlier entry within
the Hamming threshold (:mod:`streams.pages.buckets`). Here all tables sit in one store (the stage
spreads them over shards; a shard's read costs the same). Half of the queries are near copies of
stored fingerprints (1 to k bits flipped, every one must be found), half random ones.

The store is bulk-built with the same key and entry encodings the stage writes (checked against
:meth:`BlockDesign.keys` and :class:`Entry.encode` on a sample), grouped per bucket with numpy so
10^8 entries load in minutes, then compacted as a store that grew over time would be (right after
a bulk load, every read searches dozens of level-0 files: 397 µs per lookup at 10^7 before
compaction in one run, against 38 µs at 10^5).
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from streams.pages import buckets
from streams.pages.analyze import PageSettings, design_for
from streams.pages.blocks import BlockDesign
from streams.pages.buckets import Entry
from streams.runtime.store import RocksStore

URL_FORMAT = "https://bench.example/%010d"
_ENTRY = np.dtype([("order", "S16"), ("simhash", ">u8"), ("digest", "S16"), ("url_length", ">u2"),
                   ("url", "S32")])
WRITE_BATCH = 200_000


def _table_keys(design: BlockDesign, fingerprints: np.ndarray, table: int) -> np.ndarray:
    """Table ``table``'s keys (without the table byte) of every fingerprint, vectorised."""
    keys = np.zeros(len(fingerprints), dtype=np.uint64)
    for shift, mask, out_shift in design._extract[table]:  # the masks BlockDesign.keys uses
        keys |= ((fingerprints >> np.uint64(shift)) & np.uint64(mask)) << np.uint64(out_shift)
    return keys


def _entries(fingerprints: np.ndarray) -> np.ndarray:
    """Entry i: order (time i ms), the fingerprint, digest and URL numbered i (``Entry.encode`` layout)."""
    count = len(fingerprints)
    numbers = np.arange(count)
    entries = np.zeros(count, dtype=_ENTRY)
    orders = np.zeros((count, 16), dtype=np.uint8)
    orders[:, :8] = numbers.astype(">u8").view(np.uint8).reshape(count, 8)
    entries["order"] = orders.view("S16").reshape(count)
    entries["simhash"] = fingerprints
    entries["digest"] = np.char.zfill(numbers.astype("S16"), 16)
    entries["url_length"] = len(URL_FORMAT % 0)
    entries["url"] = np.char.add(b"https://bench.example/", np.char.zfill(numbers.astype("S10"), 10))
    return entries


def build(path: Path, design: BlockDesign, fingerprints: np.ndarray) -> RocksStore:
    """A store holding every fingerprint in every table, as the stage would have written it."""
    store = RocksStore(path)
    entries = _entries(fingerprints)
    sample = random.Random(1).sample(range(len(fingerprints)), min(50, len(fingerprints)))
    for i in sample:
        expected = Entry(buckets.order_key(i, 0, 0), int(fingerprints[i]), b"%016d" % i, URL_FORMAT % i)
        assert entries[i].tobytes() == expected.encode(), "bulk entry encoding differs from the stage's"
    width = design.key_bytes
    for table in range(len(design.tables)):
        keys = _table_keys(design, fingerprints, table)
        assert all(design.keys(int(fingerprints[i]))[table] ==
                   ((table << 8 * (width - 1)) | int(keys[i])).to_bytes(width, "big") for i in sample)
        _write_table(store, table, width, keys, entries)
    store.compact()  # a shard that grew over time is compacted; a bulk load is not yet
    return store


def _write_table(store: RocksStore, table: int, width: int, keys: np.ndarray, entries: np.ndarray) -> None:
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    ends = np.append(starts[1:], len(order))
    prefix = table << 8 * (width - 1)
    writes: dict[bytes, bytes | None] = {}
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        key = (prefix | int(sorted_keys[start])).to_bytes(width, "big")
        writes[b"t" + key] = entries[order[start:end]].tobytes()
        if len(writes) >= WRITE_BATCH:
            store.apply(writes, None)
            writes = {}
    store.apply(writes, None)


def lookup(store: RocksStore, design: BlockDesign, fingerprints: np.ndarray, queries: int, k: int,
           seed: int = 2) -> dict[str, Any]:
    """Time ``queries`` lookups; half near copies (must be found), half random."""
    rng = random.Random(seed)
    probes: list[tuple[int, bool]] = []
    for number in range(queries):
        if number % 2 == 0:
            base = int(fingerprints[rng.randrange(len(fingerprints))])
            for bit in rng.sample(range(64), rng.randint(1, k)):
                base ^= 1 << bit
            probes.append((base, True))
        else:
            probes.append((rng.getrandbits(64), False))
    late = buckets.order_key(2**62, 0, 0)
    found = candidates = 0
    began = time.perf_counter()
    for fingerprint, planted in probes:
        page = Entry(late, fingerprint, b"q" * 16, "https://query.example/")
        best = None
        for key in design.keys(fingerprint):
            bucket = buckets.decode_bucket(store.get(b"t" + key))
            candidates += len(bucket)
            match = buckets.best_match(bucket, page, k)
            best = best or match
        found += planted and best is not None
    seconds = time.perf_counter() - began
    return {"lookups": queries, "us_per_lookup": round(seconds / queries * 1e6, 1),
            "candidates_per_lookup": round(candidates / queries, 2),
            "planted_found": found, "planted": queries // 2 + queries % 2}


def measure(sizes: list[int], work: Path, queries: int = 20_000) -> list[dict[str, Any]]:
    settings = PageSettings()
    design = design_for(settings)
    results = []
    for size in sizes:
        fingerprints = np.random.default_rng(size).integers(0, 2**64, size=size, dtype=np.uint64)
        path = work / f"lookup-{size}"
        began = time.perf_counter()
        store = build(path, design, fingerprints)
        built_s = time.perf_counter() - began
        result = lookup(store, design, fingerprints, queries, settings.hamming_threshold)
        disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        store.close()
        shutil.rmtree(path, ignore_errors=True)
        results.append({"stored": size, "tables": len(design.tables), "build_s": round(built_s, 1),
                        "disk_bytes_per_fingerprint": round(disk / size, 1), **result})
        print(results[-1], flush=True)
    return results
