"""replay and tail, the pure parts: WARC records to topic records, links, JSON lines, sizes, rendering."""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import brotli
import orjson
import pytest

from streams import cli, records
from streams.ops import replay, tail, warc
from streams.ops.warc import FETCHED_PAGES, FRONTIER, Out, Skip
from streams.records import RecordKind
from streams.topics import Topics
from testing.warcs import chunked, html_page, http_response, response, warc_file, warc_record

PAGE = "https://example.com/docs/a.html"


def _items(data: bytes, max_links: int = 1000) -> list[Out | Skip]:
    return list(warc.warc_items(io.BytesIO(data), max_links))


def _page(item: Out | Skip) -> dict[str, Any]:
    assert isinstance(item, Out) and item.topic == FETCHED_PAGES, item
    return records.decode(RecordKind.FETCHED_PAGE, item.value)


# --- WARC records ----------------------------------------------------------------------------------

ARTICLE = html_page("Title", "Some text.", ("/b.html", "c.html#part", "mailto:x@example.com"))
GZ_BODY = gzip.compress(ARTICLE)
CRAWL = [
    warc_record("warcinfo", None, b"software: hand\r\n", content_type="application/warc-fields"),
    warc_record("request", PAGE, b"GET /docs/a.html HTTP/1.1\r\nHost: example.com\r\n\r\n",
                content_type="application/http; msgtype=request"),
    response(PAGE, ARTICLE, date="2024-05-01T12:00:00.5Z",
             headers=("Content-Type: text/html; charset=utf-8", "Set-Cookie: a=1", "Set-Cookie: b=2",
                      "ETag: \"x1\"")),
    response("https://example.com/gone", b"not here", status="404 Not Found",
             headers=("Content-Type: text/html", )),
    response("https://example.com/z.html", chunked(GZ_BODY),
             headers=("Content-Type: text/html", "Transfer-Encoding: chunked", "Content-Encoding: gzip")),
    warc_record("revisit", "https://example.com/same", http_response(b"", "304 Not Modified", ()),
                extra="WARC-Profile: http://netpreserve.org/warc/1.1/revisit/server-not-modified"),
    warc_record("revisit", "https://example.com/copy", http_response(b"", "200 OK", ()),
                extra="WARC-Profile: http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"),
    warc_record("metadata", PAGE, b"outlinks: none\r\n", content_type="application/warc-fields"),
    warc_record("response", "dns:example.com", b"20240501120000\nexample.com. 60 IN A 192.0.2.1\n",
                content_type="text/dns"),
    response("https://example.com/zstd", b"\x28\xb5\x2f\xfd...",
             headers=("Content-Type: text/html", "Content-Encoding: zstd")),
    response("https://example.com/last", b"<p>the record after all the others</p>"),
]


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip-per-record"])
def test_warc_records_become_pages_links_and_counted_skips(gzipped: bool) -> None:
    items = _items(warc_file(CRAWL, gzipped))
    summary = [(i.topic, orjson.loads(i.value)["url"]) if isinstance(i, Out) else i.reason for i in items]
    assert summary == [
        "warcinfo", "request",
        (FETCHED_PAGES, PAGE),
        (FRONTIER, "https://example.com/b.html"), (FRONTIER, "https://example.com/docs/c.html"),
        (FETCHED_PAGES, "https://example.com/gone"),  # a 404 is a fetch too, but its links are not followed
        (FETCHED_PAGES, "https://example.com/z.html"),
        (FRONTIER, "https://example.com/b.html"), (FRONTIER, "https://example.com/c.html"),
        (FETCHED_PAGES, "https://example.com/same"),
        "revisit", "metadata", "not_http", "content_encoding",
        (FETCHED_PAGES, "https://example.com/last"),  # read although a chunked gzip body came before
    ]


def test_a_response_is_a_fetched_page_as_the_schema_defines_it() -> None:
    page = _page(_items(warc_file(CRAWL[2:3]))[0])
    assert page.pop("warc_record_id").startswith("<urn:uuid:")
    assert page == {
        "schema_version": 1, "url": PAGE, "status": 200, "content_type": "text/html; charset=utf-8",
        "headers": {"content-type": "text/html; charset=utf-8", "set-cookie": "a=1, b=2", "etag": '"x1"'},
        "body_base64": base64.b64encode(ARTICLE).decode(), "fetched_at": "2024-05-01T12:00:00.500Z",
    }
    assert records.body_bytes(page) == ARTICLE
    assert orjson.loads(_items(warc_file(CRAWL[2:3]))[0].value)["headers"]["set-cookie"] == ["a=1", "b=2"]


