"""content_seen benchmark (issue 4): throughput on the shared corpus, lookup time, SIGKILLs.

    python -m bench.content_bench [--pages 3000] [--lookup-sizes 100000,1000000,10000000]
                                  [--lookup-formats plain[,block]] [--lookup-cache-mb 4096] [--kills 10]

1. Pages/s of one content-seen worker through Kafka (fetched-pages -> shards -> verdicts and unique
   pages, transactions, RocksDB), on the shared corpus's HTML pages (``../shared/corpus``, all
   three sets) fetched again and again from mirror hosts until ``--pages`` records: every page after
   the first round is an exact copy of one already seen. Beside it, the same pages through the
   offline mode in one process (no Kafka) and the page analysis alone.
2. Near-duplicate lookup time against the stage's RocksDB store (PlainTable) holding each of
   ``--lookup-sizes`` fingerprints in its block tables (bench/content_lookup.py), read through
   once (the steady state of a worker sized for its pages); ``--lookup-formats plain,block`` times
   block-based stores with a ``--lookup-cache-mb`` block cache beside them.
3. ``--kills`` SIGKILLs of a worker over a simulated crawl (streams/dev/simweb.py, all pages at once so
   copies race their originals): every page must get exactly one verdict (read_committed), no
   cluster of copies may lose all its members, and the duplicates found are offline mode's on the
   pages in fetch order (at least 99.5 % of them, none it does not call).

Writes ``bench/results/content.json`` and ``.md``; exits non-zero when a check fails: fewer than
300 pages/s, lookup at the largest size over twice that at the smallest, a planted near copy not
found, a verdict lost or doubled, a cluster without a unique member, under 99.5 % of offline's
duplicates or one it does not call.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from bench import content_lookup
from streams import records, registry
from streams.dev import simweb
from streams.pages.analyze import PageSettings, analyze_page
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.runtime.offline import run_offline
from streams.runtime.store import MemoryStore, RocksStore
from streams.stages.content_seen.cores import analysis_processes
from streams.stages.content_seen.stage import ContentSeenStage
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS, corpus_files

RESULTS = h.PROJECT_ROOT / "bench" / "results"
PARTITIONS = 8
MAX_RECORD_BYTES = 900_000  # the broker's default message.max.bytes is 1 MB; larger pages are left out
MIN_FOUND = 0.995  # of offline mode's duplicates, found through Kafka with SIGKILLs
PYTHON = sys.executable


def corpus_records(pages: int, corpus: Path = CORPUS) -> tuple[list[bytes], int]:
    """``pages`` fetched-page records: the corpus, then again from mirror hosts; and pages left out."""
    bodies, too_large = [], 0
    for path in corpus_files(corpus):
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
        encoded = base64.b64encode(raw).decode("ascii")
        if len(encoded) > MAX_RECORD_BYTES:
            too_large += 1
            continue
        bodies.append(encoded)
    clock = datetime(2026, 11, 1, tzinfo=UTC)
    out = []
    for number in range(pages):
        host = "origin.example" if number < len(bodies) else f"mirror{number // len(bodies)}.example"
        record = {"url": f"https://{host}/page/{number % len(bodies)}", "status": 200,
                  "content_type": "text/html", "body_base64": bodies[number % len(bodies)],
                  "fetched_at": records.rfc3339(clock + timedelta(seconds=number))}
        out.append(orjson.dumps(record))
    return out, too_large


def _kafka_rate(kafka: KafkaConfig, values: list[bytes], work: Path, processes: str) -> dict[str, Any]:
    """One worker's steady rate; ``processes`` its ``analysis_processes`` (``auto``: the default)."""
    topics = Topics(f"{h.fresh_name('contentbench')}.")
    h.create_topics(kafka, [topics.fetched_pages], PARTITIONS)
    h.produce(kafka, topics.fetched_pages, ((None, value) for value in values))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}",
               f"STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES={processes}", PYTHON, "-m", "streams",
               "content-seen", "--topic-prefix", topics.prefix, "--app-id", "bench", "--worker-id", "w0",
               "--state-dir", str(work / f"state-{topics.prefix}"), "--shards", str(PARTITIONS)]
    analysis = {"0": "analysis in the worker", "auto": "default analysis processes, "
                f"{analysis_processes('auto')} here"}.get(processes, f"{processes} analysis processes")
    rate = h.steady_rate(f"content-seen stage (Kafka, 1 worker, {analysis})", command, kafka,
                         topics.group("bench", "content-seen"), topics.fetched_pages, len(values), work,
                         via=registry.spec("content-seen").topology(topics, "bench").shard_topics,
                         unit="pages")
    verdicts = Counter(orjson.loads(m.value() or b"{}")["verdict"]
                       for m in read_to_end(kafka, topics.page_verdicts))
    return {**rate, "verdicts": dict(verdicts)}


