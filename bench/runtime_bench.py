"""Runtime benchmark (decision 0001): two jobs, each on one broker and one input, each runtime
measured for its rate, then SIGKILLed at random points of the stream and restarted, its output read
back with read_committed (lost, doubled, unexpected; the time from each restart to its next commit).

- ``first-seen``: emit each key of a keyed stream once. This project's confluent-kafka runtime
  (``confluent``) and quixstreams (``quix``, exactly-once, RocksDB state) beside raw passthroughs.
- ``url``: emit each new URL of a crawl frontier once (bench/frontier_gen.py). This project's URL
  stage (``url-dedup``), Kafka Streams (``kstreams``: Processor API, RocksDB store, repartition by
  host, exactly_once_v2) and PyFlink (``flink``: RocksDB state backend, exactly-once checkpoints,
  restarted from the latest retained checkpoint) beside the same passthroughs on the frontier.

The workers, and the passthroughs (confluent-kafka in Python; KafkaConsumer -> KafkaProducer on the
JVM, the client's limit), are in bench/runtime_workers.py.

    python -m bench.runtime_bench [--records 1000000] [--distinct 700000]
                                  [--frontier-records 1000000] [--kills 20]
                                  [--runtimes passthrough,confluent,...] [--kill-runtimes confluent,...]

``make bench-runtime`` builds what the other runtimes need: ``.venv-quix`` (quixstreams needs an
older confluent-kafka than the project's), ``.venv-flink`` (apache-flink) and the JVM workers
(``mvn -q package`` in bench/runtimes/jvm, which also fetches Flink's Kafka connector).

Writes ``bench/results/runtime.json`` and ``bench/results/runtime.md`` and prints the tables. Exits
non-zero when a dedup runtime of the ``url`` job or this project's ``confluent`` lost, doubled or
made up a key under SIGKILL (quixstreams' results are a finding, not a check).
The faust-streaming implementation it was once compared with was removed by the decision;
docs/decisions/0001-stream-runtime.md names the commit that still has it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.frontier_gen import frontier_urls
from bench.runtime_workers import LABELS, PARTITIONS, PASSTHROUGHS, job_of, worker
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

RESULTS = h.PROJECT_ROOT / "bench" / "results"
CHECKED = ("confluent", "url-dedup", "kstreams", "flink")  # 0 lost, 0 doubled, 0 unexpected or exit 1
RELEASE = h.PROJECT_ROOT / "streams" / "broker" / "kafka_release.json"
KAFKA = json.loads(RELEASE.read_text())["kafka_version"]


@dataclass(frozen=True)
class Job:
    """One job's input, produced twice (the URL stage's output topic is its frontier's prefix's:
    the rate runs and the kill runs each get a frontier of their own)."""

    name: str
    total: int
    expected: set[bytes]
    rate: tuple[str, str]  # (prefix, input topic) of the rate runs
    kill: tuple[str, str]  # and of the kill runs
    value_of: Callable[[bytes | None, bytes | None], bytes | None] | None  # an output's key; None: its key


def _canonical(_key: bytes | None, value: bytes | None) -> bytes:
    return orjson.loads(value or b"{}")["canonical"].encode()


def make_jobs(kafka: KafkaConfig, names: set[str], args: argparse.Namespace) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    if "first-seen" in names:
        keys = h.keyed_stream(args.distinct, args.records)
        source = h.fresh_name("bench-in")
        h.create_topics(kafka, [source], PARTITIONS)
        h.produce(kafka, source, ((key, key) for key in keys))
        jobs["first-seen"] = Job("first-seen", args.records, set(keys), ("", source), ("", source), None)
    if "url" in names:
        inputs = []
        for use in ("rate", "kill"):
            prefix = f"{h.fresh_name(f'rt{use}')}."
            h.create_topics(kafka, [Topics(prefix).frontier], PARTITIONS)
            records, urls = frontier_urls(args.frontier_records)
            h.produce(kafka, Topics(prefix).frontier, ((None, value) for value in records))
            inputs.append((prefix, Topics(prefix).frontier))
        jobs["url"] = Job("url", args.frontier_records, {url.encode() for url in urls}, inputs[0],
                          inputs[1], _canonical)
    return jobs


def _run(runtime: str, kafka: KafkaConfig, job: Job, kills: int, work: Path,
         use: str) -> tuple[h.KillReport, str]:
    """Run ``runtime`` on the job's input to its end (with ``kills`` SIGKILLs): its report and its
    output topic."""
    prefix, source = job.kill if kills else job.rate
    each = worker(runtime, kafka, source, work / f"{use}-{runtime}", prefix)
    done = (lambda: all(h.caught_up(kafka, each.group, topic) for topic in each.via)) if each.via else None
    with h.CommittedOffsets(kafka, each.group, [source]) as inputs, \
            h.CommittedOffsets(kafka, each.group, list(each.via)) as internal:
        report = h.run_with_kills(each.command, inputs.total, job.total, kills=kills,
                                  log_path=work / f"{use}-{runtime}.log", done=done, poll_s=0.05,
                                  settled=internal.positions if each.via else None)
    return report, each.sink


def _output(kafka: KafkaConfig, job: Job, sink: str) -> dict[str, Any]:
    # A killed worker's open transaction hides what was committed after it from read_committed
    # readers until it is fenced or aborted: read once none is open (the wait is reported).
    hidden_s = h.seconds_until_settled(kafka, sink)
    counts = h.read_all(kafka, sink, value_of=job.value_of)
    return {"output_hidden_s": round(hidden_s, 1), **h.verdict(job.expected, counts)}


def measure_rate(runtime: str, kafka: KafkaConfig, job: Job, work: Path) -> dict[str, Any]:
    """Messages/s over the steady part of a run: from the first committed progress to the end."""
    began = time.monotonic()
    report, sink = _run(runtime, kafka, job, 0, work, "rate")
    steady_s = report.seconds - (report.first_progress_at or 0.0)
    steady_records = job.total - report.first_progress_records
    if steady_records <= 0:  # a run shorter than one progress poll: the whole run
        steady_records, steady_s = job.total, report.seconds
    result = {"runtime": runtime, "job": job.name, "records": job.total,
              "wall_s": round(time.monotonic() - began, 2),
              "startup_s": round(report.first_progress_at or 0.0, 2),
              "msgs_per_s": round(steady_records / steady_s) if steady_s > 0 else None}
    if runtime not in PASSTHROUGHS:  # the run's output too: each expected key once
        result.update(_output(kafka, job, sink))
    return result


def kill_test(runtime: str, kafka: KafkaConfig, job: Job, kills: int, work: Path) -> dict[str, Any]:
    report, sink = _run(runtime, kafka, job, kills, work, "kill")
    resumed = sorted(report.resumed_after_s)
    return {"runtime": runtime, "job": job.name, "kills": report.kills, "restarts": report.restarts,
            "exits": report.exits, "kill_points": report.kill_points,
            "seconds": round(report.seconds, 1), "resumed_after_s": report.resumed_after_s,
            "resumed_median_s": resumed[len(resumed) // 2] if resumed else None,
            "resumed_max_s": resumed[-1] if resumed else None, **_output(kafka, job, sink)}


def _markdown(rates: list[dict[str, Any]], kills: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    distinct_urls = meta["frontier_distinct"] or 0  # None: no url job ran
    titles = {"first-seen": f"first-seen: {meta['records']:,} keyed records "
                            f"({meta['distinct']:,} distinct keys)",
              "url": f"url: {meta['frontier_records']:,} frontier records ({distinct_urls:,} "
                     "distinct canonical URLs, 70 % repeats)"}
    lines = [f"Runtime benchmark, {PARTITIONS} partitions, Kafka {meta['kafka']}, one run ({meta['date']}): "
             f"`{meta['command']}`."]
    for job in ("first-seen", "url"):
        rows = [r for r in rates if r["job"] == job]
        if not rows:
            continue
        base = {LABELS.get(r["runtime"], r["runtime"]): r["msgs_per_s"] for r in rows}
        lines += ["", f"{titles[job]}.", "",
                  "| runtime | msgs/s | ratio to passthrough | ratio to JVM passthrough | start-up s "
                  "| output |",
                  "|---|---:|---:|---:|---:|---|"]
        for r in rows:
            ratios = [f"{r['msgs_per_s'] / base[b]:.2f}" if base.get(b) and r["msgs_per_s"] else "-"
                      for b in ("passthrough", "jvm-passthrough")]
            output = (f"{r['emitted_distinct']:,} of {r['expected']:,}, {r['doubled']} doubled, "
                      f"{r['unexpected']} unexpected" if "expected" in r else "-")
            msgs = f"{r['msgs_per_s']:,}" if r["msgs_per_s"] else "-"
            lines.append(f"| {LABELS.get(r['runtime'], r['runtime'])} | {msgs} | {ratios[0]} | {ratios[1]} | "
                         f"{r['startup_s']} | {output} |")
    if kills:
        lines += ["", "| job | runtime | SIGKILLs | restarts | expected keys | lost | doubled | unexpected | "
                      "seconds | restart to next commit, s (median / max) | output hidden after the run, s |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k in kills:
            lines.append(f"| {k['job']} | {k['runtime']} | {k['kills']} | {k['restarts']} | "
                         f"{k['expected']:,} | {k['lost']} | {k['doubled']} | {k['unexpected']} | "
                         f"{k['seconds']} | "
                         f"{k['resumed_median_s']} / {k['resumed_max_s']} | {k['output_hidden_s']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=700_000)
    parser.add_argument("--frontier-records", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runtimes", default="passthrough,confluent")
    parser.add_argument("--kill-runtimes", default="confluent")
    args = parser.parse_args(argv)
    runtimes = [r for r in args.runtimes.split(",") if r]
    kill_runtimes = [r for r in args.kill_runtimes.split(",") if r and args.kills > 0]
    kafka = h.broker()
    work = Path(tempfile.mkdtemp(prefix="runtime-bench-"))
    jobs = make_jobs(kafka, {job_of(r) for r in runtimes + kill_runtimes}, args)
    rates = [measure_rate(r, kafka, jobs[job_of(r)], work) for r in runtimes]
    kills = [kill_test(r, kafka, jobs[job_of(r)], args.kills, work) for r in kill_runtimes]
    meta = {"records": args.records, "distinct": args.distinct, "frontier_records": args.frontier_records,
            "frontier_distinct": len(jobs["url"].expected) if "url" in jobs else None,
            "kills": args.kills, "date": time.strftime("%Y-%m-%d"), "kafka": KAFKA, "partitions": PARTITIONS,
            "command": "python -m bench.runtime_bench " + " ".join(argv or sys.argv[1:])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {"meta": meta, "rates": rates, "kills": kills}
    (RESULTS / "runtime.json").write_text(json.dumps(results, indent=2))
    table = _markdown(rates, kills, meta)
    (RESULTS / "runtime.md").write_text(table)
    print(table)
    exited = [k["runtime"] for k in kills if k["exits"]]
    if exited:  # a worker that exited on its own: its log says why
        print(f"{', '.join(exited)} exited on their own (restarted, as a supervisor would); "
              f"their logs are kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    # Ours and the URL job's dedups must hold (each emits each URL once, read_committed); another
    # runtime's losses are a finding for the decision record, not a failure.
    bad = [r for r in rates + kills
           if r["runtime"] in CHECKED and (r["lost"] or r["doubled"] or r["unexpected"])]
    for each in bad:
        print(f"FAILED: {each['runtime']} lost {each['lost']}, doubled {each['doubled']}, "
              f"unexpected {each['unexpected']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
