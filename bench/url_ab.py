"""The URL stage of two checkouts, side by side on one frontier (a change's A/B).

    python -m bench.url_ab --other /path/to/checkout [--records 2000000] [--rounds 3]
    python -m bench.url_ab --other-python /path/to/venv/bin/python    # an installed wheel

``--other`` is a clone built as CI builds it (``make``: its own ``.venv``, hot path compiled);
``--other-python`` an interpreter with the package installed (from a wheel), run from an empty
directory so that no checkout is importable. Each
round runs both stages on the same frontier in alternating order (this machine is shared: the
order must not favour one), then the one-hop passthrough, the same yardstick as ``make bench-url``.
Prints each round and the best round of each; a speed change is the ratio of the two bests. Beside
the rates, the worker's CPU time (``getrusage`` of the finished child: its process and librdkafka's
threads, start-up included) gives URLs per CPU second, which other load on a shared machine
disturbs far less than the wall-clock rate: the ratio of the two medians is printed too.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import ab
from bench.frontier_gen import frontier
from bench.url_bench import PARTITIONS, passthrough_rate, stage_rate
from streams.topics import Topics
from testing import harness as h


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    other = parser.add_mutually_exclusive_group(required=True)
    other.add_argument("--other", type=Path, help="the checkout to compare with")
    other.add_argument("--other-python", help="an interpreter with the package installed, to compare with")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kafka, work = h.broker(), Path(tempfile.mkdtemp(prefix="url-ab-"))
    prefix = f"{h.fresh_name('urlab')}."
    source = Topics(prefix).frontier
    h.create_topics(kafka, [source], PARTITIONS)
    lines, _distinct = frontier(args.records)
    h.produce(kafka, source, ((None, value) for value in lines))
    trees = {"this": h.PROJECT_ROOT, "other": args.other.resolve() if args.other else work}
    pythons = {"this": None, "other": args.other_python}
    rates: dict[str, list[int]] = {"this": [], "other": [], "passthrough, 1 hop": []}
    per_cpu_s: dict[str, list[int]] = {"this": [], "other": []}
    for round_ in range(args.rounds):
        for name in (["this", "other"] if round_ % 2 == 0 else ["other", "this"]):
            before = ab.cpu_s()
            run = stage_rate(kafka, prefix, args.records, work, f"{name}{round_}", tree=trees[name],
                             python=pythons[name])
            rates[name].append(run["urls_per_s"])
            per_cpu_s[name].append(round(args.records / (ab.cpu_s() - before)))
        yardstick = passthrough_rate(kafka, source, args.records, work, hops=1)
        rates["passthrough, 1 hop"].append(yardstick["urls_per_s"])
        print(ab.round_line(round_, rates, per_cpu_s, "URLs"), flush=True)
    print(ab.report(rates, per_cpu_s, args.rounds, "URLs"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
