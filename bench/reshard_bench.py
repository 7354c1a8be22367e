"""How long a reshard stops a stage: seconds per million stored entries, each stage, 4 -> 8 shards.

For each stage a state of about ``--entries`` live entries is written to a fresh application's
changelog (generation 0, 4 partitions), laid out as the stage lays it out: URL fingerprints with
their canonical URLs; revisit histories with the shards' budget states; content-seen buckets and
SimHash records (each record in every shard one of its tables routes to), for pages of random
SimHashes in the default block design. Then ``streams.runtime.reshard.reshard`` moves it to 8
shards, as ``python -m streams reshard`` does (the group is empty, the shard topic drained), and
the new changelog is read back and checked entry by entry. The figure is the whole reshard's
wall time (marks, checks, copy, switch) over the entries read.

    python -m bench.reshard_bench [--entries 1000000]

Results: bench/results/reshard.md and .json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

from streams import registry
from streams.pages.analyze import design_for
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.runtime.moves import Placed
from streams.runtime.partitioner import partition_for
from streams.runtime.reshard import ReshardPlan, reshard
from streams.runtime.store_spec import StoreSpec
from streams.runtime.topic_admin import COMPACTED, TopicSpec, ensure_topics
from streams.stages.content_seen.stage import ContentSeenSettings, ContentSeenStage
from streams.stages.revisit.budget import BudgetState
from streams.stages.revisit.history import FetchHistory, encode_history
from streams.stages.revisit.move import ALLOCATION_KEY, HISTORY_PREFIX
from streams.stages.revisit.stage import RevisitStage
from streams.stages.url_dedup.stage import UrlDedupStage
from streams.topics import Topics
from streams.urls import canonical
from testing import harness as h

OLD_SHARDS, NEW_SHARDS = 4, 8
RESULTS = Path(__file__).parent / "results"


def url_entries(count: int, rng: random.Random) -> Iterator[Placed]:
    for number in range(count):
        url = f"https://host{number % 5000}.example/path/{rng.getrandbits(48):x}/{number}"
        key = canonical.fingerprint(url)
        yield partition_for(key, OLD_SHARDS), key, url.encode()


def revisit_entries(count: int, rng: random.Random) -> Iterator[Placed]:
    for shard in range(OLD_SHARDS):
        yield shard, ALLOCATION_KEY, BudgetState(mu_s=86_400.0).encode()
    for number in range(count - OLD_SHARDS):
        key = canonical.fingerprint(f"https://host{number % 5000}.example/{number}")
        history = FetchHistory(first_fetch_s=1.7e9, last_fetch_s=1.7e9 + number, interval_s=86_400.0,
                               status=200, etag=f'"{number:x}"', body_digest=rng.randbytes(16),
                               text_digest=rng.randbytes(16), simhash=rng.getrandbits(64),
                               rate_per_s=1e-6, fetches=3, rate_bin=rng.randrange(80))
        yield partition_for(key, OLD_SHARDS), HISTORY_PREFIX + key, encode_history(history)


def content_entries(count: int, rng: random.Random) -> Iterator[Placed]:
    """Pages of random SimHashes: a one-slot bucket per table, the record in each shard of its tables
    (two pages sharing a table key: the later one's bucket stands)."""
    design = design_for(ContentSeenSettings())
    written = 0
    while written < count:
        simhash = rng.getrandbits(64)
        keys = design.keys(simhash)
        for table_key in keys:
            yield partition_for(table_key, OLD_SHARDS), b"t" + table_key, simhash.to_bytes(8, "big")
        record = rng.randbytes(70) + b"https://example.com/" + rng.randbytes(20).hex().encode()
        shards = {partition_for(table_key, OLD_SHARDS) for table_key in keys}
        for shard in shards:
            yield shard, b"s" + simhash.to_bytes(8, "big"), record
        written += len(keys) + len(shards)


STAGES = {
    "url-dedup": (url_entries, UrlDedupStage),
    "revisit": (revisit_entries, RevisitStage),
    "content-seen": (content_entries, ContentSeenStage),
}


def write_state(kafka: KafkaConfig, changelog: str, entries: Iterator[Placed],
                identity: dict[bytes, bytes]) -> int:
    from confluent_kafka import Producer

    ensure_topics(kafka, [TopicSpec(changelog, OLD_SHARDS, COMPACTED, fixed_partitions=True)])
    producer = Producer(kafka.producer(**{"linger.ms": 50, "batch.size": 1_000_000,
                                          "queue.buffering.max.messages": 1_000_000}))
    state = {(shard, key): value for shard, key, value in entries}  # a table key two pages share: once
    state |= {(shard, key): value for shard in range(OLD_SHARDS) for key, value in identity.items()}
    count = 0
    for (shard, key), value in state.items():
        while True:
            try:
                producer.produce(changelog, value, key, partition=shard)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    assert producer.flush(120) == 0
    return count


def measure(kafka: KafkaConfig, stage_name: str, entries: int) -> dict[str, float | int | str]:
    make_entries, make_stage = STAGES[stage_name]
    topics = Topics(h.fresh_name("reshard") + ".")
    store: StoreSpec = make_stage().store()
    identity = dict(store.identity.entries)
    written = write_state(kafka, topics.changelog("bench", stage_name),
                          make_entries(entries, random.Random(5)), identity)
    began = time.perf_counter()
    internal = tuple(each.name for each in registry.spec(stage_name).internal)
    report = reshard(kafka, ReshardPlan(topics, "bench", stage_name, NEW_SHARDS, wait_s=5, internal=internal),
                     store)
    seconds = time.perf_counter() - began
    new_changelog = topics.at_generation(stage_name, 1).changelog("bench", stage_name)
    moved = sum(1 for _ in read_to_end(kafka, new_changelog))
    assert report.entries_read == written, (report.entries_read, written)
    assert moved == report.entries_written > 0
    return {"stage": stage_name, "entries": report.entries_read, "written": report.entries_written,
            "seconds": round(seconds, 2), "copy_s": round(report.seconds["copy"], 2),
            "s_per_million": round(seconds / report.entries_read * 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--stages", default=",".join(STAGES))
    args = parser.parse_args()
    kafka = h.broker()
    rows = [measure(kafka, name, args.entries) for name in args.stages.split(",")]
    lines = ["| stage | entries read | entries written | reshard s | copy s | s per million entries |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['stage']} | {r['entries']:,} | {r['written']:,} | {r['seconds']} | {r['copy_s']} | "
              f"{r['s_per_million']} |" for r in rows]
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reshard.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "reshard.md").write_text(
        f"# Reshard, 4 -> 8 shards (`python -m bench.reshard_bench --entries {args.entries}`)\n\n{table}\n")


if __name__ == "__main__":
    main()
