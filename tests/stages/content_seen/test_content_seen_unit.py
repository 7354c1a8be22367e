"""content_seen without a broker: the stage's steps on a memory store, settings refusal, the analysis pool."""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.dev import simweb
from streams.errors import ConfigError, RecordRejected, StateError
from streams.pages.analyze import PageAnalysis, analysis_from_json
from streams.pages.decode import Skipped
from streams.runtime import offline
from streams.runtime.offline import LineMessage, OfflineDriver, run_offline
from streams.runtime.store import MemoryStore
from streams.stages.content_seen import buckets, payloads
from streams.stages.content_seen.intake import analyze_value
from streams.stages.content_seen.spec import SPEC
from streams.stages.content_seen.stage import LAYOUT_KEY, ContentSeenSettings, ContentSeenStage
from streams.topics import Topics
from testing.stages import bind

TOPICS = Topics("unit.")
TOPOLOGY = SPEC.topology(TOPICS, "a")


class _Sink:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.lines.extend(line for line in data.split(b"\n") if line)
        return len(data)

    def flush(self) -> None:
        pass


def _verdicts(stage: ContentSeenStage, store: MemoryStore,
              pages: list[simweb.PlantedPage]) -> list[dict[str, Any]]:
    sink = _Sink()
    run_offline(TOPOLOGY, stage, store, [orjson.dumps(page.record) for page in pages],
                out=sink)  # type: ignore[arg-type]
    return [orjson.loads(line) for line in sink.lines]


def test_a_shard_built_with_other_settings_is_refused() -> None:
    store = MemoryStore()
    pages = simweb.crawl(seed=1, articles=2)
    assert len(_verdicts(ContentSeenStage(), store, pages)) == len(pages)
    other = ContentSeenStage(ContentSeenSettings(hamming_threshold=4))
    with pytest.raises(ConfigError, match="built otherwise.*hamming_threshold 3 -> 4"):
        OfflineDriver(TOPOLOGY, other, store)


def test_a_second_offline_run_over_the_same_state_decides_every_line() -> None:
    """Lines count on from the last run over the same store (its input positions are state): a second
    run used to start at line 1 again, behind what the first run's progress had covered, and left
    every compared page waiting for ever (only skipped pages got verdicts)."""
    store = MemoryStore()
    pages = simweb.crawl(seed=1, articles=3)
    first = _verdicts(ContentSeenStage(), store, pages)
    again = _verdicts(ContentSeenStage(), store, pages)
    assert len(first) == len(again) == len(pages)
    compared = [verdict for verdict in again if verdict["verdict"] != "skipped"]
    assert compared and all(verdict["verdict"] == "duplicate" for verdict in compared)


def test_waiting_state_is_gone_once_every_page_is_decided() -> None:
    store = MemoryStore()
    _verdicts(ContentSeenStage(), store, simweb.crawl(seed=4, articles=6))
    kinds = {key[:1] for key, _ in store.items()}
    # buckets, records, payloads, last verdicts, metadata; no page or progress left
    assert kinds <= {b"t", b"s", b"y", b"u", b"m"}, kinds


@pytest.mark.parametrize(("recorded", "named"), [
    (None, "layout 1"),  # recorded the design but no layout: its buckets would be misread as slots
    (b"2", "layout 2"),  # records without sketches: misread as records with them
])
def test_a_shard_in_an_old_layout_is_refused(recorded: bytes | None, named: str) -> None:
    store = MemoryStore()
    pages = simweb.crawl(seed=2, articles=2)
    _verdicts(ContentSeenStage(), store, pages)
    assert store.get(LAYOUT_KEY) == buckets.LAYOUT
    store.apply({LAYOUT_KEY: recorded}, None)
    with pytest.raises(StateError, match=named):
        OfflineDriver(TOPOLOGY, ContentSeenStage(), store)


def test_tables_hold_simhashes_and_records_hold_each_page_once() -> None:
    store = MemoryStore()
    pages = simweb.crawl(seed=3, articles=5)
    verdicts = _verdicts(ContentSeenStage(), store, pages)
    data = dict(store.items())
    slots = [simhash for key, value in data.items() if key[:1] == b"t"
             for simhash in buckets.decode_bucket(value)]
    records = {int.from_bytes(key[1:], "big"): buckets.decode_record(value, int.from_bytes(key[1:], "big"))
               for key, value in data.items() if key[:1] == b"s"}
    assert set(slots) == set(records)  # every slot has its record, every record a slot
    stored_urls = [page.url for record in records.values() for page in record]
    assert len(stored_urls) == len({(page.order, page.url) for r in records.values() for page in r})
    exact = sum(1 for verdict in verdicts if verdict.get("kind") == "exact")
    compared = sum(1 for verdict in verdicts if verdict["verdict"] != "skipped")
    assert len(stored_urls) == compared - exact  # exact copies are not stored again