def test_codings_are_undone_and_their_fields_dropped() -> None:
    page = _page(_items(warc_file(CRAWL[4:5]))[0])
    assert records.body_bytes(page) == ARTICLE
    assert page["headers"] == {"content-type": "text/html"}


def test_a_304_revisit_is_a_page_without_body_and_links_are_frontier_records() -> None:
    revisit = _page(_items(warc_file(CRAWL[5:6]))[0])
    assert revisit["status"] == 304 and "body_base64" not in revisit
    link = _items(warc_file(CRAWL[2:3]))[1]
    assert isinstance(link, Out) and link.key == b"https://example.com/b.html"
    assert records.decode(RecordKind.FRONTIER_URL, link.value) == {
        "schema_version": 1, "url": "https://example.com/b.html", "source_url": PAGE,
        "discovered_at": "2024-05-01T12:00:00.500Z"}


@pytest.mark.parametrize(("max_links", "expected"), [(0, 0), (1, 1), (1000, 2)])
def test_links_per_page_are_capped(max_links: int, expected: int) -> None:
    items = _items(warc_file(CRAWL[2:3]), max_links)
    assert sum(isinstance(i, Out) and i.topic == FRONTIER for i in items) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000Z"),
    ("2024-05-01T14:00:00+02:00", "2024-05-01T12:00:00.000Z"),
    ("2024-05-01T12:00:00.123456Z", "2024-05-01T12:00:00.123Z"),
    ("2024-05-01", None),
    ("yesterday", None),
    (None, None),
])
def test_warc_dates(value: str | None, expected: str | None) -> None:
    assert warc.warc_timestamp(value) == expected


def test_header_values_that_are_not_utf8_are_read_as_latin1() -> None:
    headers = warc.http_headers(((b"X-Name", b"caf\xe9"), (b"X-Utf8", "café".encode()), (b"", b"x")))
    assert headers == {"x-name": "café", "x-utf8": "café"}


@pytest.mark.parametrize(("coding", "encoded"), [
    ("gzip", gzip.compress(ARTICLE)),
    ("x-gzip", gzip.compress(ARTICLE)),
    ("deflate", zlib.compress(ARTICLE)),
    ("deflate", zlib.compress(ARTICLE)[2:-4]),  # raw deflate, as some servers send it
    ("br", brotli.compress(ARTICLE)),
])
def test_content_codings(coding: str, encoded: bytes) -> None:
    assert warc.decompress(encoded, coding) == ARTICLE


@pytest.mark.parametrize(("coding", "encoded"), [("gzip", b"not gzip"), ("br", b"not brotli"),
                                                 ("zstd", b"")])
def test_unreadable_codings(coding: str, encoded: bytes) -> None:
    assert warc.decompress(encoded, coding) is None


def test_decompression_stops_at_the_body_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warc, "MAX_BODY_BYTES", 1000)
    assert len(warc.decompress(gzip.compress(b"0" * 10_000_000), "gzip") or b"") == 1000


@pytest.mark.parametrize(("payload", "expected"), [
    (chunked(b"hello world"), b"hello world"),
    (b"5\nhello\n0\n\n", b"hello"),  # bare LF line ends
    (b"0\r\n\r\n", b""),
    (b"zz\r\nhello", None),
    (b"50\r\nshort", None),
    (b"5\r\nhello", None),  # no last chunk
])
def test_dechunk(payload: bytes, expected: bytes | None) -> None:
    assert warc.dechunk(payload) == expected


def test_a_body_that_only_claims_to_be_chunked_is_kept() -> None:
    headers: dict[str, str | list[str]] = {"transfer-encoding": "chunked"}
    assert warc.decode_body(b"<p>plain</p>", headers) == b"<p>plain</p>" and headers == {}


