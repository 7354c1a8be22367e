"""``crawl-dedup warc-dedup`` and ``crawl-dedup warc-import-cdx``: web archives de-duplicated offline.

``warc-dedup IN.warc[.gz]... --output OUT.warc[.gz] --state-dir DIR`` writes every record of the
inputs again, in order, each response whose payload an earlier capture had as a revisit record
(:mod:`streams.archives.dedup` decides, :mod:`streams.archives.revisit` writes it). The first
captures are kept in ``DIR`` (RocksDB, through the project's store interface,
:mod:`streams.runtime.store`), so runs accumulate: a crawl is de-duplicated against every earlier
run's output. ``warc-import-cdx INDEX.cdx[j][.gz]... --state-dir DIR`` puts an existing archive's
captures into the same state from its index, without reading its WARCs.

A run is all or nothing, because a capture the state names must be in an archive: the output is
written under ``OUT.partial``, synced, and renamed to ``OUT``; only then are the run's new first
captures written to the state, in one batch. A run that fails (a broken input, a full disk, a kill)
leaves the state as it was and no ``OUT``. (A kill between the rename and the state's write leaves
an output whose captures the state does not know: later copies of them stay responses, nothing is
lost.) An existing ``OUT`` is never overwritten. The run's new captures wait in memory until then,
about 300 bytes each.

The summary (stdout) gives records in and out by type, revisits, bytes saved, the reasons responses
stayed responses, and the rate; ``--metrics-file`` writes the same as Prometheus counters in the
text format, for node_exporter's textfile collector (a batch job has no endpoint to scrape).
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson
from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from streams.archives.cdx import Indexed, index_lines
from streams.archives.dedup import Deduplicator, DedupSettings, capture_key
from streams.archives.revisit import Capture
from streams.archives.warc_records import GZIP_MAGIC, MalformedWarc, RecordWriter, read_records
from streams.errors import ConfigError, InputError, StateError
from streams.ops.replay import grouped
from streams.runtime.api import PartitionStore
from streams.runtime.extras import RocksStore

STORE_DIR: Final = "warc-dedup"
LAYOUT_META: Final = "warc_dedup_layout"
LAYOUT: Final = b"1"
CAPTURES_META: Final = "warc_dedup_captures"
KEY_PREFIX: Final = b"c"
IMPORT_BATCH: Final = 100_000  # captures an import writes at a time


# --- the state ---------------------------------------------------------------------------------------


def open_state(state_dir: Path) -> RocksStore:
    """The first-capture store under ``state_dir`` (created on first use); a directory holding
    another kind of state, or one another run has open, is refused."""
    try:
        store = RocksStore(state_dir / STORE_DIR)
    except StateError:
        raise
    except Exception as error:  # rocksdict raises plain exceptions; a second run finds the lock taken
        if "lock" in str(error).lower():
            raise StateError(f"{state_dir / STORE_DIR} is in use by another run (RocksDB's lock): runs "
                             "with one state directory go one after the other") from error
        raise
    layout = store.get_meta(LAYOUT_META)
    if layout is None:
        if next(store.items(), None) is not None:
            store.close()
            raise StateError(f"{state_dir / STORE_DIR} holds state that is not warc-dedup's")
        store.set_meta(LAYOUT_META, LAYOUT)
    elif layout != LAYOUT:
        store.close()
        raise StateError(f"{state_dir / STORE_DIR} holds warc-dedup state in layout {layout!r}, this version "
                         f"reads {LAYOUT!r}")
    return store


class StateIndex:
    """A :class:`streams.archives.dedup.CaptureIndex` over a store: new captures wait in memory
    until :meth:`commit` writes them in one batch."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self._new: dict[bytes, Capture] = {}

    def get(self, key: bytes) -> Capture | None:
        found = self._new.get(key)
        if found is not None:
            return found
        raw = self._store.get(KEY_PREFIX + key)
        return None if raw is None else decode_capture(raw)

    def put(self, key: bytes, capture: Capture) -> None:
        self._new[key] = capture

    def commit(self) -> int:
        """Write the new captures; how many."""
        added = len(self._new)
        if added:
            writes = {KEY_PREFIX + key: encode_capture(capture) for key, capture in self._new.items()}
            self._store.apply(writes, None)
            self._store.set_meta(CAPTURES_META, str(self.captures() + added).encode())
            self._new.clear()
        return added

    def captures(self) -> int:
        """First captures written to the store so far (all runs and imports)."""
        return int(self._store.get_meta(CAPTURES_META) or b"0")


def encode_capture(capture: Capture) -> bytes:
    return orjson.dumps({"uri": capture.uri, "date": capture.date, "record_id": capture.record_id,
                         "digest": capture.digest})


def decode_capture(raw: bytes) -> Capture:
    found = orjson.loads(raw)
    return Capture(found["uri"], found["date"], found["record_id"], found["digest"])


