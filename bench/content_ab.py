"""The page stage of two checkouts, side by side on the same pages (a change's A/B).

    python -m bench.content_ab --other /path/to/checkout [--pages 2000] [--rounds 3] [--processes N]
                               [--corpus ../shared/corpus]

``--other`` is a clone built as CI builds it (``make``: its own ``.venv``, hot path compiled). The
pages are bench/content_bench.py's (the shared corpus's HTML pages, then again from mirror hosts:
every page after the first round is an exact copy of one already seen), written once to one input
topic; each run is one content-seen worker of its own application id reading all of it, so both
checkouts see the same records. Each round runs both in alternating order (this machine is shared:
the order must not favour one). A run ends when its group has committed the input and its internal
topics to their ends, whatever the checkout names them; its rate is the pages over the whole run,
start-up included (a run of a few thousand pages is too short for the steady rate after the first
commit, which ``make bench-content`` reports, to be steady: the first commit comes after one or two
batches of hundreds of pages). Prints each round and the best of each; a speed change is the ratio
of the two bests. Beside the rates, pages per CPU second of the worker
(``getrusage`` of the finished child, start-up included), which other load on a shared machine
disturbs far less: the ratio of the two medians is printed too. It counts the worker alone: its
analysis processes are children of the fork server, whose time it does not see, so compare it only
between runs with no analysis processes (``--processes 0``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench import ab
from bench.content_bench import PARTITIONS, corpus_records
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS


def internal_topics(kafka: Any, prefix: str, app_id: str) -> list[str]:
    """The run's internal topics as the cluster has them (a checkout names its own), changelog aside."""
    stem = f"{prefix}{app_id}.content-seen."
    found = AdminClient(kafka.admin()).list_topics(timeout=30).topics
    return sorted(name for name in found if name.startswith(stem)
                  and not name.endswith((".changelog", ".generations")))


def stage_rate(kafka: Any, prefix: str, total: int, work: Path, app_id: str, tree: Path,
               processes: str | None) -> dict[str, Any]:
    topics = Topics(prefix)
    python = str(tree / ".venv" / "bin" / "python")
    setting = "STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES"
    chosen = ["-u", setting] if processes is None else [f"{setting}={processes}"]  # None: the tree's default
    command = ["env", f"--chdir={tree}", *chosen, f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}",
               "STREAMS_METRICS_ENABLED=false",
               python, "-m", "streams", "content-seen", "--topic-prefix", prefix, "--app-id", app_id,
               "--worker-id", "w0", "--state-dir", str(work / f"state-{app_id}"), "--shards", str(PARTITIONS)]
    group = topics.group(app_id, "content-seen")

    def done() -> bool:
        internal = internal_topics(kafka, prefix, app_id)
        return bool(internal) and all(h.caught_up(kafka, group, topic) for topic in internal)

    def progress() -> int:
        return h.committed_total(kafka, group, topics.fetched_pages, PARTITIONS)

    report = h.run_with_kills(command, progress, total, kills=0, log_path=work / f"{app_id}.log", done=done)
    return {"seconds": round(report.seconds, 1), "pages_per_s": round(total / report.seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", help="analysis processes per worker (unset: each checkout's default)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="content-ab-"))
    prefix = f"{h.fresh_name('contentab')}."
    values, left_out = corpus_records(args.pages, args.corpus)
    h.create_topics(kafka, [Topics(prefix).fetched_pages], PARTITIONS)
    h.produce(kafka, Topics(prefix).fetched_pages, ((None, value) for value in values))
    print(f"{len(values)} pages ({left_out} corpus pages too large left out), analysis_processes "
          f"{args.processes or 'at each checkout' + chr(39) + 's default'}", flush=True)
    trees = {"this": h.PROJECT_ROOT, "other": args.other.resolve()}
    rates: dict[str, list[int]] = {"this": [], "other": []}
    per_cpu_s: dict[str, list[float]] = {"this": [], "other": []}
    for round_ in range(args.rounds):
        for name in (["this", "other"] if round_ % 2 == 0 else ["other", "this"]):
            before = ab.cpu_s()
            run = stage_rate(kafka, prefix, len(values), work, f"{name}{round_}", trees[name], args.processes)
            rates[name].append(run["pages_per_s"])
            per_cpu_s[name].append(round(len(values) / (ab.cpu_s() - before), 1))
        print(ab.round_line(round_, rates, per_cpu_s, "pages"), flush=True)
    print(ab.report(rates, per_cpu_s, args.rounds, "pages"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
