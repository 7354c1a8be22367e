"""``content-seen --offline`` of two checkouts on the same pages, in alternating rounds (issue 39).

    python -m bench.offline_ab --other /path/to/checkout [--pages 2000] [--rounds 6]
                               [--corpus ../shared/corpus] [--processes N] [--other-processes N]

``--other`` is a clone built as CI builds it (``make``: its own ``.venv``). The pages are
bench/content_bench.py's (the shared corpus's HTML pages, then again from mirror hosts), written once
to a JSON-lines file; each run is ``python -m streams content-seen --offline`` of one checkout from
that file to a file of its own, timed from start to exit (start-up included, as a user runs it).
Each round runs both, in alternating order (the machine is shared: the order must not favour one).
Every run's output must equal the first run's byte for byte (the same verdicts in the same order),
or the benchmark fails. ``--processes`` sets this checkout's ``analysis_processes`` (unset: its
default), ``--other-processes`` the other's. Prints each round's rates and their ratio, then the
medians and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.content_bench import corpus_records
from testing import harness as h
from testing.neardup_set import CORPUS

SETTING = "STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES"


def offline_run(tree: Path, pages: Path, out: Path, processes: str | None) -> float:
    """Seconds one checkout's offline mode takes over ``pages``, writing its verdicts to ``out``."""
    environ = {name: value for name, value in os.environ.items() if name != SETTING}
    if processes is not None:
        environ[SETTING] = processes
    command = [str(tree / ".venv" / "bin" / "python"), "-m", "streams", "content-seen", "--offline"]
    with pages.open("rb") as stdin, out.open("wb") as stdout:
        start = time.perf_counter()
        subprocess.run(command, stdin=stdin, stdout=stdout, cwd=tree, env=environ, check=True)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--processes", help="this checkout's analysis_processes (unset: its default)")
    parser.add_argument("--other-processes", help="the other's analysis_processes (unset: its default)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="offline-ab-"))
    values, left_out = corpus_records(args.pages, args.corpus)
    pages = work / "pages.jsonl"
    pages.write_bytes(b"".join(value + b"\n" for value in values))
    trees = {"this": (h.PROJECT_ROOT, args.processes), "other": (args.other.resolve(), args.other_processes)}
    print(f"{len(values)} pages ({left_out} corpus pages too large left out); this: {trees['this'][0]} "
          f"analysis_processes={args.processes or 'default'}; other: {trees['other'][0]} "
          f"analysis_processes={args.other_processes or 'default'}", flush=True)
    failed = _rounds(args.rounds, trees, pages, len(values), work)
    if not failed:  # the pages (about 330 MB) go; a differing output stays to be looked at
        shutil.rmtree(work, ignore_errors=True)
    return failed


def _rounds(rounds: int, trees: dict[str, tuple[Path, str | None]], pages: Path, count: int,
            work: Path) -> int:
    rates: dict[str, list[float]] = {"this": [], "other": []}
    reference: bytes | None = None
    for round_ in range(rounds):
        for name in (["this", "other"] if round_ % 2 == 0 else ["other", "this"]):
            tree, processes = trees[name]
            out = work / f"{name}{round_}.jsonl"
            seconds = offline_run(tree, pages, out, processes)
            rates[name].append(round(count / seconds, 1))
            produced = out.read_bytes()
            if reference is None:
                reference = produced
            if produced != reference:
                print(f"round {round_}: {name}'s output differs from the first run's ({out})")
                return 1
            out.unlink()
        print(f"round {round_}: pages/s {{'this': {rates['this'][-1]}, 'other': {rates['other'][-1]}}}; "
              f"this / other {rates['this'][-1] / rates['other'][-1]:.3f}", flush=True)
    medians = {name: statistics.median(found) for name, found in rates.items()}
    produced_lines = (reference or b"").count(b"\n")
    print(f"outputs identical byte for byte in all {2 * rounds} runs ({len(reference or b'')} bytes, "
          f"{produced_lines} lines)")
    print(f"median of {rounds}: {medians}; this / other {medians['this'] / medians['other']:.3f}; "
          f"per-round ratios {[round(a / b, 3) for a, b in zip(rates['this'], rates['other'], strict=True)]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