# --- warc-dedup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What a run did: the tally (:class:`streams.archives.dedup.Deduplicator`), file sizes,
    captures added to the state and in it, seconds."""

    tally: Counter[str]
    files: int
    bytes_read: int
    bytes_written: int
    added: int
    captures: int
    seconds: float


def run_dedup(inputs: Sequence[Path], output: Path, state_dir: Path,
              settings: DedupSettings | None = None) -> Report:
    """De-duplicate ``inputs`` into ``output`` against the state in ``state_dir`` (module docstring)."""
    _check_paths(inputs, output)
    began = time.monotonic()
    store = open_state(state_dir)
    try:
        index = StateIndex(store)
        dedup = Deduplicator(index, settings)
        written = _write_output(inputs, output, dedup)
        added = index.commit()
        captures = index.captures()
    finally:
        store.close()
    bytes_read = sum(path.stat().st_size for path in inputs)
    return Report(dedup.tally, len(inputs), bytes_read, written, added, captures, time.monotonic() - began)


def _check_paths(inputs: Sequence[Path], output: Path) -> None:
    for path in inputs:
        if not path.is_file():
            raise ConfigError(f"{path}: no such file")
    if output.exists():
        raise ConfigError(f"{output} exists: an archive is never overwritten; name another output")
    if not output.parent.is_dir():
        raise ConfigError(f"{output.parent}: no such directory for the output")
    if not output.name.endswith((".warc", ".warc.gz")):
        raise ConfigError(f"{output}: the output must end in .warc.gz (gzipped per record) or .warc")


def _write_output(inputs: Sequence[Path], output: Path, dedup: Deduplicator) -> int:
    """Every record of ``inputs`` through ``dedup`` into ``output``, renamed into place once synced;
    the bytes written."""
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("xb") as out:
            writer = RecordWriter(out, gzipped=output.name.endswith(".gz"))
            for path in inputs:
                with path.open("rb") as stream:
                    try:
                        for record in read_records(stream):
                            dedup.process(record, writer.write, writer.write_raw)
                    except (MalformedWarc, zlib.error, EOFError) as error:
                        raise InputError(f"{path}: not a WARC from {error}; nothing was written, the "
                                         "state is unchanged") from error
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, output)
        _sync_dir(output.parent)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return writer.bytes_written


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def summary(report: Report, output: Path) -> str:
    """What an operator reads after a run (the module docstring lists it)."""
    tally, seconds = report.tally, max(report.seconds, 1e-9)
    records_in = sum(n for name, n in tally.items() if name.startswith("in:"))
    responses = tally["in:response"]
    return "\n".join([
        f"warc-dedup: {report.files} file(s), {records_in} records in {report.seconds:.1f} s "
        f"({report.bytes_read / 1e6 / seconds:.1f} MB/s of WARC read, {records_in / seconds:.0f} records/s)",
        f"records in: {grouped(tally, 'in:')}",
        f"records out: {grouped(tally, 'out:')} -> {output}",
        f"revisits: {tally['revisits']} of {responses} responses; payload bytes saved "
        f"{tally['bytes_saved'] / 1e6:.2f} MB of {tally['bytes_in'] / 1e6:.2f} MB uncompressed; files "
        f"{report.bytes_read / 1e6:.2f} MB -> {report.bytes_written / 1e6:.2f} MB",
        f"responses kept: {grouped(tally, 'kept:')}",
        f"state: {report.added} first captures added, {report.captures} in all",
    ])


class _ReportCollector(Collector):
    """A run's figures as Prometheus counters (the names the README lists)."""

    def __init__(self, report: Report) -> None:
        self._report = report

    def collect(self) -> Iterator[CounterMetricFamily]:
        tally, report = self._report.tally, self._report
        by_type = {"in": CounterMetricFamily("crawl_dedup_warc_records_read", "WARC records read",
                                             labels=["type"]),
                   "out": CounterMetricFamily("crawl_dedup_warc_records_written", "WARC records written",
                                              labels=["type"])}
        kept = CounterMetricFamily("crawl_dedup_warc_responses_kept", "Responses written as responses, "
                                   "by why", labels=["reason"])
        for name, count in sorted(tally.items()):
            side, _, label = name.partition(":")
            if side in by_type:
                by_type[side].add_metric([label], count)
            elif side == "kept":
                kept.add_metric([label], count)
        yield from by_type.values()
        yield kept
        plain = {"revisits": ("crawl_dedup_warc_revisits", "Revisit records written", tally["revisits"]),
                 "saved": ("crawl_dedup_warc_saved_bytes", "Uncompressed bytes the revisits saved",
                           tally["bytes_saved"]),
                 "read": ("crawl_dedup_warc_read_bytes", "Bytes of WARC files read", report.bytes_read),
                 "written": ("crawl_dedup_warc_written_bytes", "Bytes of WARC written", report.bytes_written),
                 "seconds": ("crawl_dedup_warc_run_seconds", "Seconds the run took", report.seconds)}
        for name, help_text, value in plain.values():
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], value)
            yield family