def test_analysis_processes_give_the_same_routes() -> None:
    pages = simweb.crawl(seed=6, articles=4)
    messages = [LineMessage(TOPICS.fetched_pages, number, orjson.dumps(page.record))
                for number, page in enumerate(pages)]
    messages.append(LineMessage(TOPICS.fetched_pages, len(pages), b'{"url": "https://x.example/"}'))
    _, inline = bind(ContentSeenStage(ContentSeenSettings(analysis_processes=0)), TOPOLOGY, 1)
    pooled, pooled_routes = bind(ContentSeenStage(ContentSeenSettings(analysis_processes=2)), TOPOLOGY, 1)
    text_page = dict(pages[0].record)
    text_page.pop("body_base64", None)
    text_page["body"] = "<html><body><p>A page sent as text, not base64, to the stage.</p></body></html>"
    messages.append(LineMessage(TOPICS.fetched_pages, len(pages) + 1, orjson.dumps(text_page)))
    pooled.services.prepare(messages)
    assert [pooled_routes.route(m) for m in messages] == [inline.route(m) for m in messages]


def test_closing_the_stage_stops_its_analysis_processes() -> None:
    stage = ContentSeenStage(ContentSeenSettings(analysis_processes=2))
    context, _ = bind(stage, TOPOLOGY, 1)
    before = set(multiprocessing.active_children())
    context.services.prepare([LineMessage(TOPICS.fetched_pages, number, orjson.dumps(page.record))
                              for number, page in enumerate(simweb.crawl(seed=6, articles=1))])
    started = set(multiprocessing.active_children()) - before
    assert len(started) == 2
    stage.close()
    assert not any(child.is_alive() for child in started)


def test_analysis_processes_reject_bad_base64_with_the_same_reason() -> None:
    message = LineMessage(TOPICS.fetched_pages, 0, b'{"url": "https://x.example/", "body_base64": "@@@"}')
    other = LineMessage(TOPICS.fetched_pages, 1, orjson.dumps(simweb.crawl(seed=6, articles=1)[0].record))
    pooled, pooled_routes = bind(ContentSeenStage(ContentSeenSettings(analysis_processes=1)), TOPOLOGY, 1)
    pooled.services.prepare([message, other])  # a batch of two: a lone page is analysed in the worker
    reasons = []
    for processors in (pooled_routes, bind(ContentSeenStage(ContentSeenSettings(analysis_processes=0)),
                                           TOPOLOGY, 1)[1]):
        with pytest.raises(RecordRejected) as rejected:
            processors.route(message)
        reasons.append(rejected.value.reason)
    assert reasons == ["schema", "schema"]


def _offline_output(processes: int, lines: Iterable[bytes]) -> bytes:
    out = io.BytesIO()
    run_offline(TOPOLOGY, ContentSeenStage(ContentSeenSettings(analysis_processes=processes)), MemoryStore(),
                lines, out=out, errors_to_stdout=True)
    return out.getvalue()


