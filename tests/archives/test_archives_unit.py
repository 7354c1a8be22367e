"""The web-archive core without a broker or a state directory: payload digests, WARC records read
and written by their bytes, CDX lines, and which response becomes a revisit (streams/archives)."""

from __future__ import annotations

import gzip
import io
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from streams.archives import payload
from streams.archives.cdx import Indexed, Unusable, index_lines, warc_date
from streams.archives.dedup import Deduplicator, MemoryIndex, read_response
from streams.archives.revisit import PROFILE
from streams.archives.warc_records import MalformedWarc, Record, RecordWriter, read_records
from testing.warcs import chunked, http_response, warc_file, warc_record

EMPTY_SHA1 = "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"  # SHA-1 of nothing, as pywb's ResolvingLoader has it
PAGE = b"<!doctype html><html><body><p>" + b"An archived page, long enough. " * 40 + b"</p></body></html>\n"


# --- the payload digest ----------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "transfer", "same_as"), [
    (b"", None, b""),
    (PAGE, None, PAGE),
    (chunked(PAGE), "chunked", PAGE),                     # transfer coding removed
    (chunked(PAGE, 100), "gzip, Chunked", PAGE),         # the last coding is chunked, any case
    (chunked(PAGE), None, chunked(PAGE)),                 # not declared: the bytes as stored
    (b"zz\r\nnot chunks", "chunked", b"zz\r\nnot chunks"),  # does not parse: as stored, as replay keeps it
    (gzip.compress(PAGE, mtime=0), None, gzip.compress(PAGE, mtime=0)),  # content coding kept
])
def test_payload_digest_is_sha1_of_the_entity_body(body: bytes, transfer: str | None, same_as: bytes) -> None:
    assert payload.payload_digest(body, transfer) == payload.format_sha1(payload.sha1_of(same_as))
    assert payload.payload_digest(b"") == EMPTY_SHA1


def test_warcio_verifies_the_digest_of_an_unchunked_body() -> None:
    declared = f"WARC-Payload-Digest: {payload.payload_digest(PAGE)}"
    raw = warc_record("response", "http://a.example/", http_response(PAGE), extra=declared)
    record = next(iter(ArchiveIterator(io.BytesIO(raw), check_digests=True)))
    record.content_stream().read()
    assert record.digest_checker.passed is True


@pytest.mark.parametrize(("text", "valid"), [
    (EMPTY_SHA1, True), ("3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", True),
    ("SHA1:3i42h3s6nnfq2msvx7xzkyayscx5qbyj", True), ("sha1:da39a3ee5e6b4b0d3255bfef95601890afd80709", True),
    ("sha256:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", False),
    ("sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBY", False), ("-", False), ("sha1:!!!!", False),
])
def test_sha1_digests_parse_as_archives_write_them(text: str, valid: bool) -> None:
    found = payload.parse_sha1(text)
    assert (found == payload.sha1_of(b"")) if valid else found is None


# --- CDX and CDXJ ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("lines", "expected"), [
    ([b" CDX N b a m s k r M S V g", b"com,a)/ 20240501120000 http://a.com/ text/html 200 "
      b"3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ - - 100 0 a.warc.gz"],
     [("http://a.com/", "2024-05-01T12:00:00Z")]),
    ([b"com,a)/x 20240501 http://a.com/x text/html 200 3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ - 0 a.warc.gz"],
     [("http://a.com/x", "2024-05-01T00:00:00Z")]),  # 9 fields, no legend; a short timestamp padded
    ([b'com,a)/ 20240501120000 {"url": "http://a.com/", "digest": "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", '
      b'"mime": "text/html"}'], [("http://a.com/", "2024-05-01T12:00:00Z")]),
    ([b'com,a)/ 20240501120000 {"url": "http://a.com/", "digest": "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", '
      b'"mime": "warc/revisit"}'], ["revisit"]),
    ([b'com,a)/ 20240501120000 {"url": "http://a.com/", "digest": "sha256:abc"}'], ["not_sha1"]),
    ([b'com,a)/ 20240501120000 {"url": "http://a.com/"}'], ["no_digest"]),
    ([b'com,a)/ 2024x {"url": "http://a.com/", "digest": "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"}'],
     ["bad_timestamp"]),
    ([b'com,a)/ 20240501120000 {"url": '], ["unparsable"]),
    ([b"three fields only"], ["unparsable"]),
])
def test_index_lines_name_captures_or_say_why_not(lines: list[bytes], expected: list[object]) -> None:
    found = list(index_lines(lines))
    named = [(f.capture.uri, f.capture.date) if isinstance(f, Indexed) else f.reason for f in found]
    assert named == expected
    for each in found:
        if isinstance(each, Indexed):
            assert each.sha1 == payload.sha1_of(b"") and each.capture.digest == EMPTY_SHA1
            assert each.capture.record_id is None
        else:
            assert isinstance(each, Unusable)