def _offline_rate(values: list[bytes], work: Path) -> dict[str, Any]:
    topology = registry.spec("content-seen").topology(Topics("offline."), "bench")
    store = RocksStore(work / "offline")
    sink = open(work / "offline.jsonl", "wb")  # noqa: SIM115 - closed below
    began = time.perf_counter()
    run_offline(topology, ContentSeenStage(), store, values, out=sink)
    seconds = time.perf_counter() - began
    sink.close()
    store.close()
    return {"name": "content-seen --offline (same code, no Kafka)", "records": len(values),
            "seconds": round(seconds, 1), "pages_per_s": round(len(values) / seconds)}


def _analysis_rate(values: list[bytes]) -> dict[str, Any]:
    settings = PageSettings()
    decoded = [records.decode(records.RecordKind.FETCHED_PAGE, value) for value in values]
    began = time.perf_counter()
    for record in decoded:
        analyze_page(record, settings)
    seconds = time.perf_counter() - began
    return {"name": "page analysis only (decode, main text, SimHash)", "records": len(values),
            "seconds": round(seconds, 1), "pages_per_s": round(len(values) / seconds)}


def _kill_test(kafka: KafkaConfig, articles: int, kills: int, work: Path) -> dict[str, Any]:
    topics = Topics(f"{h.fresh_name('contentkill')}.")
    pages = simweb.crawl(seed=21, articles=articles)
    h.create_topics(kafka, [topics.fetched_pages], 4)
    h.produce(kafka, topics.fetched_pages, ((p.url.encode(), orjson.dumps(p.record)) for p in pages))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", PYTHON, "-m", "streams",
               "content-seen", "--topic-prefix", topics.prefix, "--app-id", "kill", "--worker-id", "w0",
               "--state-dir", str(work / "kill-state"), "--shards", "4", "--batch-max-messages", "100"]
    group = topics.group("kill", "content-seen")

    def verdicts() -> list[dict[str, Any]]:
        return [orjson.loads(m.value() or b"{}") for m in read_to_end(kafka, topics.page_verdicts)]

    report = h.run_with_kills(command, lambda: h.committed_total(kafka, group, topics.fetched_pages, 4),
                              len(pages), kills, work / "kill.log", timeout_s=1800,
                              done=lambda: len(verdicts()) >= len(pages))
    found = verdicts()
    counts = Counter(v["url"] for v in found)
    unique = {v["url"] for v in found if v["verdict"] == "unique"}
    clusters: dict[str, set[str]] = {}
    for page in pages:
        clusters.setdefault(page.article, set()).add(page.url)
    offline = _offline_verdicts([orjson.dumps(page.record) for page in pages])
    expected = {url for url, verdict in offline.items() if verdict["verdict"] == "duplicate"}
    called = {v["url"] for v in found if v["verdict"] == "duplicate"}
    return {"pages": len(pages), "kills": report.kills, "restarts": report.restarts,
            "lost": len({p.url for p in pages} - counts.keys()),
            "doubled": sum(1 for n in counts.values() if n > 1),
            "clusters": len(clusters), "clusters_without_unique": sum(1 for m in clusters.values()
                                                                       if not m & unique),
            "duplicates_found": len(called & expected), "offline_duplicates": len(expected),
            "false_duplicates": len(called - expected),
            "copies_planted": sum(1 for p in pages if p.copy_of is not None)}


def _offline_verdicts(values: list[bytes]) -> dict[str, dict[str, Any]]:
    """Offline mode's verdicts on the pages sorted by fetch time (simweb's crawl is in that order)."""
    topology = registry.spec("content-seen").topology(Topics("offline."), "kill")
    with tempfile.TemporaryFile() as sink:
        run_offline(topology, ContentSeenStage(), MemoryStore(), values, out=sink)
        sink.seek(0)
        return {v["url"]: v for v in map(orjson.loads, sink.read().splitlines())}


