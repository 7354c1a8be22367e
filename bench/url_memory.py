"""Memory per URL of the two seen-sets, and the offline exact-mode count check (bench/url_bench.py).

Each measurement runs in a fresh process (``python -m bench.url_memory memory MODE N DIR``) so its
RSS growth is the seen-set's alone: N random 128-bit fingerprints are applied in batches of 10,000
through the same store classes the stage uses, with a canonical-URL-sized value in exact mode.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.frontier_gen import frontier

BATCH = 10_000
PROBES = 1_000_000


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _measure_here(mode: str, urls: int, directory: Path) -> dict[str, Any]:
    from streams.runtime.store import RocksStore
    from streams.stages.url_dedup.bloom_store import BloomFrontStore, BloomOnlyStore

    rng = random.Random(13)
    before = _rss_bytes()
    if mode == "exact":
        store: Any = BloomFrontStore(RocksStore(directory / "rocksdb"), directory, urls, 0.01)
    else:
        store = BloomOnlyStore(directory, urls, 0.01, snapshot_interval_s=1e9)
    for start in range(0, urls, BATCH):
        count = min(BATCH, urls - start)
        if mode == "exact":
            url = b"https://www.example-host-%d.com/section/article-%d.html"
            writes = {rng.randbytes(16): url % (i % 5000, i) for i in range(start, start + count)}
        else:
            writes = {rng.randbytes(16): b"" for _ in range(count)}
        store.apply(writes, start + count - 1)
    grown = _rss_bytes() - before
    false_positive_rate = None
    if mode == "bloom":
        probe = random.Random(99)
        false_positive_rate = sum(store.get(probe.randbytes(16)) is not None for _ in range(PROBES)) / PROBES
    store.close()
    return {"mode": mode, "urls": urls, "rss_bytes_per_url": grown / urls,
            "disk_bytes_per_url": _disk_bytes(directory) / urls,
            "false_positive_rate": false_positive_rate, "target_rate": 0.01}


def measure_memory(mode: str, urls: int, work: Path) -> dict[str, Any]:
    directory = work / f"memory-{mode}"
    command = [sys.executable, "-m", "bench.url_memory", "memory", mode, str(urls), str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def offline_exact(records: int, work: Path) -> dict[str, Any]:
    """Run ``url-dedup --offline`` over a planted frontier; count what it emits."""
    source = work / "offline-frontier.jsonl"
    lines, distinct = frontier(records, seed=17)
    with open(source, "wb") as out:
        for line in lines:
            out.write(line + b"\n")
    began = time.monotonic()
    with open(source, "rb") as stdin:
        run = subprocess.run([sys.executable, "-m", "streams", "url-dedup", "--offline", "--state-dir",
                              str(work / "offline-state")], stdin=stdin, capture_output=True, check=True,
                             env={**os.environ, "STREAMS_URL_DEDUP_EXPECTED_URLS": str(records)})
    seconds = time.monotonic() - began
    emitted = run.stdout.count(b"\n")
    source.unlink()
    return {"records": records, "distinct": distinct, "emitted": emitted, "seconds": round(seconds, 1),
            "urls_per_s": round(records / seconds)}


if __name__ == "__main__":
    _, command, mode, count, path = sys.argv
    assert command == "memory"
    print(json.dumps(_measure_here(mode, int(count), Path(path))))