def test_offline_with_analysis_processes_writes_the_same_lines(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, lines are read a window ahead and analysed in the children: the same lines, in the
    same order, as analysed in the worker; from a list and from a file (read by its descriptor)."""
    pages = simweb.crawl(seed=7, articles=12)  # originals, mirrors, near copies, refetches
    lines = [orjson.dumps(page.record) for page in pages]
    lines[5:5] = [b"", b'{"url": "https://x.example/", "body_base64": "@@@"}', b"not json"]  # rejected, blank
    inline = _offline_output(0, lines)
    assert len(inline.splitlines()) == len(pages) + 2
    monkeypatch.setattr(offline, "WINDOW_LINES", 4)  # many windows, one of a single page (analysed here)
    assert len(lines) % 4 == 1
    for processes in (1, 2):
        assert _offline_output(processes, lines) == inline
    path = tmp_path / "pages.jsonl"
    path.write_bytes(b"\n".join(lines))  # no newline after the last line
    with path.open("rb") as stdin:
        assert _offline_output(2, stdin) == inline


def test_offline_windows_never_wait_for_a_line_while_one_is_undecided() -> None:
    """From a pipe, a window is what can be read now; an empty window comes before any wait, so the
    driver decides what it holds before it blocks (a caller writing a line and waiting for its answer)."""
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as reader:
        os.write(write_end, b"one\ntwo\nthr")
        windows = offline.line_windows(reader, size=64)
        assert next(windows) == [(1, b"one"), (2, b"two")]
        assert next(windows) == []  # nothing more to read now: decide before waiting
        os.write(write_end, b"ee\n")
        assert next(windows) == [(3, b"three")]
        assert next(windows) == []
        os.write(write_end, b"four")
        os.close(write_end)
        assert list(windows) == [[(4, b"four")]]


def test_shards_are_kept_in_plain_tables(tmp_path: Path) -> None:
    """The block tables are read bucket by bucket: the runtime opens the page stage's shards in
    PlainTable format (streams.runtime.rocks_tables), other stages' in block-based tables."""
    from streams.runtime.store import RocksStore
    from streams.stages.revisit.stage import RevisitStage

    pages = ContentSeenStage().store().open(tmp_path / "pages", 8, 64, 64)
    fetches = RevisitStage().store().open(tmp_path / "fetches", 8, 64, 64)
    assert isinstance(pages, RocksStore) and isinstance(fetches, RocksStore)
    assert (pages.table_format, fetches.table_format) == ("plain", "block")
    pages.close()
    fetches.close()


def test_state_of_the_layout_before_payloads_reads_on() -> None:
    """A store written without payload lookups (as before them: no ``y`` or ``v`` keys, heads without
    ``payload``) is read on with them: its pages are found as before, copies of them find no first
    capture, and payloads seen from then on are found. (One driver after the other on one store,
    the input's line numbers going on, as a worker's offsets would.)"""
    store = MemoryStore()
    pages = simweb.crawl(seed=7, articles=3)
    old, new = pages[0], pages[1]

    def copy(page: simweb.PlantedPage, host: str) -> bytes:
        url = f"https://{host}.example/x"
        return orjson.dumps({**page.record, "url": url, "fetched_at": "2030-01-01T00:00:00Z"})

    def decided(driver: OfflineDriver, first: int, values: list[bytes]) -> list[dict[str, Any]]:
        emits = [emit for number, value in enumerate(values, start=first)
                 for emit in driver.decide(driver.message(number, value))]
        return [orjson.loads(emit.value or b"") for emit in emits if emit.topic == TOPICS.page_verdicts]

    without = ContentSeenStage(ContentSeenSettings(payload_digests=False))
    before = decided(OfflineDriver(TOPOLOGY, without, store), 1, [orjson.dumps(old.record)])
    assert before[0]["verdict"] == "unique" and "payload_digest" not in before[0]
    assert {key[:1] for key, _ in store.items()} <= {b"t", b"s", b"u", b"m"}  # no payload ("y")
    after = decided(OfflineDriver(TOPOLOGY, ContentSeenStage(), store), 2,
                    [orjson.dumps(new.record), copy(old, "old-copy"), copy(new, "new-copy")])
    by_url = {verdict["url"]: verdict for verdict in after}
    assert by_url["https://old-copy.example/x"]["duplicate_of"] == old.url  # the old tables still find it
    assert by_url["https://old-copy.example/x"]["first_capture_url"] is None  # its payload was never stored
    assert by_url["https://new-copy.example/x"]["first_capture_url"] == new.url


def test_an_analysis_process_digests_the_payload_as_the_worker_does() -> None:
    """With ``payload_digests`` the analysis processes digest each compared page's payload beside the
    analysis, from the body they decoded (off the worker); a skipped page, or the setting off, none."""
    page = simweb.crawl(seed=1, articles=1)[0].record
    value = orjson.dumps(page)
    on, off = (orjson.dumps({"settings": {}, "max_record_bytes": 1 << 24, "payload_digests": flag})
               for flag in (True, False))
    found = analysis_from_json(analyze_value(on, value))
    assert isinstance(found, PageAnalysis) and found.payload_sha1 == payloads.payload_sha1(page)
    assert analysis_from_json(analyze_value(off, value)) == dataclasses.replace(found, payload_sha1=None)
    skipped = orjson.dumps({**page, "status": 404})
    assert analysis_from_json(analyze_value(on, skipped)) == Skipped("status:404")
    # a skipped page's body is never decoded, in a process as in the worker: bad base64 stays a skip
    broken = orjson.dumps({**{k: v for k, v in page.items() if k != "body"}, "status": 404,
                           "body_base64": "not base64!"})
    assert analysis_from_json(analyze_value(on, broken)) == Skipped("status:404")


def test_verdicts_are_the_same_whether_pages_are_analysed_in_processes_or_in_the_worker() -> None:
    pages = simweb.crawl(seed=5, articles=4)
    pages += pages  # fetched again: byte-identical payloads, each naming its first capture
    verdicts = [_verdicts(ContentSeenStage(ContentSeenSettings(analysis_processes=processes)), MemoryStore(),
                          pages) for processes in (0, 2)]
    assert verdicts[0] == verdicts[1]
    assert any(verdict.get("first_capture_url") for verdict in verdicts[0])