def write_metrics(report: Report, path: Path) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(report))
    write_to_textfile(str(path), registry)


def run(args: argparse.Namespace) -> int:
    """The ``warc-dedup`` command."""
    report = run_dedup([Path(name) for name in args.inputs], Path(args.output), Path(args.state_dir),
                       DedupSettings(min_payload_bytes=args.min_payload_bytes))
    print(summary(report, Path(args.output)), flush=True)
    if args.metrics_file is not None:
        write_metrics(report, Path(args.metrics_file))
    return 0


# --- warc-import-cdx -------------------------------------------------------------------------------


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    head = stream.read(2)
    stream.seek(0)
    if head != GZIP_MAGIC:
        yield from stream
        return
    with gzip.open(stream) as unpacked:
        yield from unpacked


def run_import(indexes: Sequence[Path], state_dir: Path) -> tuple[Counter[str], int]:
    """Every capture ``indexes`` name into the state (a payload already there keeps its capture);
    the tally (``imported``, ``known``, ``left_out:<reason>``) and the captures in the state."""
    for path in indexes:
        if not path.is_file():
            raise ConfigError(f"{path}: no such file")
    tally: Counter[str] = Counter()
    store = open_state(state_dir)
    try:
        index = StateIndex(store)
        for path in indexes:
            with path.open("rb") as stream:
                for found in index_lines(_lines(stream)):
                    if not isinstance(found, Indexed):
                        tally[f"left_out:{found.reason}"] += 1
                        continue
                    key = capture_key(found.sha1, chunked=False)
                    if index.get(key) is not None:
                        tally["known"] += 1
                        continue
                    index.put(key, found.capture)
                    tally["imported"] += 1
                    if tally["imported"] % IMPORT_BATCH == 0:
                        index.commit()
        index.commit()
        return tally, index.captures()
    finally:
        store.close()


def run_import_command(args: argparse.Namespace) -> int:
    tally, captures = run_import([Path(name) for name in args.indexes], Path(args.state_dir))
    left_out = grouped(tally, "left_out:")
    print(f"warc-import-cdx: {tally['imported']} captures imported, {tally['known']} payloads known already; "
          f"left out: {left_out}; state: {captures} first captures in all", flush=True)
    return 0


def add_parser(commands: Any) -> None:
    """Register ``warc-dedup`` and ``warc-import-cdx`` on the CLI."""
    command = commands.add_parser(
        "warc-dedup", help="rewrite WARCs, identical payloads as revisits",
        description="Reads WARC files and writes every record again, in order, except that each "
                    "response whose payload is byte-identical to an earlier capture's (in these files, "
                    "an earlier run's with the same --state-dir, or an imported index; any URL) becomes "
                    "a WARC/1.1 revisit record (profile identical-payload-digest) that refers to it. "
                    "Near-duplicates stay responses. All or nothing: the output appears, and the state "
                    "learns the run's captures, only once every input was read. Prints a summary. "
                    "docs/web-archives.md has the details.")
    command.add_argument("inputs", nargs="+", metavar="IN.warc[.gz]", help="WARC files, plain or gzipped")
    command.add_argument("--output", required=True, metavar="OUT.warc.gz",
                         help="the WARC to write (.warc.gz: a gzip member per record; .warc: plain); "
                              "must not exist")
    command.add_argument("--state-dir", required=True, type=Path, metavar="DIR",
                         help="the first captures of earlier runs and imports (RocksDB, created on "
                              "first use)")
    command.add_argument("--min-payload-bytes", type=int, default=1, metavar="N",
                         help="smaller payloads stay responses (default 1: only empty ones)")
    command.add_argument("--metrics-file", type=Path, default=None, metavar="FILE",
                         help="also write the run's counters here in Prometheus' text format (for "
                              "node_exporter's textfile collector)")
    command.set_defaults(handler=run)
    index = commands.add_parser(
        "warc-import-cdx", help="learn an archive's captures from its CDX(J) index",
        description="Reads CDX (space-separated, with or without a ' CDX' legend) or CDXJ index files, "
                    "plain or gzipped, and puts each capture they name (URL, timestamp, SHA-1 payload "
                    "digest) into the state warc-dedup reads, so a new crawl is de-duplicated against "
                    "the archive without reading its WARCs. Revisit entries and lines without a SHA-1 "
                    "digest are left out and counted.")
    index.add_argument("indexes", nargs="+", metavar="INDEX.cdx[j][.gz]")
    index.add_argument("--state-dir", required=True, type=Path, metavar="DIR", help="as warc-dedup's")
    index.set_defaults(handler=run_import_command)
