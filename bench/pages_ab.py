"""Page analysis alone, two trees side by side (issue 39): pages/s and byte-identical outputs.

    python bench/pages_ab.py speed --trees /tmp/main-39base,. [--rounds 6] [--passes 2]
    python bench/pages_ab.py same --trees /tmp/main-39base,.
    python bench/pages_ab.py profile [--top 30]

Why a script of its own: the acceptance of issue 39 is a ratio of pages/s measured in one run,
alternating with a clone of today's main, on a shared and noisy machine, and "verdicts unchanged"
is a byte-for-byte comparison with that clone. Each tree is run by its own virtualenv's Python
(``<tree>/.venv/bin/python``, whose editable install imports that tree's ``streams``, compiled as
``make`` builds it), this file being passed by path so it imports nothing from either tree but
``streams``.

The pages: every HTML page of ``../shared/corpus`` (``$CRAWL_DEDUP_CORPUS`` when set, as from a
worktree; bench/neardup_set.py's three sets, in the same order) as a fetched-page record (body
in base64, read by :func:`streams.records.decode` as the stage reads it), and both pages of every
ClueWeb pair (``copycat-clueweb/pairs.jsonl``, all labels) as the ``text/plain`` records
bench/clueweb_bench.py makes.

* ``speed``: per round, each tree in turn (the order alternating between rounds) runs ``--passes``
  passes of :func:`streams.pages.analyze.analyze_page` over the corpus's HTML in a fresh process;
  the first pass (``cold``) includes what a process pays once (tables built on first use), the
  best of the others (``warm``) does not. Pages/s by the wall clock and by the process's CPU time
  (steadier on a shared machine, where other jobs take the cores). Prints each round and the
  median of the per-round ratios of every tree to the first.
* ``same``: each tree writes, for every page, ``analyze_page``'s result, ``extract_text`` with the
  full text, ``change_text`` and the changes' fingerprint, token hashes and number masks; the
  lines must be equal. Prints the count identical and the first differences.
* ``profile``: cProfile of one warm pass in this interpreter.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gzip
import hashlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CORPUS = Path(os.environ.get("CRAWL_DEDUP_CORPUS")
              or Path(__file__).resolve().parents[1].parent / "shared" / "corpus")


def corpus_files() -> list[Path]:
    """The HTML pages of the corpus, in bench/neardup_set.py's order."""
    return (sorted((CORPUS / "article-extraction-benchmark" / "html").glob("*.html.gz"))
            + sorted((CORPUS / "readability" / "test" / "test-pages").glob("*/source.html"))
            + sorted((CORPUS / "postlight" / "fixtures").rglob("*.html")))


def html_records() -> list[tuple[str, bytes]]:
    """(name, fetched-page record as JSON) for every HTML page of the corpus."""
    out = []
    for number, path in enumerate(corpus_files()):
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
        record = {"url": f"https://origin.example/page/{number}", "status": 200, "content_type": "text/html",
                  "body_base64": base64.b64encode(raw).decode("ascii"), "fetched_at": "2026-11-01T00:00:00Z"}
        out.append((str(path.relative_to(CORPUS)), json.dumps(record).encode()))
    return out


def clueweb_records() -> list[tuple[str, bytes]]:
    """Both pages of every ClueWeb pair, as bench/clueweb_bench.py's ``text/plain`` records."""
    path = CORPUS / "copycat-clueweb" / "pairs.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for doc, text in zip(row["id"].split("__to__"), (row["a"], row["b"]), strict=True):
            record = {"url": f"https://clueweb.invalid/{doc}", "status": 200,
                      "content_type": "text/plain; charset=utf-8", "body": text}
            out.append((f"clueweb:{row['id']}:{doc}", json.dumps(record).encode()))
    return out


def _decoded(values: list[tuple[str, bytes]]) -> list[tuple[str, Any]]:
    from streams import records
    return [(name, records.decode(records.RecordKind.FETCHED_PAGE, value)) for name, value in values]


def measure(passes: int) -> dict[str, Any]:
    """Pages/s of ``passes`` passes of analyze_page over the corpus's HTML, in this process."""
    from streams.pages.analyze import PageSettings, analyze_page
    pages = _decoded(html_records())
    settings = PageSettings()
    rates, cpu_rates = [], []
    for _ in range(passes):
        began, began_cpu = time.perf_counter(), time.process_time()
        for _, record in pages:
            analyze_page(record, settings)
        rates.append(len(pages) / (time.perf_counter() - began))
        cpu_rates.append(len(pages) / (time.process_time() - began_cpu))
    import streams.records
    return {"pages": len(pages), "rates": rates, "cpu_rates": cpu_rates,
            "compiled": not streams.records.__file__.endswith(".py")}


