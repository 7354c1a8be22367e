"""``warc-dedup`` and ``warc-import-cdx`` on files and a real state directory (RocksDB): two crawls
of the shared corpus's pages de-duplicated across runs, the output checked against the oracle of
testing/archive_crawls.py and by ``warcio check``; runs that fail change nothing."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from streams.archives.dedup import DedupSettings
from streams.errors import ConfigError, InputError, StateError
from streams.ops.warc_dedup import open_state, run_dedup, run_import
from testing.archive_crawls import CORPUS, Crawl, check_output, expected_revisits, source_pages, two_crawls

WARCIO = Path(sys.executable).with_name("warcio")


def _dedup_crawls(tmp_path: Path, crawls: list[Crawl], state: Path) -> list[bytes]:
    outputs = []
    for number, crawl in enumerate(crawls, start=1):
        source = tmp_path / f"crawl{number}.warc.gz"
        source.write_bytes(crawl.warc())
        output = tmp_path / f"out{number}.warc.gz"
        run_dedup([source], output, state)
        outputs.append(output.read_bytes())
    return outputs


def _warcio_check(*paths: Path) -> None:
    checked = subprocess.run([str(WARCIO), "check", "-v", *map(str, paths)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "failed" not in checked.stdout


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no shared corpus at {CORPUS}")
def test_two_crawls_of_real_pages_across_runs_with_one_state(tmp_path: Path) -> None:
    """Every byte-identical repeat of an earlier capture a revisit, nothing else changed."""
    crawls = list(two_crawls(source_pages(120)))
    expected = expected_revisits(*crawls)
    revisits = sum(e.original is not None for e in expected)
    across = sum(e.original is not None and e.original.date[:10] != e.response.date[:10] for e in expected)
    assert revisits > 40 and across > 30 and len(expected) - revisits > 100  # the crawls hold every case
    outputs = _dedup_crawls(tmp_path, crawls, tmp_path / "state")
    assert check_output(crawls, outputs) == []
    _warcio_check(tmp_path / "out1.warc.gz", tmp_path / "out2.warc.gz")
    assert sum(len(o) for o in outputs) < 0.8 * sum(len(c.warc()) for c in crawls)


def test_runs_accumulate_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    crawls = list(two_crawls(source_pages(30, tmp_path / "no-corpus")))
    outputs = _dedup_crawls(tmp_path, crawls, tmp_path / "state")
    assert check_output(crawls, outputs) == []
    again = tmp_path / "again.warc.gz"  # crawl 1 again, same state: its captures are not their own revisits
    report = run_dedup([tmp_path / "crawl1.warc.gz"], again, tmp_path / "state")
    assert again.read_bytes() == outputs[0]
    assert report.added == 0 and report.tally["kept:same_capture"] > 0


def test_a_broken_input_writes_nothing_and_leaves_the_state(tmp_path: Path) -> None:
    crawls = list(two_crawls(source_pages(20, tmp_path / "no-corpus")))
    good, broken = tmp_path / "good.warc.gz", tmp_path / "broken.warc.gz"
    good.write_bytes(crawls[0].warc())
    broken.write_bytes(crawls[1].warc()[:-500])
    with pytest.raises(InputError, match="broken.warc.gz"):
        run_dedup([good, broken], tmp_path / "out.warc.gz", tmp_path / "state")
    assert not (tmp_path / "out.warc.gz").exists() and not (tmp_path / "out.warc.gz.partial").exists()
    fresh = run_dedup([good], tmp_path / "out.warc.gz", tmp_path / "state")  # as if the failed run never was
    assert fresh.added == len({r.entity for r in crawls[0].responses if r.entity})
    with pytest.raises(ConfigError, match="never overwritten"):
        run_dedup([good], tmp_path / "out.warc.gz", tmp_path / "state")


def test_an_imported_index_makes_a_new_crawl_revisit_the_archive(tmp_path: Path) -> None:
    first, second = two_crawls(source_pages(30, tmp_path / "no-corpus"))
    lines = [" CDX N b a m s k r M S V g"]
    for response in first.responses:
        stamp = response.date.replace("-", "").replace("T", "").replace(":", "").rstrip("Z")
        lines.append(f"- {stamp} {response.uri} text/html 200 {response.declared.removeprefix('sha1:')} "
                     "- - 1 0 crawl1.warc.gz")
    index = tmp_path / "crawl1.cdx.gz"
    index.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    tally, captures = run_import([index], tmp_path / "state")
    unchunked = [r for r in first.responses if r.entity and not r.chunked]
    assert tally["imported"] + tally["known"] == len(first.responses)
    source = tmp_path / "crawl2.warc.gz"
    source.write_bytes(second.warc())
    report = run_dedup([source], tmp_path / "out2.warc.gz", tmp_path / "state", DedupSettings())
    by_entity = {r.entity: r for r in reversed(unchunked)}
    wanted = sum(1 for r in second.responses if not r.chunked and r.entity in by_entity)
    assert report.tally["revisits"] == wanted > 5
    assert captures == tally["imported"]


def test_the_command_prints_its_summary_and_metrics(tmp_path: Path) -> None:
    first, _ = two_crawls(source_pages(12, tmp_path / "no-corpus"))
    source = tmp_path / "in.warc.gz"
    source.write_bytes(first.warc())
    command = [sys.executable, "-m", "streams", "warc-dedup", str(source),
               "--output", str(tmp_path / "out.warc"), "--state-dir", str(tmp_path / "state"),
               "--metrics-file", str(tmp_path / "run.prom")]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    revisits = sum(e.original is not None for e in expected_revisits(first))
    assert f"revisits: {revisits} of {len(first.responses)} responses" in done.stdout
    metrics = (tmp_path / "run.prom").read_text()
    assert f"crawl_dedup_warc_revisits_total {revisits}.0" in metrics
    assert 'crawl_dedup_warc_records_written_total{type="revisit"}' in metrics
    assert (tmp_path / "out.warc").read_bytes().startswith(b"WARC/1.1\r\n")  # plain, as named
    _warcio_check(tmp_path / "out.warc")


def test_one_state_directory_serves_one_run_at_a_time(tmp_path: Path) -> None:
    held = open_state(tmp_path / "state")
    try:
        with pytest.raises(StateError, match="in use by another run"):
            open_state(tmp_path / "state")
    finally:
        held.close()
    with pytest.raises(ConfigError, match="no such directory"):
        run_dedup([], tmp_path / "missing" / "out.warc.gz", tmp_path / "state")
