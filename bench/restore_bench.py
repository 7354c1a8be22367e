"""Restore: a stage's state rebuilt from its changelog into an empty state directory, beside a plain
consumer reading the same changelog.

    python -m bench.restore_bench [--stage url-dedup] [--urls 1000000] [--rounds 3]

The changelog is a real one: ``--urls`` distinct URLs (``--stage url-dedup``; or the shared corpus's
pages, ``--pages``, for ``content-seen``) through one worker of the stage, stopped once it has
committed everything. Then, alternating, ``--rounds`` times each:

- **plain consumer**: one read_committed consumer assigned every changelog partition from the
  beginning, taking batches of 10,000 and touching each record's key and value, until every
  partition's end: what a client of this machine reads the changelog at;
- **restore**: the worker's own restore of an empty state directory into the stage's stores (its
  declared kind, the settings' defaults): the shards rebuilt in ``[runtime] restore_processes``
  processes (:mod:`streams.runtime.restore`), then opened and their tails replayed, until every
  shard has reached its changelog's end.

Reported: records/s and seconds per GB of keys and values, each round and the best; the ratio of
the bests. Writes ``bench/results/restore.json`` and ``.md``; exits non-zero when the restore's
best rate is under the plain consumer's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from bench.content_bench import corpus_records
from streams import config, registry
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import recover
from streams.runtime.restore import ShardOpener, processes_for, restore_cold, tune_garbage_collector
from streams.runtime.store import close_all
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS
from testing.operated import Worker, worker_env

RESULTS = h.PROJECT_ROOT / "bench" / "results"
SHARDS = 8


def build_changelog(kafka: KafkaConfig, stage: str, values: list[bytes], source: str,
                    work: Path) -> tuple[Topics, str]:
    """Run one worker of ``stage`` over ``values`` until it has committed them; its app id."""
    app_id = h.fresh_name("restore")
    topics = Topics(f"{app_id}.")
    h.create_topics(kafka, [topics.named(source)], SHARDS)
    h.produce(kafka, topics.named(source), ((None, value) for value in values))
    worker = Worker([stage, "--topic-prefix", topics.prefix, "--app-id", app_id, "--worker-id", "w0",
                     "--state-dir", str(work / "built"), "--shards", str(SHARDS)],
                    worker_env(kafka.bootstrap_servers))
    try:
        group = topics.group(app_id, stage)
        h.wait_for(lambda: h.caught_up(kafka, group, topics.named(source))
                   and h.caught_up(kafka, group, topics.shards(app_id, stage)), 1200, poll_s=2.0)
    finally:
        worker.stop(120)
    return topics, app_id


def plain_read(kafka: KafkaConfig, changelog: str) -> dict[str, float]:
    """One read_committed consumer, every partition from the beginning to its end."""
    consumer = Consumer(kafka.consumer(h.fresh_name("plain"), **{"enable.partition.eof": True,
                                                                   "fetch.max.bytes": 64 * 1024 * 1024}))
    began = time.perf_counter()
    consumer.assign([TopicPartition(changelog, p, OFFSET_BEGINNING) for p in range(SHARDS)])
    open_partitions, records, size = set(range(SHARDS)), 0, 0
    try:
        while open_partitions:
            for message in consumer.consume(10_000, timeout=0.1):
                error = message.error()
                if error is None:
                    records += 1
                    size += len(message.key() or b"") + len(message.value() or b"")
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
        seconds = time.perf_counter() - began
    finally:
        consumer.close()
    return {"records": records, "bytes": size, "seconds": seconds}


def restore(kafka: KafkaConfig, stage: str, changelog: str, directory: Path) -> dict[str, float]:
    """The worker's restore of an empty state directory (:mod:`streams.runtime.restore`, then the
    tail in the worker), into the stage's declared stores in ``directory``, the settings' defaults."""
    spec = registry.spec(stage)
    settings_type = spec.settings_type()
    settings = config.load(settings_type, spec.settings_section or stage) if settings_type else None
    runtime = config.load(config.RuntimeSettings, "runtime")
    opener = ShardOpener(spec.build(settings, runtime).store().open, directory, SHARDS,
                         runtime.rocksdb_block_cache_mb, runtime.rocksdb_memtable_mb)
    began = time.perf_counter()
    cold = restore_cold(kafka, opener, range(SHARDS), changelog, processes_for(runtime.restore_processes))
    stores = {shard: opener(shard) for shard in range(SHARDS)}
    try:
        tail = recover(kafka, stores, changelog)
        seconds = time.perf_counter() - began
    finally:
        close_all(stores.values())
    return {"records": cold.total + tail.total, "seconds": seconds,
            "processes": len({shard for shard in cold.records}) and processes_for(runtime.restore_processes)}


def _rates(found: dict[str, float], size: float) -> dict[str, float]:
    return {**found, "records_per_s": round(found["records"] / found["seconds"]),
            "s_per_gb": round(found["seconds"] / (size / 1e9), 1) if size else float("nan")}


def _url_values(count: int) -> list[bytes]:
    return [orjson.dumps({"url": f"http://site{n % 5000}.example/r/{n}/page"}) for n in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="url-dedup", choices=["url-dedup", "content-seen", "revisit"])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--changelog", help="an existing changelog of the stage to read (skips building one)")
    args = parser.parse_args(argv)
    tune_garbage_collector()  # as a worker does before its first assignment
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="restore-"))
    if args.stage == "url-dedup":
        values, source = _url_values(args.urls), "frontier"
    else:
        values, source = corpus_records(args.pages, args.corpus)[0], "fetched-pages"
    changelog = args.changelog
    if changelog is None:
        built = time.monotonic()
        topics, app_id = build_changelog(kafka, args.stage, values, source, work)
        changelog = topics.changelog(app_id, args.stage)
        print(f"changelog {changelog} built in {time.monotonic() - built:.1f} s", file=sys.stderr)
    rounds: list[dict[str, Any]] = []
    size = 0.0
    for number in range(args.rounds):
        plain = plain_read(kafka, changelog)
        size = plain["bytes"]
        directory = work / f"round-{number}"
        ours = restore(kafka, args.stage, changelog, directory)
        shutil.rmtree(directory, ignore_errors=True)
        rounds.append({"plain": _rates(plain, size), "restore": _rates(ours, size)})
        print(json.dumps(rounds[-1]), flush=True)
    best_plain = max(each["plain"]["records_per_s"] for each in rounds)
    best_restore = max(each["restore"]["records_per_s"] for each in rounds)
    command = "python -m bench.restore_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {"command": command.strip(), "stage": args.stage,
               "changelog_records": rounds[0]["plain"]["records"],
               "changelog_bytes": size, "rounds": rounds, "best_plain_records_per_s": best_plain,
               "best_restore_records_per_s": best_restore, "ratio": round(best_restore / best_plain, 3),
               "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "restore" if args.stage == "url-dedup" else f"restore-{args.stage}"
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({key: value for key, value in results.items() if key != "rounds"}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if best_restore >= best_plain else 1


if __name__ == "__main__":
    raise SystemExit(main())
