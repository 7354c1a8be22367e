"""``warc-dedup`` beside ``content-seen --offline`` on the same pages, in alternating rounds.

    python -m bench.warc_bench [--pages 400] [--rounds 3] [--corpus ../shared/corpus]

The pages are the shared corpus's HTML (generated ones where it is absent), as two crawls of WARC
records (testing/archive_crawls.py: mirrors, chunked and gzipped bodies, a day-two recrawl with one
byte, one line ending or one word changed in some pages). Each round runs, in alternating order
(the machine is shared: the order must not favour one), from start to exit as a user runs them:

- ``crawl-dedup warc-dedup crawl1.warc.gz crawl2.warc.gz --output OUT --state-dir DIR`` (a fresh
  state directory and output each run): MB/s of WARC read and WARC records/s;
- ``crawl-dedup content-seen --offline`` over the same responses as fetched-page JSON lines (the body
  as the WARC stores it, the WARC-Date as ``fetched_at``): pages/s, and MB/s of the same WARC bytes
  (what the stage takes to decide the pages those WARCs hold).

It asserts its results: every warc-dedup run writes as many revisits as the oracle of
testing/archive_crawls.py says, byte-identical outputs run after run, and one verdict per page.
Prints each round and the medians; writes bench/results/warc.json and .md.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from streams.archives.warc_records import read_records
from testing.archive_crawls import Crawl, expected_revisits, source_pages, two_crawls
from testing.neardup_set import CORPUS

RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = [sys.executable, "-m", "streams"]


def page_lines(crawls: list[Crawl]) -> bytes:
    """The crawls' responses as fetched-page records (the body as stored, content coding and all:
    what a fetcher sends the stage)."""
    lines = []
    for crawl in crawls:
        for response in crawl.responses:
            record = next(read_records(io.BytesIO(response.raw)))
            block = record.block
            body = block[block.index(b"\r\n\r\n") + 4:]
            status = int(block.split(b" ", 2)[1])
            lines.append(orjson.dumps({"url": response.uri, "status": status, "content_type": "text/html",
                                       "body_base64": base64.b64encode(body).decode(),
                                       "fetched_at": response.date, "warc_record_id": response.record_id}))
    return b"\n".join(lines) + b"\n"


def timed(command: list[str], stdin: Path | None = None, stdout: Path | None = None) -> tuple[float, bytes]:
    """Seconds ``command`` takes from start to exit, and what it printed (stdout when not to a file)."""
    with contextlib.ExitStack() as files:
        source = files.enter_context(stdin.open("rb")) if stdin else subprocess.DEVNULL
        sink = files.enter_context(stdout.open("wb")) if stdout else subprocess.PIPE
        began = time.perf_counter()
        done = subprocess.run(command, stdin=source, stdout=sink, stderr=subprocess.PIPE, check=False)
        seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-2000:]}")
    return seconds, done.stdout or b""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args(argv)
    crawls = list(two_crawls(source_pages(args.pages, args.corpus)))
    revisits = sum(e.original is not None for e in expected_revisits(*crawls))
    pages = sum(len(crawl.responses) for crawl in crawls)
    records = sum(len(crawl.records) for crawl in crawls)
    with tempfile.TemporaryDirectory(prefix="warc-bench-") as scratch:
        work = Path(scratch)
        warcs = [work / f"crawl{n}.warc.gz" for n in (1, 2)]
        for path, crawl in zip(warcs, crawls, strict=True):
            path.write_bytes(crawl.warc())
        lines = work / "pages.jsonl"
        lines.write_bytes(page_lines(crawls))
        warc_bytes = sum(path.stat().st_size for path in warcs)
        kind = "corpus" if args.corpus.is_dir() else "generated"
        print(f"{args.pages} source pages ({kind}): {records} WARC records, {pages} responses, "
              f"{warc_bytes / 1e6:.1f} MB of WARC; {revisits} revisits expected")
        rounds: list[dict[str, float]] = []
        outputs: set[bytes] = set()
        for number in range(args.rounds):
            found: dict[str, float] = {}
            order = ["warc", "stage"] if number % 2 == 0 else ["stage", "warc"]
            for which in order:
                if which == "warc":
                    out = work / f"out{number}.warc.gz"
                    seconds, said = timed([*COMMAND, "warc-dedup", *map(str, warcs), "--output", str(out),
                                           "--state-dir", str(work / f"state{number}")])
                    assert f"revisits: {revisits} of {pages} responses" in said.decode(), said.decode()
                    outputs.add(out.read_bytes())
                    found["warc_s"] = seconds
                else:
                    verdicts = work / f"verdicts{number}.jsonl"
                    seconds, _ = timed([*COMMAND, "content-seen", "--offline"], stdin=lines, stdout=verdicts)
                    assert len(verdicts.read_bytes().splitlines()) == pages
                    found["stage_s"] = seconds
            rounds.append(found)
            print(f"round {number + 1}: warc-dedup {warc_bytes / 1e6 / found['warc_s']:.1f} MB/s "
                  f"{records / found['warc_s']:.0f} records/s; content-seen --offline "
                  f"{pages / found['stage_s']:.1f} pages/s {warc_bytes / 1e6 / found['stage_s']:.2f} MB/s; "
                  f"ratio {found['stage_s'] / found['warc_s']:.1f}")
        assert len(outputs) == 1, "warc-dedup's output differs between runs"
    warc_s = statistics.median(r["warc_s"] for r in rounds)
    stage_s = statistics.median(r["stage_s"] for r in rounds)
    result: dict[str, Any] = {
        "command": "python -m bench.warc_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "source_pages": args.pages, "warc_records": records, "responses": pages, "warc_mb": warc_bytes / 1e6,
        "revisits": revisits, "rounds": rounds,
        "warc_dedup": {"seconds": warc_s, "mb_per_s": warc_bytes / 1e6 / warc_s,
                       "records_per_s": records / warc_s},
        "content_seen_offline": {"seconds": stage_s, "pages_per_s": pages / stage_s,
                                 "mb_per_s": warc_bytes / 1e6 / stage_s},
        "ratio_warc_dedup_to_content_seen": stage_s / warc_s,
    }
    print(f"medians: warc-dedup {result['warc_dedup']['mb_per_s']:.1f} MB/s, "
          f"{result['warc_dedup']['records_per_s']:.0f} records/s; content-seen --offline "
          f"{result['content_seen_offline']['pages_per_s']:.1f} pages/s, "
          f"{result['content_seen_offline']['mb_per_s']:.2f} MB/s; warc-dedup is "
          f"{result['ratio_warc_dedup_to_content_seen']:.1f}x as fast on the same pages")
    assert result["ratio_warc_dedup_to_content_seen"] > 1, "warc-dedup reads no text: it should be the faster"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "warc.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "warc.md").write_text(_markdown(result))
    return 0


def _markdown(result: dict[str, Any]) -> str:
    warc, stage = result["warc_dedup"], result["content_seen_offline"]
    ratios = [each["stage_s"] / each["warc_s"] for each in result["rounds"]]
    return "\n".join([
        "# warc-dedup beside content-seen --offline", "",
        f"`{result['command']}`: {result['warc_records']} WARC records ({result['responses']} responses, "
        f"{result['warc_mb']:.1f} MB gzipped) from {result['source_pages']} source pages, "
        f"{result['revisits']} revisits; medians of {len(result['rounds'])} alternating rounds, start to "
        "exit.",
        "", "| command | seconds | MB/s of WARC | records/s |", "|---|---:|---:|---:|",
        f"| warc-dedup | {warc['seconds']:.2f} | {warc['mb_per_s']:.1f} | {warc['records_per_s']:.0f} |",
        f"| content-seen --offline | {stage['seconds']:.2f} | {stage['mb_per_s']:.2f} | "
        f"{stage['pages_per_s']:.1f} (pages) |", "",
        f"Ratio (content-seen's time / warc-dedup's): {result['ratio_warc_dedup_to_content_seen']:.1f} "
        f"of the medians; {min(ratios):.1f} to {max(ratios):.1f} round by round. Absolute figures are from "
        "a shared, noisy 2-core machine; the ratio is the figure to quote.", ""])


if __name__ == "__main__":
    sys.exit(main())
