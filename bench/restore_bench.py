"""Restore: a stage's state rebuilt from its changelog into an empty state directory, beside a plain
consumer reading the same changelog.

    python -m bench.restore_bench [--stage url-dedup] [--urls 1000000] [--rounds 3]

The changelog is a real one: ``--urls`` distinct URLs (``--stage url-dedup``; or the shared corpus's
pages, ``--pages``, for ``content-seen``) through one worker of the stage, stopped once it has
committed everything. Then, alternating, ``--rounds`` times each:

- **plain consumer**: one read_committed consumer assigned every changelog partition from the
  beginning, taking batches of 10,000 and reading each record's key and value (Python ``bytes``,
  their lengths summed), until every partition's end: what a client of this machine reads the
  changelog at, with librdkafka's fetch defaults (the acceptance's yardstick);
- **plain consumer, restore's fetches**: the same with the fetch and prefetch settings the
  restore's consumers use (:data:`streams.runtime.recovery.FETCH_SETTINGS`), for reference: how
  fast this machine can hand the changelog to one Python process at all;
- **restore**: the worker's own restore of an empty state directory into the stage's stores (its
  declared kind, the settings' defaults): the shards rebuilt in ``[runtime] restore_processes``
  processes (:mod:`streams.runtime.restore`), then opened and their tails replayed, until every
  shard has reached its changelog's end.

Reported: records/s and seconds per GB of keys and values, each round and the best; the ratios of
the bests, and of each round's (the three run back to back, so a round's ratio is the fairest on
a shared machine); the load average before and after. Writes ``bench/results/restore.json`` and
``.md``; exits non-zero when the restore's best rate is under the plain consumer's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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
from streams.runtime.recovery import FETCH_SETTINGS, recover
from streams.runtime.restore import ShardOpener, processes_for, restore_cold, tune_garbage_collector
from streams.runtime.store import close_all
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS
from testing.operated import Worker, worker_env

RESULTS = h.PROJECT_ROOT / "bench" / "results"
SHARDS = 8
DEFAULT_FETCH = {"fetch.max.bytes": 64 * 1024 * 1024}  # as the bench always read; librdkafka's is 50 MB


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


def plain_read(kafka: KafkaConfig, changelog: str, fetch: dict[str, int]) -> dict[str, float]:
    """One read_committed consumer, every partition from the beginning to its end."""
    consumer = Consumer(kafka.consumer(h.fresh_name("plain"), **{"enable.partition.eof": True, **fetch}))
    began, cpu = time.perf_counter(), _cpu_s()
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
        seconds, cpu = time.perf_counter() - began, _cpu_s() - cpu
    finally:
        consumer.close()
    return {"records": records, "bytes": size, "seconds": seconds, "cpu_s": round(cpu, 2)}


def restore(kafka: KafkaConfig, stage: str, changelog: str, directory: Path) -> dict[str, float]:
    """The worker's restore of an empty state directory (:mod:`streams.runtime.restore`, then the
    tail in the worker), into the stage's declared stores in ``directory``, the settings' defaults."""
    spec = registry.spec(stage)
    own = spec.settings
    settings = config.load(own.type(), own.section) if own is not None else None
    runtime = config.load(config.RuntimeSettings, "runtime")
    opener = ShardOpener(spec.build(settings, runtime).store().open, directory, SHARDS,
                         runtime.rocksdb_block_cache_mb, runtime.rocksdb_memtable_mb)
    began, cpu = time.perf_counter(), _cpu_s()
    cold = restore_cold(kafka, opener, range(SHARDS), changelog, processes_for(runtime.restore_processes))
    stores = {shard: opener(shard) for shard in range(SHARDS)}
    try:
        tail = recover(kafka, stores, changelog)
        seconds, cpu = time.perf_counter() - began, _cpu_s() - cpu
    finally:
        close_all(stores.values())
    return {"records": cold.total + tail.total, "seconds": seconds, "cpu_s": round(cpu, 2),
            "processes": len({shard for shard in cold.records}) and processes_for(runtime.restore_processes)}


def _cpu_s() -> float:
    """CPU seconds of this process (every thread: librdkafka's, RocksDB's) and of its children that
    have ended (the restore's processes, once joined)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _rates(found: dict[str, float], size: float) -> dict[str, float]:
    return {**found, "records_per_s": round(found["records"] / found["seconds"]),
            "s_per_gb": round(found["seconds"] / (size / 1e9), 1) if size else float("nan")}


def _results(command: str, stage: str, rounds: list[dict[str, Any]], size: float,
             load_before: tuple[float, float, float]) -> dict[str, Any]:
    best = {kind: max(each[kind]["records_per_s"] for each in rounds)
            for kind in ("plain", "plain_restore_fetches", "restore")}
    return {"command": command, "stage": stage, "date": time.strftime("%Y-%m-%d"),
            "changelog_records": rounds[0]["plain"]["records"], "changelog_bytes": size, "rounds": rounds,
            "best_plain_records_per_s": best["plain"],
            "best_plain_restore_fetches_records_per_s": best["plain_restore_fetches"],
            "best_restore_records_per_s": best["restore"], "ratio": round(best["restore"] / best["plain"], 3),
            "ratio_to_restore_fetches": round(best["restore"] / best["plain_restore_fetches"], 3),
            "round_ratios": [each["ratio"] for each in rounds],
            "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}


def _report(results: dict[str, Any]) -> str:
    rows = [f"| {number + 1} | " + " | ".join(f"{each[kind]['records_per_s']:,} ({each[kind]['s_per_gb']})"
                                              for kind in ("plain", "plain_restore_fetches", "restore"))
            + f" | {each['ratio']} | {each['plain']['cpu_s']}, {each['restore']['cpu_s']} |"
            for number, each in enumerate(results["rounds"])]
    return "\n".join([
        "# Restore from an empty state directory, beside a plain consumer",
        "",
        f"`{results['command']}`, {results['date']}, {results['machine']}; stage {results['stage']}, "
        f"{results['changelog_records']:,} changelog records, "
        f"{results['changelog_bytes'] / 1e6:.1f} MB of keys and values; load average "
        f"{results['load_average_before_after'][0]} before, "
        f"{results['load_average_before_after'][1]} after (a shared machine: compare within a round).",
        "",
        "Records/s (seconds per GB). Plain: one read_committed consumer reading every key and value, "
        "librdkafka's fetch defaults; with the restore's fetches: the same consumer with the restore "
        "consumers' fetch and prefetch settings; restore: the worker's restore into the stage's stores "
        "(processes, then the tail), until every shard is at its changelog's end. Ratio: restore / plain, "
        "per round. CPU s: what each used of the machine's CPU, every thread and process of it (not the "
        "broker's): a share of the cores that does not depend on the load, where the rates do.",
        "",
        "| round | plain consumer | plain, restore's fetches | restore | ratio | CPU s: plain, restore |",
        "|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Best: restore {results['best_restore_records_per_s']:,} records/s, plain "
        f"{results['best_plain_records_per_s']:,} (ratio {results['ratio']}), plain with the restore's "
        f"fetches {results['best_plain_restore_fetches_records_per_s']:,} "
        f"(ratio {results['ratio_to_restore_fetches']}).",
        "",
    ])


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
    load_before = os.getloadavg()
    for number in range(args.rounds):
        plain = plain_read(kafka, changelog, DEFAULT_FETCH)
        size = plain["bytes"]
        tuned = plain_read(kafka, changelog, {**DEFAULT_FETCH, **FETCH_SETTINGS})
        directory = work / f"round-{number}"
        ours = restore(kafka, args.stage, changelog, directory)
        shutil.rmtree(directory, ignore_errors=True)
        rounds.append({"plain": _rates(plain, size), "plain_restore_fetches": _rates(tuned, size),
                       "restore": _rates(ours, size)})
        ours_rate, plain_rate = rounds[-1]["restore"]["records_per_s"], rounds[-1]["plain"]["records_per_s"]
        rounds[-1]["ratio"] = round(ours_rate / plain_rate, 3)
        print(json.dumps(rounds[-1]), flush=True)
    command = "python -m bench.restore_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    results = _results(command.strip(), args.stage, rounds, size, load_before)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "restore" if args.stage == "url-dedup" else f"restore-{args.stage}"
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(_report(results))
    print(json.dumps({key: value for key, value in results.items() if key != "rounds"}, indent=2))
    best_plain, best_restore = results["best_plain_records_per_s"], results["best_restore_records_per_s"]
    shutil.rmtree(work, ignore_errors=True)
    return 0 if best_restore >= best_plain else 1


if __name__ == "__main__":
    raise SystemExit(main())