# --- links -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("html", "expected"), [
    ('<a href="b.html">', ["https://example.com/docs/b.html"]),
    ('<a href="../up/c?q=1#frag">', ["https://example.com/up/c?q=1"]),
    ('<a href="/root">', ["https://example.com/root"]),
    ('<a href="//cdn.example.net/x">', ["https://cdn.example.net/x"]),
    ('<a href="  http://other.example/\n">', ["http://other.example/"]),
    ('<a href="#top"><a href=""><a href="a.html#x">', []),  # the page itself
    ('<a href="mailto:a@example.com"><a href="javascript:void(0)"><a href="ftp://x.example/f">'
     '<a href="data:text/html,x"><a href="tel:+1">', []),
    ('<a href="http://[::1">', []),
    ('<a href="x">1</a><a href="x#2">2</a><a href="./x">3</a>', ["https://example.com/docs/x"]),
    ('<map><area href="/map" shape="rect"></map><a name="no-href">', ["https://example.com/map"]),
    ('<base href="https://mirror.example/base/"><a href="p">', ["https://mirror.example/base/p"]),
    ('<link href="/style.css" rel="stylesheet"><img src="/i.png"><script src="/s.js"></script>', []),
])
def test_extract_links(html: str, expected: list[str]) -> None:
    assert warc.extract_links(f"<html><body>{html}</body></html>", PAGE) == expected


def test_links_are_capped_in_document_order() -> None:
    html = "".join(f'<a href="/p{i}">' for i in range(50))
    assert warc.extract_links(html, PAGE, max_links=3) == [f"https://example.com/p{i}" for i in range(3)]


def test_links_come_only_from_2xx_html() -> None:
    pdf = warc.page_items(PAGE, None, 200, ((b"Content-Type", b"application/pdf"),), b'%PDF-1.4 <a href="x">')
    missing = warc.page_items(PAGE, None, 404, ((b"Content-Type", b"text/html"),), b'<a href="x">')
    assert [type(i) for i in pdf] == [Out] and [type(i) for i in missing] == [Out]
    sniffed = warc.page_items(PAGE, None, 200, (), b'<html><a href="/x">x</a>')
    assert [i.topic for i in sniffed if isinstance(i, Out)] == [FETCHED_PAGES, FRONTIER]


def test_links_of_a_page_in_another_charset() -> None:
    body = '<meta charset="shift_jis"><a href="/日本">x</a>'.encode("shift_jis")
    assert warc.page_links(body, {"content-type": "text/html"}, PAGE, 10) == ["https://example.com/日本"]


# --- JSON lines ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "expected"), [
    (b'{"url": "https://a.example/", "body": "<p>x</p>"}', FETCHED_PAGES),
    (b'{"url": "https://a.example/", "status": 304}', FETCHED_PAGES),
    (b'{"url": "https://a.example/", "body_base64": ""}', FETCHED_PAGES),
    (b'{"url": "https://a.example/", "source_url": null, "depth": 1}', FRONTIER),
    (b'{"url": "https://a.example/"}', FRONTIER),
    (b'{"url": 7, "body": ""}', None),
    (b'{"body": ""}', None),
    (b'["https://a.example/"]', None),
    (b"{not json", None),
    (b"", None),
])
def test_detect_topic(line: bytes, expected: str | None) -> None:
    assert replay.detect_topic(line) == expected


def _lines(items: list[Out | Skip]) -> list[tuple[str, bytes | None, bytes] | str]:
    return [(i.topic, i.key, i.value) if isinstance(i, Out) else i.reason for i in items]


FRONTIER_LINES = [b"{broken", b'{"url": "https://a.example/x", "depth": 0}\r', b"", b"  ",
                  b'{"url": "https://a.example/y", "body": "b"}']


@pytest.mark.parametrize(("topic", "expected"), [
    ("auto", FRONTIER),  # from the first valid line, for every line of the file
    (FETCHED_PAGES, FETCHED_PAGES),
    (FRONTIER, FRONTIER),
])
def test_json_lines_go_as_they_are_to_one_topic(topic: str, expected: str) -> None:
    assert _lines(list(replay.line_items(FRONTIER_LINES, topic))) == [
        (expected, None, b"{broken"),
        (expected, b"https://a.example/x", b'{"url": "https://a.example/x", "depth": 0}\r'),
        "blank_line", "blank_line",
        (expected, b"https://a.example/y", b'{"url": "https://a.example/y", "body": "b"}'),
    ]