def test_warc_dates_from_timestamps() -> None:
    assert warc_date("20240501123456") == "2024-05-01T12:34:56Z"
    assert warc_date("2024") == "2024-01-01T00:00:00Z"
    assert warc_date("20240501x") is None


# --- records by their bytes ------------------------------------------------------------------------

_BYTES = st.binary(max_size=300) | st.sampled_from([b"", b"\r\n\r\n", b"WARC/1.1\r\n\r\n", b"\r\n"])
_RECORD = st.tuples(st.sampled_from(["response", "request", "metadata", "warcinfo", "resource"]), _BYTES,
                    st.text(alphabet="abcdefghijklmnop/:. ", max_size=30))


@settings(max_examples=150, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=6), st.booleans())
def test_records_read_back_byte_for_byte(parts: list[tuple[str, bytes, str]], gzipped: bool) -> None:
    raws = [warc_record(kind, "http://a.example/" + value.strip(), block, extra=f"X-Note: {value}")
            for kind, block, value in parts]
    members = [gzip.compress(raw, mtime=0) for raw in raws]  # as warc_file writes them, at a fixed time
    data = b"".join(members) if gzipped else warc_file(raws)
    found = list(read_records(io.BytesIO(data)))
    assert [record.raw() for record in found] == raws
    if gzipped:
        assert [record.member for record in found] == members
    out = io.BytesIO()
    writer = RecordWriter(out, gzipped)
    for record in found:
        writer.write(record)
    assert out.getvalue() == data  # passed through: the same bytes, compressed members copied


def test_a_member_of_several_records_and_blank_lines_between_records() -> None:
    raws = [warc_record("request", "http://a.example/", b"GET / HTTP/1.1\r\n\r\n"),
            warc_record("metadata", "http://a.example/", b"via: x\r\n")]
    data = gzip.compress(b"\r\n".join(raws)) + gzip.compress(raws[0])
    found = list(read_records(io.BytesIO(data)))
    assert [r.raw() for r in found] == [raws[0], raws[1], raws[0]]
    assert [r.member is None for r in found] == [True, True, False]  # shared members are compressed again


@pytest.mark.parametrize(("data", "where"), [
    (b"HTTP/1.1 200 OK\r\n\r\n", 0),
    (b"WARC/1.1\r\nContent-Length: x\r\n\r\n", 0),
    (b"WARC/1.1\r\nNo colon here\r\n\r\n", 0),
    (warc_record("request", "http://a/", b"0123456789")[:-8], 0),  # cut inside its block
    (warc_record("request", "http://a/", b"abc").replace(b"abc\r\n\r\n", b"abcXX\r\n"), 0),
    (warc_record("request", "http://a/", b"abc") + b"garbage", None),
])
def test_what_is_not_a_record_is_refused_with_its_offset(data: bytes, where: int | None) -> None:
    with pytest.raises(MalformedWarc) as refused:
        list(read_records(io.BytesIO(data)))
    if where is not None:
        assert refused.value.offset >= where


def test_broken_compression_is_an_error() -> None:
    member = gzip.compress(warc_record("request", "http://a/", b"abc"))
    with pytest.raises(zlib.error):
        list(read_records(io.BytesIO(member[:-12])))


# --- which response becomes a revisit --------------------------------------------------------------


