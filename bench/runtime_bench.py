"""Runtime benchmark (decision 0001): the "emit each key once" processor on this project's
confluent-kafka runtime (``confluent``) and on quixstreams (``quix``, exactly-once, RocksDB state)
beside a raw passthrough, on one broker and one input; then each runtime SIGKILLed at random points
of the stream and restarted, output read with read_committed.

    python -m bench.runtime_bench [--records 1000000] [--distinct 700000] [--kills 20]
                                  [--runtimes passthrough,confluent,quix]
                                  [--kill-runtimes confluent,quix]

``quix`` runs in the virtualenv ``.venv-quix`` (``make bench-runtime`` makes it: quixstreams needs
an older confluent-kafka than the project's, ``bench/runtimes/quix-requirements.txt``).

Writes ``bench/results/runtime.json`` and ``bench/results/runtime.md`` and prints the table.
The faust-streaming implementation it was compared with (``--runtimes ...,faust``) was removed by
the decision; docs/decisions/0001-stream-runtime.md names the commit that still has it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.runtime.kafka_io import KafkaConfig
from testing import harness as h

RESULTS = h.PROJECT_ROOT / "bench" / "results"
PARTITIONS = 4
PYTHON = sys.executable
QUIX_PYTHON = h.PROJECT_ROOT / ".venv-quix" / "bin" / "python"


def _command(runtime: str, kafka: KafkaConfig, source: str, sink: str, group: str,
             state_dir: Path) -> tuple[list[str], str]:
    """The worker command and the consumer group whose commits measure its progress."""
    if runtime == "passthrough":
        return [PYTHON, "-m", "bench.runtimes.passthrough", "--bootstrap", kafka.bootstrap_servers,
                "--input", source, "--output", sink, "--group", group], group
    if runtime == "confluent":
        return [PYTHON, "-m", "streams", "first-seen", "--input", source, "--output", sink,
                "--app-id", group, "--worker-id", "w0", "--state-dir", str(state_dir),
                "--topic-prefix", f"{group}."], f"{group}.{group}.first-seen"
    if runtime == "quix":
        if not QUIX_PYTHON.exists():
            raise SystemExit(f"{QUIX_PYTHON} is missing: run 'make bench-runtime' (or make .venv-quix)")
        return [str(QUIX_PYTHON), "bench/runtimes/quix_first_seen.py", "--bootstrap",
                kafka.bootstrap_servers, "--input", source, "--output", sink, "--group", group,
                "--state-dir", str(state_dir)], group
    raise ValueError(runtime)


def _progress(kafka: KafkaConfig, group: str, topic: str) -> Callable[[], int]:
    return lambda: h.committed_total(kafka, group, topic, PARTITIONS)


def measure_rate(runtime: str, kafka: KafkaConfig, source: str, total: int, work: Path) -> dict[str, Any]:
    """Messages/s over the steady part of a run: from the first committed progress to the end."""
    sink, group = h.fresh_name(f"out-{runtime}"), h.fresh_name(f"g-{runtime}")
    h.create_topics(kafka, [sink], PARTITIONS)
    command, progress_group = _command(runtime, kafka, source, sink, group, work / f"rate-{runtime}")
    progress = _progress(kafka, progress_group, source)
    began = time.monotonic()
    report = h.run_with_kills(command, progress, total, kills=0, log_path=work / f"rate-{runtime}.log")
    steady_s = report.seconds - (report.first_progress_at or 0.0)
    steady_records = total - report.first_progress_records
    return {
        "runtime": runtime, "records": total, "wall_s": round(time.monotonic() - began, 2),
        "startup_s": round(report.first_progress_at or 0.0, 2),
        "msgs_per_s": round(steady_records / steady_s) if steady_s > 0 else None,
    }


def kill_test(runtime: str, kafka: KafkaConfig, source: str, total: int, expected: set[bytes],
              kills: int, work: Path) -> dict[str, Any]:
    sink, group = h.fresh_name(f"kill-{runtime}"), h.fresh_name(f"gk-{runtime}")
    h.create_topics(kafka, [sink], PARTITIONS)
    command, progress_group = _command(runtime, kafka, source, sink, group, work / f"kill-{runtime}")
    progress = _progress(kafka, progress_group, source)
    report = h.run_with_kills(command, progress, total, kills=kills, log_path=work / f"kill-{runtime}.log")
    # A killed worker's open transaction hides what was committed after it from read_committed
    # readers until it is fenced or aborted: read once none is open (the wait is reported).
    hidden_s = h.seconds_until_settled(kafka, sink)
    counts = h.read_all(kafka, sink)
    resumed = sorted(report.resumed_after_s)
    return {"runtime": runtime, "kills": report.kills, "restarts": report.restarts,
            "seconds": round(report.seconds, 1), "output_hidden_s": round(hidden_s, 1),
            "resumed_after_s": report.resumed_after_s,
            "resumed_median_s": resumed[len(resumed) // 2] if resumed else None,
            "resumed_max_s": resumed[-1] if resumed else None, **h.verdict(expected, counts)}


def _markdown(rates: list[dict[str, Any]], kills: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    base = next((r["msgs_per_s"] for r in rates if r["runtime"] == "passthrough"), None)
    lines = [f"Runtime benchmark, {meta['records']:,} records ({meta['distinct']:,} distinct keys), "
             f"{PARTITIONS} partitions, Kafka {meta['kafka']}, one run ({meta['date']}).", "",
             "| runtime | msgs/s | ratio to passthrough | start-up s |", "|---|---:|---:|---:|"]
    for r in rates:
        ratio = f"{r['msgs_per_s'] / base:.2f}" if base and r["msgs_per_s"] else "-"
        lines.append(f"| {r['runtime']} | {r['msgs_per_s']:,} | {ratio} | {r['startup_s']} |")
    if kills:
        lines += ["", "| runtime | SIGKILLs | restarts | expected keys | lost | doubled | seconds | "
                      "restart to next commit, s (median / max) | output hidden after the run, s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k in kills:
            lines.append(f"| {k['runtime']} | {k['kills']} | {k['restarts']} | {k['expected']:,} | "
                         f"{k['lost']} | {k['doubled']} | {k['seconds']} | "
                         f"{k['resumed_median_s']} / {k['resumed_max_s']} | {k['output_hidden_s']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=700_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runtimes", default="passthrough,confluent")
    parser.add_argument("--kill-runtimes", default="confluent")
    args = parser.parse_args(argv)
    kafka = h.broker()
    work = Path(tempfile.mkdtemp(prefix="runtime-bench-"))
    keys = h.keyed_stream(args.distinct, args.records)
    source = h.fresh_name("bench-in")
    h.create_topics(kafka, [source], PARTITIONS)
    h.produce(kafka, source, ((key, key) for key in keys))
    rates = [measure_rate(r, kafka, source, args.records, work) for r in args.runtimes.split(",") if r]
    expected = set(keys)
    kills = [kill_test(r, kafka, source, args.records, expected, args.kills, work)
             for r in args.kill_runtimes.split(",") if r and args.kills > 0]
    meta = {"records": args.records, "distinct": args.distinct, "kills": args.kills,
            "date": time.strftime("%Y-%m-%d"), "kafka": "4.1.2", "partitions": PARTITIONS,
            "command": "python -m bench.runtime_bench " + " ".join(argv or sys.argv[1:])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {"meta": meta, "rates": rates, "kills": kills}
    (RESULTS / "runtime.json").write_text(json.dumps(results, indent=2))
    table = _markdown(rates, kills, meta)
    (RESULTS / "runtime.md").write_text(table)
    print(table)
    shutil.rmtree(work, ignore_errors=True)
    # Ours must hold; another runtime's losses are a finding for the decision record, not a failure.
    bad = [k for k in kills if k["runtime"] == "confluent" and (k["lost"] or k["doubled"] or k["unexpected"])]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