def _markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [f"Command: `{meta['command']}` ({meta['date']}); {meta['pages']:,} pages from the shared "
             f"corpus ({meta['corpus_pages']} HTML pages, {meta['too_large']} over {MAX_RECORD_BYTES:,} "
             f"bytes left out), {PARTITIONS} partitions and shards.", "",
             "| run | pages | seconds | pages/s |", "|---|---:|---:|---:|"]
    lines += [f"| {r['name']} | {r['records']:,} | {r['seconds']} | {r['pages_per_s']:,} |"
              for r in results["rates"]]
    lines += ["", "| table format | fingerprints stored | tables | µs per lookup (rounds) | candidates per "
              "lookup | planted near copies found | disk bytes per fingerprint | memory, MB | build s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['format']} | {r['stored']:,} | {r['tables']} | {r['us_per_lookup']} "
              f"({min(r['us_per_round'])}-{max(r['us_per_round'])}) | {r['candidates_per_lookup']} | "
              f"{r['planted_found']:,} / {r['planted']:,} | {r['disk_bytes_per_fingerprint']} | "
              f"{_memory(r)} | {r['build_s']} |" for r in results["lookup"]]
    lines += ["", "Memory: block cache used / its size (block-based), hash indexes and Bloom filters "
              "(PlainTable, whose files the page cache holds)."]
    kill = results.get("kill")
    if kill:
        lines += ["", f"SIGKILLs: {kill['kills']} over {kill['pages']:,} pages (all produced at once): "
                  f"{kill['lost']} verdicts lost, {kill['doubled']} doubled; "
                  f"{kill['clusters_without_unique']} of {kill['clusters']} clusters without a unique "
                  f"member; {kill['duplicates_found']} of the {kill['offline_duplicates']} duplicates "
                  "offline mode finds on the pages in fetch order found while racing their originals "
                  f"({kill['copies_planted']} copies planted), {kill['false_duplicates']} false "
                  "duplicates."]
    return "\n".join(lines) + "\n"


def _memory(row: dict[str, Any]) -> str:
    if row["format"] == "block":
        return f"{row['memory_mb']:,} / {row['block_cache_mb']:,}"
    return f"{row['memory_mb']:,}"


def _checks(results: dict[str, Any]) -> list[str]:
    failed = []
    kafka_rate = max(rate["pages_per_s"] or 0 for rate in results["rates"][:2])
    if kafka_rate < 300:
        failed.append(f"{kafka_rate} pages/s per worker, under 300")
    failed += content_lookup.checks(results["lookup"])
    kill = results.get("kill")
    if kill and ((kill["lost"], kill["doubled"], kill["clusters_without_unique"], kill["false_duplicates"])
                 != (0, 0, 0, 0) or kill["duplicates_found"] < MIN_FOUND * kill["offline_duplicates"]):
        failed.append(f"SIGKILL run: {kill}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--lookup-sizes", default="100000,1000000,10000000")
    parser.add_argument("--lookup-formats", default="plain", help="plain (the stage's), block, or both")
    parser.add_argument("--lookup-cache-mb", type=int, default=content_lookup.BLOCK_CACHE_MB,
                        help="block-based lookup stores' block cache")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-articles", type=int, default=400)
    parser.add_argument("--analysis-processes", default="auto",
                        help="the second Kafka run's analysis_processes, the default's unless given (the "
                             "first analyses in the worker)")
    args = parser.parse_args(argv)
    if not CORPUS.exists():
        print(f"the shared corpus is not at {CORPUS}: nothing to measure", file=sys.stderr)
        return 2
    kafka = h.broker()
    work = Path(tempfile.mkdtemp(prefix="content-bench-"))
    values, too_large = corpus_records(args.pages)
    rates = [_kafka_rate(kafka, values, work, processes) for processes in ("0", args.analysis_processes)]
    rates += [_offline_rate(values, work), _analysis_rate(values)]
    sizes = [int(size) for size in args.lookup_sizes.split(",") if size]
    results: dict[str, Any] = {
        "meta": {"command": "python -m bench.content_bench " + " ".join(argv or sys.argv[1:]),
                 "date": time.strftime("%Y-%m-%d"), "pages": len(values), "too_large": too_large,
                 "corpus_pages": len(corpus_files())},
        "rates": rates,
        "lookup": content_lookup.measure(sizes, work, block_cache_mb=args.lookup_cache_mb,
                                         formats=content_lookup.formats(args.lookup_formats)),
        "kill": _kill_test(kafka, args.kill_articles, args.kills, work) if args.kills else None,
    }
    shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "content.json").write_text(json.dumps(results, indent=2))
    table = _markdown(results)
    (RESULTS / "content.md").write_text(table)
    print(table)
    failed = _checks(results)
    for failure in failed:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
