"""Scrapy on crawl-dedup beside Scrapy on scrapy-redis: the same site, spider, processes and concurrency.

The site is testing/scrapy_site.py (articles on four hosts, every link under another spelling,
mirrors on another host, near copies), served on 127.0.0.1 as the crawlers' HTTP proxy; its access
log says what was fetched. Each side runs two ``scrapy crawl site`` processes of the example
project (examples/scrapy) until the crawl is done:

- crawl-dedup: the project's own two-line switch (``SCHEDULER``, ``SPIDER_MIDDLEWARES``) on the
  local broker, with the URL and page stages (one worker each, 2 shards), with
  ``CRAWL_DEDUP_SKIP_DUPLICATES`` (each page waits for its verdict) and without, and once more
  with the stages' ``batch_max_wait_s`` at 0.02 s instead of 0.25 s (how much of a wait is theirs);
- scrapy-redis (PyPI, 0.9.1): its two-line switch (``SCHEDULER = "scrapy_redis.scheduler.Scheduler"``,
  ``DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"``) on Debian's redis-server on
  loopback, with ``SCHEDULER_PERSIST = True`` (without it the first process to close deletes the
  shared dupefilter, and the other crawls the whole site again: every page about three times over,
  in half of the runs); its request fingerprints hash the URL after w3lib's ``canonicalize_url``.

Per side: pages fetched (requests served), duplicate fetches (requests for a page already served),
mirrors and near copies parsed (items of a copy after the first page of its pair, whatever spelling
of their URLs the items carry), wall
time from the crawlers' start to the last one's exit, and the dedup state's size: Redis's
``used_memory`` against the stages' state directories on disk (RocksDB and Bloom snapshots).

    python -m bench.scrapy_bench [--pages 1000]

Results: bench/results/scrapy.md and .json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from streams.urls import canonical
from testing import harness as h
from testing import scrapy_site
from testing.scrapy import read_items, stage_settings, start_scrapy, start_stage, wait_until_running

RESULTS = Path(__file__).parent / "results"
RULES = canonical.CanonicalSettings()
QUICKER_BATCH_WAIT_S = 0.02  # one more row: the stages waiting less for a batch (where the time goes)
IDLE_CLOSE_S = 0.2  # a spider closes this soon after the crawl is drained (scrapy-redis's: once idle)
phases: dict[str, tuple[float, float]] = {}  # run -> (first, last fetch) in s from the crawlers' start
STAT = re.compile(r"'((?:crawl_dedup|scheduler|dupefilter)/[a-z_0-9/]+)': ([0-9.]+)")


def outcome(name: str, site: scrapy_site.Site, fetched: Counter[str], items: list[dict[str, Any]],
            wall_s: float, state_bytes: int) -> dict[str, Any]:
    # an item's URL is whichever spelling was fetched (scrapy-redis fetches several)
    parsed = Counter(canonical.canonicalize(item["url"], RULES) for item in items)

    def copies_parsed(clusters: list[set[str]]) -> int:
        return sum(max(0, sum(1 for url in cluster if parsed[url]) - 1) for cluster in clusters)

    mirrors = [cluster for cluster in site.clusters if any("//mirror." in url for url in cluster)]
    nears = [cluster for cluster in site.clusters if cluster not in mirrors]
    return {"crawler": name, "pages": len(site.pages), "fetched": sum(fetched.values()),
            "duplicate_fetches": sum(fetched.values()) - len(fetched), "items": len(items),
            "mirrors": len(mirrors), "mirrors_parsed": copies_parsed(mirrors), "near_copies": len(nears),
            "near_copies_parsed": copies_parsed(nears), "wall_s": round(wall_s, 1),
            "state_bytes": state_bytes}


def _crawl(site: scrapy_site.Site, work: Path, settings: list[str], env: dict[str, str],
           processes: int, delay_s: float = 0.0) -> tuple[Counter[str], list[dict[str, Any]], float]:
    work.mkdir(parents=True, exist_ok=True)
    with scrapy_site.SiteServer(site, delay_s, jitter_s=delay_s / 4) as server:
        items = [work / f"items{n}.jsonl" for n in range(processes)]
        began = time.monotonic()
        crawlers = [start_scrapy(server.proxy, items[n], work / f"scrapy{n}.log", settings, env)
                    for n in range(processes)]
        for number, crawler in enumerate(crawlers):
            if crawler.wait(1800) != 0:
                raise RuntimeError(f"scrapy process {number} failed: see {work}/scrapy{number}.log")
        wall_s = time.monotonic() - began
        phases[work.name] = (round(server.times[0] - began, 1), round(server.times[-1] - began, 1)) \
            if server.times else (0.0, 0.0)
        return server.fetches(), read_items(items), wall_s


def _directory_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def crawl_stats(logs: list[Path]) -> dict[str, float]:
    """The crawl_dedup/* and scheduler stats of each process's final dump, summed (the p50/p90
    figures: their mean over the processes)."""
    totals: dict[str, list[float]] = {}
    for log in logs:
        dump = log.read_text().rpartition("Dumping Scrapy stats:")[2]
        for key, value in STAT.findall(dump):
            totals.setdefault(key, []).append(float(value))
    return {key: round(sum(values) / len(values) if key.endswith(("p50_s", "p90_s")) else sum(values), 3)
            for key, values in totals.items()}


def run_stage(kafka: KafkaConfig, site: scrapy_site.Site, work: Path, processes: int,
              skip_duplicates: bool = True, delay_s: float = 0.0, batch_max_wait_s: float | None = None
              ) -> dict[str, Any]:
    prefix = h.fresh_name("scrapy") + "."
    topics = Topics(prefix)
    stage_env = {"STREAMS_RUNTIME_BATCH_MAX_WAIT_S": str(batch_max_wait_s)} if batch_max_wait_s else {}
    stages = [start_stage(kafka, prefix, name, work / name, stage_env)
              for name in ("url-dedup", "content-seen")]
    try:
        wait_until_running(kafka, topics)
        settings, env = stage_settings(kafka, prefix)
        settings += [f"CRAWL_DEDUP_SKIP_DUPLICATES={skip_duplicates}",
                     f"CRAWL_DEDUP_IDLE_CLOSE_S={IDLE_CLOSE_S}"]
        fetched, items, wall_s = _crawl(site, work, settings, env, processes, delay_s)
    finally:
        for stage in stages:
            stage.send_signal(signal.SIGTERM)
            stage.wait(60)
    state = _directory_bytes(work / "url-dedup") + _directory_bytes(work / "content-seen")
    name = "crawl-dedup" + (", duplicates skipped" if skip_duplicates else ", no waiting for verdicts") + (
        "" if batch_max_wait_s is None else f", stages' batch_max_wait_s {batch_max_wait_s}")
    row = outcome(name, site, fetched, items, wall_s, state)
    row["stats"] = crawl_stats([work / f"scrapy{n}.log" for n in range(processes)])
    return row


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_redis(site: scrapy_site.Site, work: Path, processes: int, delay_s: float = 0.0) -> dict[str, Any]:
    import redis

    server_path = shutil.which("redis-server")
    if server_path is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    port = _free_port()
    server = subprocess.Popen([server_path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        h.wait_for(lambda: _pings(client), timeout_s=20)
        settings = ["SCHEDULER=scrapy_redis.scheduler.Scheduler",
                    "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
                    f"REDIS_URL=redis://127.0.0.1:{port}", "SPIDER_MIDDLEWARES={}", "SCHEDULER_PERSIST=True"]
        fetched, items, wall_s = _crawl(site, work, settings, {}, processes, delay_s)
        used = int(client.info("memory")["used_memory"]) - int(client.info("memory")["used_memory_startup"])
    finally:
        server.terminate()
        server.wait(30)
    return outcome("scrapy-redis 0.9.1 (RFPDupeFilter)", site, fetched, items, wall_s, used)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def alternating(kafka: KafkaConfig, site: scrapy_site.Site, scratch: Path, processes: int, runs: int,
                delay_s: float) -> dict[str, list[dict[str, Any]]]:
    """``runs`` crawls of each side on the site at ``delay_s``, one after the other, alternating
    which goes first (the machine's load drifts; a pair shares it)."""
    out: dict[str, list[dict[str, Any]]] = {"ours": [], "redis": []}
    for run in range(runs):
        for side in ("ours", "redis") if run % 2 == 0 else ("redis", "ours"):
            work = scratch / f"{side}-{delay_s}-{run}"
            row = run_stage(kafka, site, work, processes, delay_s=delay_s) if side == "ours" \
                else run_redis(site, work, processes, delay_s)
            first, last = phases.get(work.name, (0.0, 0.0))
            print(f"delay {delay_s} s, run {run}, {side}: {row['wall_s']} s, {row['fetched']} fetched, "
                  f"first fetch at {first} s, last at {last} s", flush=True)
            out[side].append(row)
    return out


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda row: row["wall_s"])
    return {**ordered[len(ordered) // 2], "walls_s": [row["wall_s"] for row in rows]}


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| response delay | crawler | pages on the site | requests served | duplicate fetches | items | "
             "mirrors parsed | near copies parsed | wall s (median) | wall s (each run) | dedup state |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    lines += [f"| {r['delay_ms']} ms | {r['crawler']} | {r['pages']} | {r['fetched']} | "
              f"{r['duplicate_fetches']} | "
              f"{r['items']} | {r['mirrors_parsed']} of {r['mirrors']} | {r['near_copies_parsed']} of "
              f"{r['near_copies']} | {r['wall_s']} | {', '.join(map(str, r['walls_s']))} | "
              f"{r['state_bytes'] / 1e6:.2f} MB |" for r in rows]
    return "\n".join(lines)


def _pacing_table(rows: list[dict[str, Any]]) -> str:
    keys = ("url_round_trip_p50_s", "url_round_trip_p90_s", "verdict_wait_p50_s", "verdict_wait_p90_s",
            "verdict_read_p50_s", "buffer_full_s", "downloader_waiting_s", "commit_s")
    lines = ["| response delay | crawler | " + " | ".join(keys) + " |", "|---|---|" + "---:|" * len(keys)]
    for row in rows:
        stats = row.get("stats") or {}
        lines.append(f"| {row['delay_ms']} ms | {row['crawler']} | "
                     + " | ".join(str(stats.get(f"crawl_dedup/{key}", "")) for key in keys) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="crawls of each side per delay, alternating")
    parser.add_argument("--delays-ms", default="200,0", help="the site's response delays (jitter: a quarter)")
    parser.add_argument("--work", type=Path,
                        help="keep the crawls' logs here (default: a temporary directory)")
    args = parser.parse_args()
    site = scrapy_site.build(pages=args.pages, seed=5, mirrors=args.pages // 10, near=args.pages // 15,
                             changing=args.pages // 15)
    kafka = h.broker()
    rows, ratios = [], {}
    with tempfile.TemporaryDirectory(prefix="scrapy-bench-") as temporary:
        scratch = args.work or temporary
        for delay_ms in (int(delay) for delay in args.delays_ms.split(",")):
            delay_s = delay_ms / 1000
            runs = alternating(kafka, site, Path(scratch), args.processes, args.runs, delay_s)
            unwaited = run_stage(kafka, site, Path(scratch) / f"no-wait-{delay_ms}", args.processes,
                                 skip_duplicates=False, delay_s=delay_s)
            quicker = run_stage(kafka, site, Path(scratch) / f"quicker-{delay_ms}", args.processes,
                                delay_s=delay_s, batch_max_wait_s=QUICKER_BATCH_WAIT_S)
            for row in runs["ours"] + [unwaited, quicker]:
                assert row["duplicate_fetches"] == 0 and row["fetched"] == len(site.pages), row
            assert all(row["mirrors_parsed"] == 0 for row in runs["ours"] + [quicker]), runs["ours"]
            pairs = sorted(ours["wall_s"] / theirs["wall_s"]
                           for ours, theirs in zip(runs["ours"], runs["redis"], strict=True))
            ratios[delay_ms] = {"median": round(pairs[len(pairs) // 2], 2), "min": round(pairs[0], 2),
                                "max": round(pairs[-1], 2)}
            for row in (_median_row(runs["ours"]), {**unwaited, "walls_s": [unwaited["wall_s"]]},
                        {**quicker, "walls_s": [quicker["wall_s"]]}, _median_row(runs["redis"])):
                rows.append({**row, "delay_ms": delay_ms})
    table, pacing = _table(rows), _pacing_table([row for row in rows if "stats" in row])
    lines = [f"crawl-dedup (duplicates skipped) / scrapy-redis wall time at {delay} ms: {r['median']}x "
             f"(pairs {r['min']}x-{r['max']}x)" for delay, r in ratios.items()]
    print(table, pacing, *lines, sep="\n")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scrapy.json").write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2) + "\n")
    command = (f"python -m bench.scrapy_bench --pages {args.pages} --runs {args.runs} "
               f"--delays-ms {args.delays_ms}")
    (RESULTS / "scrapy.md").write_text(f"# Scrapy beside scrapy-redis (`{command}`)\n\n{table}\n\n"
                                       + "\n".join(f"- {line}" for line in lines)
                                       + "\n\nWhere our time goes (crawl_dedup/* stats of the run of median "
                                       "wall time: seconds summed over both processes, percentiles their "
                                       f"mean):\n\n{pacing}\n")


if __name__ == "__main__":
    main()