def _response(uri: str, body: bytes, headers: tuple[str, ...] = ("Content-Type: text/html",), *,
              date: str = "2024-05-01T12:00:00Z", extra: str = "") -> bytes:
    return warc_record("response", uri, http_response(body, headers=headers), date=date, extra=extra)


def _dedup(*raws: bytes) -> tuple[list[Record], list[Record], Deduplicator]:
    """Records in, records out (read back), through one deduplicator."""
    dedup = Deduplicator(MemoryIndex())
    out = io.BytesIO()
    writer = RecordWriter(out, gzipped=False)
    records = list(read_records(io.BytesIO(b"".join(raws))))
    for record in records:
        dedup.process(record, writer.write, writer.write_raw)
    return records, list(read_records(io.BytesIO(out.getvalue()))), dedup


CHUNKED_HTML = ("Content-Type: text/html", "Transfer-Encoding: chunked")
GZIPPED = ("Content-Type: text/html", "Content-Encoding: gzip")


@pytest.mark.parametrize(("first", "second", "revisit"), [
    ((PAGE,), (PAGE,), True),
    ((PAGE,), (PAGE.replace(b"\n", b"\r\n"),), False),                 # a line ending: one byte more
    ((PAGE,), (PAGE[:-1] + b"\r",), False),                            # the last byte
    ((PAGE,), (PAGE[:200] + b"a" + PAGE[201:],), False),               # one byte in the middle
    ((PAGE,), (PAGE + b" ",), False),
    ((PAGE,), (PAGE.replace(b"long", b"lung"),), False),               # a near-duplicate
    ((PAGE,), (PAGE, ("Content-Type: text/plain", "X-Other: 1")), True),  # other headers, same payload
    ((chunked(PAGE), CHUNKED_HTML, "WARC-Payload-Digest: sha1:X"), (chunked(PAGE, 50), CHUNKED_HTML), True),
    ((chunked(PAGE), CHUNKED_HTML), (chunked(PAGE, 50), CHUNKED_HTML, "WARC-Payload-Digest: sha1:X"), False),
    ((gzip.compress(PAGE, 9, mtime=0), GZIPPED), (gzip.compress(PAGE, 9, mtime=0), GZIPPED), True),
    ((gzip.compress(PAGE, 9, mtime=0), GZIPPED), (gzip.compress(PAGE, 1, mtime=0), GZIPPED), False),
    ((PAGE,), (chunked(PAGE), CHUNKED_HTML), False),                   # other framing: its own first capture
    ((b"",), (b"",), False),                                           # nothing to save
])
def test_only_a_byte_identical_payload_becomes_a_revisit(first: tuple[object, ...],
                                                         second: tuple[object, ...], revisit: bool) -> None:
    def record(uri: str, spec: tuple[object, ...], date: str) -> bytes:
        body = spec[0]
        headers = spec[1] if len(spec) > 1 else ("Content-Type: text/html",)
        extra = spec[2] if len(spec) > 2 else ""
        assert isinstance(body, bytes) and isinstance(headers, tuple) and isinstance(extra, str)
        return _response(uri, body, headers, date=date, extra=extra)

    _, out, _ = _dedup(record("http://a.example/1", first, "2024-05-01T12:00:00Z"),
                       record("http://b.example/2", second, "2024-05-02T12:00:00Z"))
    assert out[0].kind == "response"
    assert out[1].kind == ("revisit" if revisit else "response")


def test_a_declared_digest_is_never_trusted_for_identity() -> None:
    other = PAGE.replace(b"page", b"pagE")
    declared = f"WARC-Payload-Digest: {payload.payload_digest(PAGE)}"
    _, out, dedup = _dedup(_response("http://a.example/", PAGE),
                           _response("http://b.example/", other, extra=declared))
    assert [r.kind for r in out] == ["response", "response"]
    assert dedup.tally["kept:first_capture"] == 2