def test_without_a_valid_line_json_lines_go_to_fetched_pages() -> None:
    lines = [b"{broken"] * (replay.LOOKAHEAD_LINES + 5) + [b'{"url": "https://a.example/"}']
    topics = {i.topic for i in replay.line_items(lines, "auto") if isinstance(i, Out)}
    assert topics == {FETCHED_PAGES}


def test_read_lines_skips_oversize_lines_without_reading_them_whole() -> None:
    data = b"a" * 10 + b"\n" + b"b" * 11 + b"\n" + b"c" * 12 + b"\n" + b"d" * 50 + b"\nlast"
    found = list(replay.read_lines(io.BytesIO(data), max_bytes=11))
    assert found == [b"a" * 10, b"b" * 11, b"c" * 12, Skip("oversize", "line 4: 51 bytes"), b"last"]


@pytest.mark.parametrize(("key", "value", "limit", "oversize"), [
    (None, b"x" * 100, 100, False),
    (b"k", b"x" * 100, 100, True),  # the key counts too
    (None, b"x" * 101, 100, True),
])
def test_oversize(key: bytes | None, value: bytes, limit: int, oversize: bool) -> None:
    skip = replay.oversize(Out(FETCHED_PAGES, key, value), limit)
    assert (skip is not None) == oversize
    size = len(value) + len(key or b"")
    assert skip is None or skip.reason == "oversize" and f"{size} bytes" in skip.detail


@pytest.mark.parametrize(("name", "kind"), [
    ("crawl.warc", "warc"), ("CRAWL.WARC.GZ", "warc"), ("pages.jsonl", "lines"), ("pages.json", "lines"),
    ("pages.ndjson.gz", "lines"), ("pages.jsonl.gz", "lines"), ("-", "lines"),
    ("pages.txt", None), ("crawl.arc.gz", None), ("pages.gz", None),
])
def test_source_kind(name: str, kind: str | None) -> None:
    if kind is None:
        with pytest.raises(replay.ConfigError):
            replay.source_kind(name)
    else:
        assert replay.source_kind(name) == kind


def test_gzipped_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"url": "https://a.example/", "status": 200}\n'))
    items = list(replay.source_items(str(path), "auto", 10, 1000))
    line = b'{"url": "https://a.example/", "status": 200}'
    assert _lines(items) == [(FETCHED_PAGES, b"https://a.example/", line)]


def test_summary() -> None:
    tally = Counter({"read:warc": 5, "read:lines": 2, f"produced:{FETCHED_PAGES}": 3,
                     f"produced:{FRONTIER}": 7, "delivered": 10, "skipped:request": 2, "skipped:oversize": 1})
    text = replay.summary(tally, {FETCHED_PAGES: "p.fetched-pages", FRONTIER: "p.frontier"}, 2, 2.0)
    assert text.splitlines()[1:] == [
        "read: 5 WARC records, 2 JSON lines",
        "produced: 3 to p.fetched-pages, 7 to p.frontier; 10 delivered",
        "skipped: 1 oversize, 2 request",
        "errors: none",
    ]


def test_missing_file_is_an_operator_error_before_any_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", "/nonexistent/crawl.warc.gz"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["replay", "notes.txt"]) == 2


# --- tail ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("page-verdicts", "p.page-verdicts"), ("dead-letters", "p.dead-letters"), ("frontier", "p.frontier"),
    ("new-urls", "p.new-urls"), ("p.app.content-seen.shards", "p.app.content-seen.shards"),
    ("page_verdicts", "page_verdicts"),
])
def test_tail_topic_names(name: str, expected: str) -> None:
    assert tail.resolve_topic(name, Topics("p.")) == expected


@pytest.mark.parametrize(("value", "full", "expected"), [
    (b'{"url": "u", "verdict": "unique"}', False, {"url": "u", "verdict": "unique"}),
    (b'{"url": "u", "body": "' + b"x" * 300 + b'"}', False,
     {"url": "u", "body": "x" * 200 + "... (300 chars)"}),
    (b'{"url": "u", "body": "' + b"x" * 300 + b'"}', True, {"url": "u", "body": "x" * 300}),
    (b'{"value_base64": "' + b"A" * 400 + b'"}', False, {"value_base64": "A" * 200 + "... (400 chars)"}),
    (b"[1, 2]", False, [1, 2]),
    (b"{broken", False, "{broken"),
    (b"caf\xe9", False, "caf\ufffd"),
    (None, False, None),
])
def test_tail_values(value: bytes | None, full: bool, expected: Any) -> None:
    line = orjson.loads(tail.render("t", 3, 17, b"k\xff", value, full))
    assert line == {"topic": "t", "partition": 3, "offset": 17, "key": "k\ufffd", "value": expected}


