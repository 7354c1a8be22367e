"""URL stage benchmark (issue 3): one frontier, one broker, one run, side by side.

    python -m bench.url_bench [--records 5000000] [--memory-urls 10000000] [--offline-records 10000000]

1. Kafka rates per worker on the same frontier (``--records``, 70 % repeats, bench/frontier_gen.py):
   the url-dedup stage end to end (frontier -> shards -> new URLs, transactions, RocksDB); a raw
   confluent-kafka passthrough making the same two hops; a single-hop passthrough; a scrapy-redis
   style dedup (w3lib canonicalize_url, SHA1, one SADD per URL into Debian's redis-server on
   loopback). The stage's output must be exactly the planted distinct URLs.
2. Memory per URL at ``--memory-urls`` stored fingerprints, exact and Bloom-only seen-sets: RSS
   growth of this process and bytes on disk, and the Bloom-only filter's measured false-positive
   rate against its 1 % target.
3. Offline exact mode over ``--offline-records`` records (``url-dedup --offline``): the output must
   be exactly the planted distinct set.
4. The Kafka stage over ``--kill-records`` records, SIGKILLed ``--kills`` times at random points and
   restarted each time; the new URLs, read with read_committed, must be the planted distinct set:
   none lost, none emitted twice.

Writes ``bench/results/url.json`` and ``bench/results/url.md`` and prints the table; exits non-zero
if a correctness check fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.frontier_gen import frontier
from bench.url_memory import measure_memory, offline_exact
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

RESULTS = h.PROJECT_ROOT / "bench" / "results"
PARTITIONS = 8
PIPELINES = ("stage", "passthrough2", "passthrough1", "scrapy-redis")
PYTHON = sys.executable


def stage_rate(kafka: KafkaConfig, prefix: str, total: int, work: Path, app_id: str,
               tree: Path = h.PROJECT_ROOT, python: str | None = None) -> dict[str, Any]:
    """The stage's steady rate on ``prefix``'s frontier; ``tree``: the checkout to run (its own
    virtualenv's Python, from its own directory), for A/B runs (bench/url_ab.py); ``python``: an
    interpreter with the package installed (a wheel), run from ``tree``, here any directory."""
    topics = Topics(prefix)
    if python is None:
        python = PYTHON if tree == h.PROJECT_ROOT else str(tree / ".venv" / "bin" / "python")
    command = ["env", f"--chdir={tree}", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}",
               f"STREAMS_URL_DEDUP_EXPECTED_URLS={total}", python, "-m", "streams", "url-dedup",
               "--topic-prefix", prefix, "--app-id", app_id, "--worker-id", "w0", "--state-dir",
               str(work / f"state-{app_id}"), "--shards", str(PARTITIONS)]
    shards = topics.shards(app_id, "url-dedup")
    rate = h.steady_rate("url-dedup stage", command, kafka, topics.group(app_id, "url-dedup"),
                         topics.frontier, total, work, via=[shards])
    # URLs decided or answered at routing never reach the shard topic (docs/url-dedup.md).
    rate["shard_topic_offsets"] = h.end_offsets(kafka, shards)
    return rate


def _kill_test(kafka: KafkaConfig, records: int, kills: int, work: Path) -> dict[str, Any]:
    prefix = f"{h.fresh_name('urlkill')}."
    topics = Topics(prefix)
    h.create_topics(kafka, [topics.frontier], PARTITIONS)
    lines, distinct = frontier(records, seed=23)
    h.produce(kafka, topics.frontier, ((None, value) for value in lines))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", PYTHON, "-m", "streams",
               "url-dedup", "--topic-prefix", prefix, "--app-id", "kill", "--worker-id", "w0",
               "--state-dir", str(work / "kill-state"), "--shards", str(PARTITIONS)]
    group = topics.group("kill", "url-dedup")
    report = h.run_with_kills(command, lambda: h.committed_total(kafka, group, topics.frontier, PARTITIONS),
                              records, kills, work / "kill.log",
                              done=lambda: h.caught_up(kafka, group, topics.shards("kill", "url-dedup")))
    counts = h.read_all(kafka, topics.new_urls,
                        value_of=lambda _k, v: orjson.loads(v or b"{}")["fingerprint"].encode())
    return {"records": records, "distinct": distinct, "kills": report.kills, "restarts": report.restarts,
            "emitted": sum(counts.values()), "emitted_distinct": len(counts),
            "lost": distinct - len(counts), "doubled": sum(1 for n in counts.values() if n > 1),
            "seconds": round(report.seconds, 1)}


def passthrough_rate(kafka: KafkaConfig, source: str, total: int, work: Path, hops: int) -> dict[str, Any]:
    group, sink = h.fresh_name(f"pt{hops}"), h.fresh_name(f"pt{hops}-out")
    via = h.fresh_name("pt-via") if hops == 2 else None
    h.create_topics(kafka, [sink] + ([via] if via else []), PARTITIONS)
    command = [PYTHON, "-m", "bench.runtimes.passthrough", "--bootstrap", kafka.bootstrap_servers,
               "--input", source, "--output", sink, "--group", group] + (["--via", via] if via else [])
    name = f"passthrough, {hops} hop{'s' if hops > 1 else ''}"
    return h.steady_rate(name, command, kafka, group, source, total, work, via=[via] if via else [])


def _scrapy_redis(kafka: KafkaConfig, source: str, total: int, work: Path) -> dict[str, Any]:
    if shutil.which("redis-server") is None:
        return {"name": "scrapy-redis style",
                "skipped": "redis-server not installed (apt-get install redis-server)"}
    port = 16390
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        group, sink = h.fresh_name("redis"), h.fresh_name("redis-out")
        h.create_topics(kafka, [sink], PARTITIONS)
        command = [PYTHON, "-m", "bench.runtimes.scrapy_redis_style",
                   "--bootstrap", kafka.bootstrap_servers, "--input", source, "--output", sink,
                   "--group", group, "--redis-port", str(port)]
        return h.steady_rate("scrapy-redis style", command, kafka, group, source, total, work)
    finally:
        server.terminate()
        server.wait(10)


def _measure(runs: dict[str, Callable[[int], dict[str, Any]]], names: list[str],
             rounds: int) -> dict[str, dict[str, Any]]:
    """Each pipeline ``rounds`` times, alternating (A B C A B C): the machine is shared, and a
    neighbour's load only ever slows a run down, so the best of each is its rate here, measured
    side by side with the others' (the same reasoning as ``timeit``'s minimum)."""
    tried: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names:
            if name != "scrapy-redis" or round_ == 0:  # 15 minutes a run, 5x off: once is enough
                tried[name].append(runs[name](round_))
    best: dict[str, dict[str, Any]] = {}
    for name, results in tried.items():
        chosen = max(results, key=lambda result: result.get("urls_per_s") or 0)
        best[name] = {**chosen, "rounds": [result.get("urls_per_s") for result in results]}
    return best


def _markdown(results: dict[str, Any]) -> str:
    meta, rates = results["meta"], results["rates"]
    by_name = {r["name"]: r.get("urls_per_s") for r in rates}
    same_hops = by_name.get("passthrough, 2 hops")
    one_hop = by_name.get("passthrough, 1 hop")
    lines = [f"URL benchmark, {meta['records']:,} frontier records ({meta['distinct']:,} distinct "
             f"canonical URLs, {meta['repeat_share']:.0%} repeats), {PARTITIONS} partitions, "
             "one worker each, "
             f"one run ({meta['date']}): `{meta['command']}`. Each pipeline ran the rounds shown, "
             "alternating with the others; its rate is the best of them.", "",
             "| pipeline | URLs/s | vs 2-hop passthrough | vs 1-hop passthrough | rounds (URLs/s) |",
             "|---|---:|---:|---:|---|"]
    notes: list[str] = []
    for rate in rates:
        value = rate.get("urls_per_s")
        if "shard_topic_offsets" in rate:
            notes.append(f"The stage's shard topic took {rate['shard_topic_offsets']:,} offsets "
                         f"(records and commit markers) for {meta['records']:,} frontier records: a "
                         "worker decides at routing the URLs of the shards it owns, and one worker "
                         "owns them all here, so its new URLs make one hop, as the 1-hop "
                         "passthrough's records do (with n workers, 1/n of them). Its output held "
                         f"{rate.get('emitted_distinct', 0):,} distinct URLs of "
                         f"{rate.get('distinct', 0):,} planted, each once per round.")
        if value is None:
            lines.append(f"| {rate['name']} | {rate.get('skipped', '-')} | | | |")
            continue
        ratio2 = f"{value / same_hops:.2f}" if same_hops else "-"
        ratio1 = f"{value / one_hop:.2f}" if one_hop else "-"
        tries = ", ".join(f"{each:,}" for each in rate.get("rounds", []) if each)
        lines.append(f"| {rate['name']} | {value:,} | {ratio2} | {ratio1} | {tries} |")
    stage = by_name.get("url-dedup stage")
    scrapy = by_name.get("scrapy-redis style")
    if stage and scrapy:
        lines.append(f"\nStage vs scrapy-redis style: {stage / scrapy:.1f}x.")
    lines += [f"\n{note}" for note in notes]
    lines += ["",
              "| seen-set | URLs stored | RSS bytes/URL | disk bytes/URL | false-positive rate (target) |",
              "|---|---:|---:|---:|---:|"]
    for memory in results["memory"]:
        measured = memory.get("false_positive_rate")
        fp = f"{measured:.4f} ({memory['target_rate']})" if measured is not None else "0 (exact)"
        lines.append(f"| {memory['mode']} | {memory['urls']:,} | {memory['rss_bytes_per_url']:.2f} | "
                     f"{memory['disk_bytes_per_url']:.2f} | {fp} |")
    kill = results.get("kill")
    if kill:
        lines.append(f"\nKafka stage under {kill['kills']} SIGKILLs: {kill['records']:,} records, "
                     f"{kill['distinct']:,} planted distinct, {kill['emitted_distinct']:,} emitted, "
                     f"lost {kill['lost']}, doubled {kill['doubled']} (read_committed).")
    offline = results.get("offline")
    if offline:
        lines.append(f"\nOffline exact mode: {offline['records']:,} records, {offline['emitted']:,} "
                     f"emitted, {offline['distinct']:,} planted distinct, {offline['urls_per_s']:,} URLs/s.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--memory-urls", type=int, default=10_000_000)
    parser.add_argument("--offline-records", type=int, default=10_000_000)
    parser.add_argument("--kill-records", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--pipelines", default=",".join(PIPELINES),
                        help="which Kafka pipelines to measure, comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measure each pipeline this many times, alternating; report the best "
                             "(scrapy-redis style: once)")
    args = parser.parse_args(argv)
    kafka = h.broker()
    work = Path(tempfile.mkdtemp(prefix="url-bench-"))
    prefix = f"{h.fresh_name('urlbench')}."
    source = Topics(prefix).frontier
    h.create_topics(kafka, [source], PARTITIONS)
    records, distinct = frontier(args.records)
    h.produce(kafka, source, ((None, value) for value in records))
    runs: dict[str, Callable[[int], dict[str, Any]]] = {
            "stage": lambda round_: stage_rate(kafka, prefix, args.records, work, f"bench{round_}"),
            "passthrough2": lambda _: passthrough_rate(kafka, source, args.records, work, hops=2),
            "passthrough1": lambda _: passthrough_rate(kafka, source, args.records, work, hops=1),
            "scrapy-redis": lambda _: _scrapy_redis(kafka, source, args.records, work)}
    measured = _measure(runs, args.pipelines.split(","), args.rounds)
    rates = list(measured.values())
    exact = True  # checked below when the stage ran: each round emits each planted URL once
    if "stage" in measured:
        counts = h.read_all(kafka, Topics(prefix).new_urls, idle_s=1.0,
                            value_of=lambda _k, v: orjson.loads(v or b"{}")["fingerprint"].encode())
        rounds = len(measured["stage"]["rounds"])
        exact = len(counts) == distinct and set(counts.values()) == {rounds}
        measured["stage"].update(emitted=sum(counts.values()), emitted_distinct=len(counts),
                                 distinct=distinct)
    results: dict[str, Any] = {
        "meta": {"records": args.records, "distinct": distinct, "repeat_share": 0.7,
                 "date": time.strftime("%Y-%m-%d"),
                 "command": "python -m bench.url_bench " + " ".join(argv or sys.argv[1:])},
        "rates": rates,
        "memory": [measure_memory(mode, args.memory_urls, work) for mode in ("exact", "bloom")
                   if args.memory_urls],
        "offline": offline_exact(args.offline_records, work) if args.offline_records else None,
        "kill": _kill_test(kafka, args.kill_records, args.kills, work) if args.kills else None,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "url.json").write_text(json.dumps(results, indent=2))
    table = _markdown(results)
    (RESULTS / "url.md").write_text(table)
    print(table)
    shutil.rmtree(work, ignore_errors=True)
    offline = results["offline"]
    kill = results["kill"]
    ok = exact and (offline is None or offline["emitted"] == offline["distinct"])
    ok = ok and (kill is None or (kill["lost"], kill["doubled"]) == (0, 0))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