def outputs() -> list[str]:
    """One line per page: a digest of everything the analysis returns for it (see ``same``)."""
    from streams import records
    from streams.pages.analyze import PageAnalysis, PageSettings, analysis_to_json, analyze_page
    from streams.pages.changes import change_features
    from streams.pages.decode import DecodedPage, decode_page
    from streams.pages.extract import change_text, extract_text
    from streams.pages.features import text_tokens
    settings = PageSettings()
    lines = []
    for name, record in _decoded(html_records() + clueweb_records()):
        found = analyze_page(record, settings)
        parts: list[bytes] = [analysis_to_json(found)]
        if isinstance(found, PageAnalysis):
            parts.append(repr(found).encode())
        decoded = decode_page(records.body_bytes(record), record.get("content_type"),
                              record.get("headers") or {})
        if isinstance(decoded, DecodedPage):
            extracted = extract_text(decoded)
            parts += [repr(extracted).encode(), change_text(decoded).encode()]
            for text in (extracted.main_text, extracted.full_text or ""):
                tokens, numbers = text_tokens(text)
                parts += [tokens.tobytes(), numbers.tobytes()]
        parts.append(repr(change_features(record, settings)).encode())
        lines.append(f"{name}\t{hashlib.blake2b(b'|'.join(parts), digest_size=16).hexdigest()}")
    return lines


def _in_tree(tree: Path, command: str, *args: str) -> str:
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), __file__, command, *args], capture_output=True, text=True,
                          check=False, cwd=tree)
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr}")
    return done.stdout


def speed(trees: list[Path], rounds: int, passes: int) -> None:
    results: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for number in range(rounds):
        order = trees if number % 2 == 0 else trees[::-1]
        for tree in order:
            row = json.loads(_in_tree(tree, "_measure", str(passes)))
            results[tree].append(row)
            print(f"round {number + 1} {tree}: wall " + ", ".join(f"{rate:.1f}" for rate in row["rates"])
                  + "; CPU " + ", ".join(f"{rate:.1f}" for rate in row["cpu_rates"])
                  + f" pages/s ({row['pages']} pages, compiled={row['compiled']})", flush=True)
    base = trees[0]
    pick: dict[str, Any] = {"cold": lambda rates: rates[0],
                            "warm, best pass": lambda rates: max(rates[1:] or rates)}
    for clock in ("rates", "cpu_rates"):
        for which, chosen in pick.items():
            for tree in trees[1:]:
                ratios = [chosen(mine[clock]) / chosen(theirs[clock])
                          for mine, theirs in zip(results[tree], results[base], strict=True)]
                medians = [statistics.median(chosen(row[clock]) for row in results[t]) for t in (base, tree)]
                listed = ", ".join(f"{ratio:.2f}" for ratio in ratios)
                print(f"{'wall' if clock == 'rates' else 'CPU'} {which}: {tree} / {base}: median of "
                      f"per-round ratios {statistics.median(ratios):.2f} (rounds {listed}); "
                      f"medians {medians[1]:.1f} vs {medians[0]:.1f} pages/s")


def same(trees: list[Path]) -> int:
    lines = {tree: _in_tree(tree, "_outputs").splitlines() for tree in trees}
    base = lines[trees[0]]
    failed = 0
    for tree in trees[1:]:
        mine = lines[tree]
        if len(mine) != len(base):
            print(f"{tree}: {len(mine)} pages, {len(base)} in {trees[0]}")
            failed = 1
        differ = [b.split("\t")[0] for a, b in zip(mine, base, strict=False) if a != b]
        print(f"{tree}: {len(base) - len(differ)} of {len(base)} pages identical to {trees[0]}")
        for name in differ[:20]:
            print(f"  differs: {name}")
        failed |= bool(differ)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("speed", "same", "profile", "_measure", "_outputs"))
    parser.add_argument("measure_passes", nargs="?", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--trees", default="/tmp/main-39base,.")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--passes", type=int, default=2, help="passes over the pages per process (speed)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"the shared corpus is not at {CORPUS}: nothing to measure", file=sys.stderr)
        return 0
    trees = [Path(tree).resolve() for tree in args.trees.split(",")]
    if args.command == "_measure":
        print(json.dumps(measure(args.measure_passes)))
    elif args.command == "_outputs":
        print("\n".join(outputs()))
    elif args.command == "speed":
        speed(trees, args.rounds, args.passes)
    elif args.command == "same":
        return same(trees)
    else:
        measure(1)
        profiler = cProfile.Profile()
        profiler.runcall(measure, 1)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