def test_commands_are_registered() -> None:
    parser = cli._parser()
    args = parser.parse_args(["replay", "a.warc.gz", "b.jsonl", "--rate", "50", "--no-links"])
    assert args.handler is replay.run and args.files == ["a.warc.gz", "b.jsonl"] and args.no_links
    args = parser.parse_args(["tail", "page-verdicts", "-f", "--limit", "5"])
    assert args.handler is tail.run and args.follow and args.limit == 5


def test_a_page_of_many_links_is_read_in_linear_time() -> None:
    """Iterating resiliparse's query_selector_all result is quadratic (minutes for this page)."""
    html = "<ul>" + "".join(f'<li><a href="/p{i}">{i}</a></li>' for i in range(20_000)) + "</ul>"
    assert len(warc.extract_links(html, PAGE, max_links=30_000)) == 20_000


@pytest.mark.parametrize(("client", "topic_limits", "expected"), [
    ({}, [1_048_588], 1_000_000 - replay.HEADROOM),  # the stages' producers refuse more than 1,000,000
    ({"message.max.bytes": "5000000"}, [1_048_588], 1_048_588 - replay.HEADROOM),
    ({"message.max.bytes": "5000000"}, [3_000_000, 2_000_000], 2_000_000 - replay.HEADROOM),
    ({}, [], 1_000_000 - replay.HEADROOM),  # the cluster did not say
])
def test_record_limit(monkeypatch: pytest.MonkeyPatch, client: dict[str, str], topic_limits: list[int],
                      expected: int) -> None:
    monkeypatch.setattr(replay, "_topic_limits", lambda kafka, topics: topic_limits)
    assert replay.record_limit(replay.KafkaConfig("127.0.0.1:1", client), ["t"]) == expected


class _Recorder:
    """Stands in for the producer: what :func:`replay.replay` sends, in order."""

    def __init__(self) -> None:
        self.sent: list[Out] = []

    def send(self, item: Out) -> None:
        self.sent.append(item)


def _replay(paths: list[Path], limit: int | None = None) -> tuple[list[Out], Counter[str]]:
    sink, tally = _Recorder(), Counter[str]()
    args = argparse.Namespace(no_links=False, max_links=1000, topic="auto", limit=limit)
    replay.replay([str(p) for p in paths], sink, args, 1_000_000, tally)  # type: ignore[arg-type]
    return sink.sent, tally


def test_a_corrupt_file_is_an_error_and_the_next_file_still_goes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    good = warc_file(CRAWL[2:4], gzipped=True)
    corrupt = tmp_path / "corrupt.warc.gz"
    corrupt.write_bytes(good + b"\x1f\x8b\x08\x00 not the rest of a gzip member")
    lines = tmp_path / "after.jsonl"
    lines.write_bytes(b'{"url": "https://a.example/", "status": 200}\n')
    sent, tally = _replay([corrupt, lines])
    assert [orjson.loads(item.value)["url"] for item in sent if item.topic == FETCHED_PAGES] == [
        PAGE, "https://example.com/gone", "https://a.example/"]
    assert tally["error:unreadable_file"] == 1
    assert "corrupt.warc.gz: stopped reading" in capsys.readouterr().err


@pytest.mark.parametrize(("limit", "pages", "links"), [(None, 4, 8), (1, 1, 2), (2, 2, 4), (0, 0, 0)])
def test_limit_counts_pages_and_lines_not_links(tmp_path: Path, limit: int | None, pages: int,
                                                links: int) -> None:
    path = tmp_path / "crawl.warc"
    path.write_bytes(warc_file([CRAWL[1], CRAWL[2], CRAWL[2], CRAWL[4], CRAWL[2]]))
    found = Counter(item.topic for item in _replay([path], limit)[0])
    assert (found[FETCHED_PAGES], found[FRONTIER]) == (pages, links)