def test_the_revisit_names_the_first_capture_and_keeps_the_response_headers() -> None:
    first = _response("http://a.example/", PAGE, extra="WARC-Payload-Digest: sha1:DECLARED")
    second = _response("http://b.example/copy", PAGE, ("Content-Type: text/html", "Set-Cookie: a=1"),
                       date="2024-05-02T08:00:00Z",
                       extra="WARC-Concurrent-To: <urn:uuid:req>\nWARC-IP-Address: 10.0.0.1")
    records, out, dedup = _dedup(first, second)
    revisit = out[1]
    assert revisit.head.startswith(b"WARC/1.1\r\n")
    assert revisit.field("WARC-Profile") == PROFILE
    assert revisit.field("WARC-Refers-To-Target-URI") == "http://a.example/"
    assert revisit.field("WARC-Refers-To-Date") == "2024-05-01T12:00:00Z"
    assert revisit.field("WARC-Refers-To") == records[0].field("WARC-Record-ID")
    assert revisit.field("WARC-Payload-Digest") == "sha1:DECLARED"  # the original's, as its index has it
    for kept in ("WARC-Record-ID", "WARC-Date", "WARC-Target-URI", "WARC-Concurrent-To", "WARC-IP-Address"):
        assert revisit.field(kept) == records[1].field(kept)
    assert revisit.block == http_response(b"", headers=("Content-Type: text/html", "Set-Cookie: a=1"))
    assert dedup.tally["bytes_saved"] == len(records[1].raw()) - len(revisit.raw())
    parsed = next(iter(ArchiveIterator(io.BytesIO(revisit.raw()))))  # warcio reads it as a revisit
    assert parsed.rec_type == "revisit" and parsed.http_headers.get_statuscode() == "200"
    assert parsed.http_headers.get_header("Set-Cookie") == "a=1"


def test_a_capture_is_never_its_own_revisit() -> None:
    same = _response("http://a.example/", PAGE)
    _, out, dedup = _dedup(same, same)
    assert [r.kind for r in out] == ["response", "response"]
    assert dedup.tally["kept:same_capture"] == 1


def test_an_undeclared_dechunked_capture_is_not_referred_to() -> None:
    """pywb indexes it by a digest of its chunk framing (webrecorder/warcio#74): the next copy is
    the first capture instead, and the one after that refers to it."""
    raws = [warc_record("response", f"http://a.example/{n}", http_response(chunked(PAGE, 10 * n + 7),
                                                                             headers=CHUNKED_HTML))
            for n in range(3)]
    raws[1] = raws[1].replace(b"WARC-Target-URI", f"WARC-Payload-Digest: {payload.payload_digest(PAGE)}\r\n"
                              "WARC-Target-URI".encode())
    _, out, dedup = _dedup(*raws)
    assert [r.kind for r in out] == ["response", "response", "revisit"]
    assert out[2].field("WARC-Refers-To-Target-URI") == "http://a.example/1"
    assert dedup.tally["kept:not_referable"] == 1


@pytest.mark.parametrize("block", [b"not http at all", b"HTTP/1.1 200 OK\r\nno end of headers"])
def test_responses_without_an_http_message_pass_through(block: bytes) -> None:
    record = next(read_records(io.BytesIO(warc_record("response", "http://a.example/", block))))
    assert read_response(record) == "not_http"


def test_segmented_and_non_http_records_pass_through() -> None:
    raws = [_response("http://a.example/", PAGE),
            _response("http://b.example/", PAGE, extra="WARC-Segment-Number: 1"),
            warc_record("response", "dns:a.example", b"a.example. 300 IN A 10.0.0.1",
                        content_type="text/dns"),
            warc_record("resource", "http://c.example/", PAGE, content_type="text/html")]
    records, out, dedup = _dedup(*raws)
    assert [r.raw() for r in out] == [r.raw() for r in records]
    assert dedup.tally["kept:segmented"] == 1 and dedup.tally["kept:not_http"] == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"b", b"ab", b"a\r\n", b"a\n", b"", b"\x00", b"A"]),
                min_size=1, max_size=8))
def test_a_revisit_exactly_when_an_earlier_body_was_the_same(bodies: list[bytes]) -> None:
    raws = [_response(f"http://a.example/{n}", body, date=f"2024-05-01T12:00:{n:02d}Z")
            for n, body in enumerate(bodies)]
    _, out, _ = _dedup(*raws)
    seen: set[bytes] = set()
    for body, record in zip(bodies, out, strict=True):
        assert record.kind == ("revisit" if body and body in seen else "response")
        seen.add(body)
