"""One content-seen worker with default settings through Kafka against the page analysis alone, on
the same pages in the same run, in alternating rounds (issue 39's acceptance: >= 0.9).

    python -m bench.content_default [--pages 2000] [--rounds 3] [--corpus ../shared/corpus]

The pages are bench/content_bench.py's (the shared corpus's HTML pages, then again from mirror
hosts). Each round measures, in alternating order, one worker reading all of them from a topic of
its own with no setting changed (``analysis_processes`` at its default, ``auto``), at its steady
rate after its first commit (bench/content_bench.py's measure), and the analysis alone (decode,
main text, SimHash and sketch of each page in this process, one core). Prints each round's rates
and ratio, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.content_bench import _analysis_rate, _kafka_rate, corpus_records
from streams.runtime.cores import this_process_cores
from streams.stages.content_seen.cores import analysis_processes
from testing import harness as h
from testing.neardup_set import CORPUS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="content-default-"))
    values, left_out = corpus_records(args.pages, args.corpus)
    print(f"{len(values)} pages ({left_out} corpus pages too large left out); {this_process_cores()} usable "
          f"cores: analysis_processes auto = {analysis_processes('auto')}", flush=True)
    rates: dict[str, list[float]] = {"kafka": [], "analysis": []}
    for round_ in range(args.rounds):
        runs: dict[str, dict[str, Any]] = {}
        for name in (["kafka", "analysis"] if round_ % 2 == 0 else ["analysis", "kafka"]):
            kafka_run = name == "kafka"
            runs[name] = _kafka_rate(kafka, values, work, "auto") if kafka_run else _analysis_rate(values)
            rates[name].append(runs[name]["pages_per_s"])
        print(f"round {round_}: pages/s kafka (default settings) {rates['kafka'][-1]} (then "
              f"{runs['kafka']['stop_s']} s to stop), analysis only {rates['analysis'][-1]}; ratio "
              f"{rates['kafka'][-1] / rates['analysis'][-1]:.3f}", flush=True)
    medians = {name: statistics.median(found) for name, found in rates.items()}
    ratios = [round(a / b, 3) for a, b in zip(rates["kafka"], rates["analysis"], strict=True)]
    ratio = medians["kafka"] / medians["analysis"]
    print(f"median of {args.rounds}: {medians}; kafka / analysis {ratio:.3f}; per-round ratios {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
