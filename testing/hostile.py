"""Hostile input for the stages (issue 7, item 4): malformed and strange records for each input topic,
each with what must become of it, interleaved with valid records.

Why a generator with expectations rather than a fuzzer: the test must tell "handled" from "handled
right". Every case says, per stage that reads its topic, either ``processed`` (valid but strange
input the stage must handle normally: its output carries ``url``) or the dead letter's reason code,
as the stages name them (:mod:`streams.records`, :mod:`streams.urls.canonical`, and
``url_too_long`` of the page stage). tests/stages/test_hostile_unit.py checks these expectations against
the stages' own code without a broker; tests/kafka/test_hostile_kafka.py checks them through Kafka.

What the cases found, and what is expected now:

* Nesting: orjson rejects more than 1,024 levels (``invalid_json``) but writes only 254, so a valid
  record nested 300 deep in an extra field failed when a stage passed it on; :mod:`streams.records`
  now rejects more than 128 levels as ``invalid_json`` too.
* URLs: over ``max_url_bytes`` (4,096) is ``url_too_long``, also when percent-encoding makes the
  canonical form grow past it; control characters inside a URL's path are percent-encoded, C0
  and spaces at either end, and tabs and newlines anywhere, are stripped (WHATWG URL, as browsers
  do; canonicalization version 1 made the first dead letters) and the URL is processed; IDN
  homographs are processed (as Punycode: telling them apart is a policy matter).
  The page stage does not canonicalize, so a URL only the revisit stage refuses is still a page.
* Compressed bodies: no stage decodes ``Content-Encoding``. A gzip bomb (1 GiB of zeros in about
  1 MB) starts with the gzip signature and is skipped as ``binary_body``, in constant memory; a
  zlib stream has no signature and is read as (garbage) text of its compressed size. Either way
  the work is bounded by ``max_record_bytes``.
* Size: 10 MB pages and frontier records are processed; 17 MB records are ``too_large``. A page
  (or frontier record) over about 1 MB used to stop its stage for good: its outputs (shard record,
  changelog, unique page or new URL) exceeded librdkafka's and the topics' 1 MB limits, the batch
  failed, and a restart failed on the same batch. Stage topics are now created for
  ``max_record_bytes``, and an output larger than its topic takes is a dead letter
  ``output_too_large`` (:mod:`streams.runtime.engine`).
* Time: a batch of slow records (a hundred 2 MB Content-Type headers, a second each) kept its
  transaction open past the 30 s timeout; the broker fenced the worker, on every retry. The engine
  now commits a long batch in parts, and a Content-Type over 64 KiB is read as missing.
* Memory: a 10 MB page's tokens took 400 MB of arrays to hash, and its SimHash 770 MB (2-word
  shingles, the revisit stage's); both now go in parts, with the same results.
* Revisit: a Content-Length of thousands of digits, or one past 2^63, and a fetch time in 9999
  failed with ``processing_error``; they are now processed (read as absent, clamped to year 9999).
"""

from __future__ import annotations

import base64
import functools
import random
import string
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import orjson

URL_STAGE, PAGE_STAGE, REVISIT_STAGE = "url-dedup", "content-seen", "revisit"
PROCESSED = "processed"
MIB = 1024 * 1024
BIG_BODY_BYTES = 10 * MIB       # processed: under max_record_bytes (16 MiB) even as base64
TOO_LARGE_BYTES = 17 * MIB      # over max_record_bytes: too_large
BOMB_BYTES = 1024 * MIB         # what the gzip bomb inflates to
INPUT_TOPIC_MAX_BYTES = 20 * MIB  # the test's input topics take the 17 MiB records


@dataclass(frozen=True, slots=True)
class Case:
    """One record of the mix: ``expect`` maps each stage reading it to ``processed`` or a reason."""

    kind: str
    value: bytes | None
    expect: Mapping[str, str]
    key: bytes | None = None
    url: str | None = None        # a processed record's ``url``, which its outputs carry
    verdict: str | None = None    # page stage: ``verdict`` or ``verdict:reason`` expected; None: any

    @property
    def valid(self) -> bool:
        return self.kind == "valid"


Builder = Callable[[random.Random, int], Case]


# --- frontier --------------------------------------------------------------------------------------


def _url(kind: str, value: bytes | None, reason: str, key: bytes | None = None) -> Case:
    return Case(kind, value, {URL_STAGE: reason}, key)


def _url_ok(kind: str, url: str, **fields: object) -> Case:
    return Case(kind, orjson.dumps({"url": url, **fields}), {URL_STAGE: PROCESSED}, url=url)


def _json(**fields: object) -> bytes:
    return orjson.dumps(fields)


def _fullwidth(text: str) -> str:
    return "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in text)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


_BAD_UTF8 = (b"\xff", b"\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80")
_BAD_JSON = (b'{"url": "http://j%d.example/", "depth": NaN}', b'{"url": "http://j%d.example/",}',
             b"{'url': 'http://j%d.example/'}", b'{"url": "http://j%d.example/"} trailing',
             b'{"url": "http://j%d.example/", "depth": 1e400}', b'{"url": "http://j%d.example/\\ud800"}',
             b'{"url": "http://j%d.example/\\x41"}', b'{"url": "http://j%d.example/" "depth": 1}')
_NOT_OBJECT = (b"[1, 2]", b'"http://x.example/"', b"42", b"null", b"true", b"[]")
_WRONG_TYPES = ({"url": 42}, {"url": ["http://x.example/"]}, {"url": {"href": "http://x.example/"}},
                {"url": None}, {"url": True}, {"url": ""}, {"source_url": "http://x.example/"},
                {"url": "http://x.example/", "depth": "3"}, {"url": "http://x.example/", "depth": -1},
                {"url": "http://x.example/", "depth": 2 ** 31}, {"url": "http://x.example/", "depth": 1.5},
                {"url": "http://x.example/", "source_url": 7},
                {"url": "http://x.example/", "discovered_at": "yesterday"},
                {"url": "http://x.example/", "discovered_at": "2024-02-30T00:00:00Z"},
                {"url": "http://x.example/", "discovered_at": "2024-01-01T00:00:00." + "0" * 100_000 + "x"},
                {"url": "http://x.example/", "schema_version": "1"})
_BAD_URLS = {
    "invalid_url": ("http:///", "http://:80/", "http://h.example:8a/", "http://h.example:99999/",
                    "http://[::1/", "http://[zz]/", "http://1.2.3.4.5/", "http://256.1.1.1/",
                    "/relative/path", "//h.example/x", "http://a..b.example/", "http://a%zzb.example/",
                    "http://" + "a" * 64 + ".example/", "http://a<b.example/", "http://%C0%AF.example/",
                    "http://x%00.example/", "http://a b.example/", "http://" + "\u0430" * 2000 + "/"),
    "unsupported_scheme": ("javascript:alert(1)", "mailto:a@b.example", "data:text/html,hi",
                           "ftp://h.example/", "file:///etc/passwd", "ws://h.example/"),
}
_CONTROLS = [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"] + ["\x7f"]


def _frontier_kinds() -> dict[str, Builder]:
    return {
        "empty": lambda r, n: _url("empty", b"", "empty"),
        "tombstone": lambda r, n: _url("tombstone", None, "empty", key=b"k%d" % n),
        "truncated_json": lambda r, n: _url("truncated_json", (raw := _json(url=f"http://t{n}.example/a"))[
            : r.randrange(1, len(raw))], "invalid_json"),
        "invalid_utf8": lambda r, n: _url("invalid_utf8", b'{"url": "http://u%d.example/' % n
                                          + r.choice(_BAD_UTF8) + b'"}', "invalid_utf8"),
        "bad_json": lambda r, n: _url("bad_json", r.choice(_BAD_JSON).replace(b"%d", b"%d" % n),
                                      "invalid_json"),
        "not_an_object": lambda r, n: _url("not_an_object", r.choice(_NOT_OBJECT), "not_an_object"),
        "wrong_type": lambda r, n: _url("wrong_type", orjson.dumps(r.choice(_WRONG_TYPES)), "schema"),
        "future_version": lambda r, n: _url("future_version", _json(url=f"http://v{n}.example/",
                                                                    schema_version=2),
                                            "unsupported_schema_version"),
        "deep_json": lambda r, n: _url("deep_json", _nested(100_000), "invalid_json"),
        "deep_field": lambda r, n: _url("deep_field", b'{"url": "http://d%d.example/", "x": ' % n
                                        + _nested(r.choice((130, 300, 2000))) + b"}", "invalid_json"),
        "url_100kb": lambda r, n: _url("url_100kb", _json(url=f"http://l{n}.example/" + "a" * 100_000),
                                       "url_too_long"),
        "source_100kb": lambda r, n: _url("source_100kb", _json(url="rel", source_url="http://s.example/"
                                                                + "b" * 100_000), "url_too_long"),
        "host_100kb": lambda r, n: _url("host_100kb", _json(url="http://" + "h" * 100_000 + ".example/"),
                                        "url_too_long"),
        "percent_growth": lambda r, n: _url("percent_growth", _json(url=f"http://g{n}.example/"
                                                                    + r.choice(("%", "\u00e9")) * 2000),
                                            "url_too_long"),
        "control_inside": lambda r, n: _url_ok("control_inside", f"http://c{n}.example/a"
                                               + r.choice(_CONTROLS) + "b"),
        "bad_url": lambda r, n: (lambda reason: _url("bad_url", _json(url=r.choice(_BAD_URLS[reason])),
                                                     reason))(r.choice(sorted(_BAD_URLS))),
        # valid but strange: processed, each URL canonically distinct (the serial n is in the host)
        "idn_homograph": lambda r, n: _url_ok("idn_homograph", r.choice(
            (f"http://\u0430pple{n}.example/", f"http://\u0430\u0440\u0440\u04cf\u0435{n}.com/",
             f"http://g\u03bf\u03bfgle{n}.example/", f"http://xn--pple-43d.h{n}.example/"))),
        "control_stripped": lambda r, n: _url_ok("control_stripped", r.choice(_CONTROLS[:-1])
                                                 + f" http://h{n}.exa\tmple/p\na\rth \x1f"),
        "percent_bomb": lambda r, n: _url_ok("percent_bomb", f"http://h{n}.example/"
                                             + r.choice(("%25" * 1300, "%2525" * 800, "%252525" * 500))),
        "percent_host": lambda r, n: _url_ok("percent_host", f"http://%68{n}.example/%7Euser"),
        "invisible_host": lambda r, n: _url_ok("invisible_host", r.choice(
            (f"http://h{n}.exam\u200bple/", f"http://ex\u00adample{n}.example/",
             f"http://\uff48{_fullwidth(str(n))}\uff0eexample/"))),
        "bidi_path": lambda r, n: _url_ok("bidi_path", f"http://h{n}.example/\u202egnp.exe"),
        "dot_segments": lambda r, n: _url_ok("dot_segments", f"http://h{n}.example" + "/.." * 1300),
        "ipv4_number": lambda r, n: _url_ok("ipv4_number", f"http://0x{0x1000000 + n:x}/"),
        "userinfo": lambda r, n: _url_ok("userinfo", f"http://us%40er:p@ss@h{n}.example/"),
        "nested_ok": lambda r, n: Case("nested_ok", b'{"url": "http://h%d.example/", "x": ' % n
                                       + _nested(100) + b"}", {URL_STAGE: PROCESSED},
                                       url=f"http://h{n}.example/"),
        "duplicate_key": lambda r, n: Case("duplicate_key", b'{"url": 5, "url": "http://h%d.example/"}' % n,
                                           {URL_STAGE: PROCESSED}, url=f"http://h{n}.example/"),
        "bom": lambda r, n: Case("bom", b"\xef\xbb\xbf" + _json(url=f"http://h{n}.example/"),
                                 {URL_STAGE: PROCESSED}, url=f"http://h{n}.example/"),
        "float_depth": lambda r, n: _url_ok("float_depth", f"http://h{n}.example/", depth=2.0),
        "many_fields": lambda r, n: _url_ok("many_fields", f"http://h{n}.example/",
                                            **{f"f{i}": i for i in range(5000)}),
        "big_key": lambda r, n: Case("big_key", _json(url=f"http://h{n}.example/"), {URL_STAGE: PROCESSED},
                                     key=r.randbytes(100_000), url=f"http://h{n}.example/"),
    }


def _frontier_big(rng: random.Random, n: int) -> list[Case]:
    url = f"http://h{n}.example/big"
    return [_url_ok("record_10mb", url, padding="p" * BIG_BODY_BYTES),
            _url("record_17mb", _json(url=f"http://h{n}.example/huge", padding="p" * TOO_LARGE_BYTES),
                 "too_large")]


def _frontier_valid(rng: random.Random, i: int) -> Case:
    url = f"http://valid{i}.example/page/{i}"
    return Case("valid", _json(url=url, source_url=f"http://valid{i}.example/", depth=i % 7,
                               discovered_at="2024-05-01T12:00:00Z"), {URL_STAGE: PROCESSED},
                key=b"v%d" % i, url=url)


def frontier_mix(hostile: int = 1000, valid: int = 300, big: int = 1, seed: int = 41) -> list[Case]:
    """``hostile`` frontier records (``big`` of each multi-megabyte kind among them), ``valid``
    ordinary ones, shuffled."""
    return _mix(_frontier_kinds(), _frontier_big, _frontier_valid, hostile, valid, big, seed)


# --- fetched pages ---------------------------------------------------------------------------------


def _page(kind: str, value: bytes | None, page: str, revisit: str | None = None) -> Case:
    return Case(kind, value, {PAGE_STAGE: page, REVISIT_STAGE: page if revisit is None else revisit})


def _page_ok(kind: str, n: int, verdict: str | None = None, revisit: str = PROCESSED,
             url: str | None = None, **fields: object) -> Case:
    url = url or f"http://p{n}.hostile.example/{kind}"
    record = {"url": url, "status": 200, "content_type": "text/html", **fields}
    return Case(kind, orjson.dumps(record), {PAGE_STAGE: PROCESSED, REVISIT_STAGE: revisit}, url=url,
                verdict=verdict)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@functools.cache
def gzip_bomb(inflated: int = BOMB_BYTES) -> bytes:
    """A gzip member (RFC 1952) of ``inflated`` zero bytes, about a thousandth of that size.

    Built from one compressed megabyte repeated: a full flush ends each piece on a byte boundary
    with an empty window, so the pieces are identical and concatenate into one deflate stream;
    compressing the whole gigabyte would take seconds.
    """
    chunk = bytes(MIB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(inflated // MIB):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = crc.to_bytes(4, "little") + (inflated % 2 ** 32).to_bytes(4, "little")
    return header + piece * (inflated // MIB) + end + trailer


@functools.cache
def _zlib_zeros() -> str:
    """64 MiB of zeros as a zlib stream (RFC 1950, ``Content-Encoding: deflate``), base64: 87 kB."""
    return _b64(zlib.compress(bytes(64 * MIB), 9))


_BAD_PAGES = ({"url": "http://x.example/", "status": "200"}, {"url": "http://x.example/", "status": 99},
              {"url": "http://x.example/", "status": 600}, {"url": "http://x.example/", "headers": ["a"]},
              {"url": "http://x.example/", "headers": {"etag": 42}},
              {"url": "http://x.example/", "body": "a", "body_base64": "YQ=="},
              {"url": "http://x.example/", "method": "POST"}, {"url": "http://x.example/", "content_type": 5},
              {"url": "http://x.example/", "fetched_at": "2024-01-01 00:00:00"}, {"status": 200, "body": "x"},
              {"url": "http://x.example/", "body_base64": "!!!!"},
              {"url": "http://x.example/", "body_base64": "abc"}, {"url": 42, "body": "x"})
_BAIT_BODIES: tuple[bytes, ...] = (
    b"<" * 200_000, b"<meta charset=" + b"a" * 100_000 + b"!",
    b'<meta http-equiv="content-type" content="' + b"charset=" * 20_000, b"<!--" * 50_000,
    b"<a " + b"b=" * 100_000, b"&#" * 100_000, b"<meta " * 30_000, b"</" * 100_000)
_WORDS = ["".join(random.Random(i).choices(string.ascii_lowercase, k=3 + i % 7)) for i in range(5000)]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_WORDS, k=words))


def _page_kinds() -> dict[str, Builder]:
    bad_url = {"javascript:void(0)": "unsupported_scheme", "/relative/page": "invalid_url",
               "http://a..b.example/": "invalid_url", "http://h.example:99999/": "invalid_url"}
    return {
        "empty": lambda r, n: _page("empty", b"", "empty"),
        "tombstone": lambda r, n: _page("tombstone", None, "empty"),
        "truncated_json": lambda r, n: _page("truncated_json", (raw := _json(url=f"http://t{n}.example/",
                                                                            body="<p>x</p>"))[
            : r.randrange(1, len(raw))], "invalid_json"),
        "invalid_utf8": lambda r, n: _page("invalid_utf8", b'{"url": "http://u.example/", "body": "'
                                           + r.choice(_BAD_UTF8) + b'"}', "invalid_utf8"),
        "bad_json": lambda r, n: _page("bad_json", r.choice(_BAD_JSON).replace(b"%d", b"%d" % n),
                                       "invalid_json"),
        "not_an_object": lambda r, n: _page("not_an_object", r.choice(_NOT_OBJECT), "not_an_object"),
        "wrong_type": lambda r, n: _page("wrong_type", orjson.dumps(r.choice(_BAD_PAGES)), "schema"),
        "future_version": lambda r, n: _page("future_version", _json(url="http://v.example/",
                                                                     schema_version=3),
                                             "unsupported_schema_version"),
        "deep_json": lambda r, n: _page("deep_json", _nested(100_000), "invalid_json"),
        "deep_field": lambda r, n: _page("deep_field", b'{"url": "http://d.example/", "x": '
                                         + _nested(r.choice((130, 300, 2000))) + b"}", "invalid_json"),
        "url_100kb": lambda r, n: _page("url_100kb", _json(url="http://l.example/" + "a" * 100_000,
                                                           body="<p>x</p>"), "url_too_long"),
        "url_refused_by_revisit": lambda r, n: (lambda url: _page_ok(
            "url_refused_by_revisit", n, revisit=bad_url[url], url=url + f"#{n}",
            body=f"<p>{n}</p>"))(r.choice(sorted(bad_url))),
        # valid but strange: processed by both stages
        "deflate_stream": lambda r, n: _page_ok("deflate_stream", n, body_base64=_zlib_zeros(),
                                                headers={"Content-Encoding": "deflate"}),
        "regex_bait": lambda r, n: _page_ok("regex_bait", n, "skipped:no_text",
                                            body_base64=_b64(r.choice(_BAIT_BODIES))),
        "deep_html": lambda r, n: _page_ok("deep_html", n, body="<div>" * r.choice((600, 20_000, 100_000))
                                           + _text(r, 50)),
        "content_type_bait": lambda r, n: _page_ok("content_type_bait", n, body=_text(r, 30), content_type=(
            r.choice(('text/html; charset="' + '\\"' * 100_000, "text/html," * 20_000,
                      "text/html;" + " " * 200_000)))),
        "many_headers": lambda r, n: _page_ok("many_headers", n, body=_text(r, 30),
                                              headers={f"x-h{i}": ["a", "b"] for i in range(2000)}),
        "huge_validators": lambda r, n: _page_ok("huge_validators", n, body=_text(r, 30), headers={
            "ETag": '"' + "e" * 100_000 + '"', "Last-Modified": "Mon, " + "1" * 100_000,
            "Content-Length": r.choice(("9" * 5000, "9" * 20, "-1", "\u0661\u0662"))}),
        "odd_fetch_time": lambda r, n: _page_ok("odd_fetch_time", n, body=_text(r, 30), fetched_at=r.choice(
            ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2016-12-31T23:59:60Z",
             "2024-01-01T00:00:00.123456789012+14:00"))),
        "bad_bytes_body": lambda r, n: _page_ok("bad_bytes_body", n, content_type="text/html; charset=utf-8",
                                                body_base64=_b64(b"<p>\xff\xfe\xc0\xaf ok</p>" * 1000)),
        "binary_body": lambda r, n: _page_ok("binary_body", n, "skipped:binary_body",
                                             content_type="text/plain",
                                             body_base64=_b64(b"\x89PNG\r\n\x1a\n" + r.randbytes(5000))),
        "control_text": lambda r, n: _page_ok("control_text", n, "skipped:binary_body",
                                              content_type="text/plain", body="a\x00b\x01c" * 1000),
        "blank_body": lambda r, n: _page_ok("blank_body", n, "skipped:empty_body",
                                            body=r.choice(("", " " * 100_000, "\n\t" * 1000))),
        "not_a_page": lambda r, n: (lambda status: _page_ok("not_a_page", n, f"skipped:{status[0]}",
                                                            body="<p>x</p>", **status[1]))(r.choice(
            (("status:500", {"status": 500}), ("head_request", {"method": "HEAD"}),
             ("no_response", {"status": None}), ("status:206", {"status": 206})))),
        "idn_homograph": lambda r, n: _page_ok("idn_homograph", n, url=f"http://\u0430pple{n}.example/",
                                               body=_text(r, 40)),
        "control_stripped": lambda r, n: _page_ok("control_stripped", n, url=f"\x01http://p{n}.example/\x1f",
                                                  body=_text(r, 40)),
        "nested_ok": lambda r, n: Case("nested_ok", b'{"url": "http://p%d.example/n", "body": "x", "x": ' % n
                                       + _nested(100) + b"}",
                                       {PAGE_STAGE: PROCESSED, REVISIT_STAGE: PROCESSED}, url=f"http://p{n}.example/n"),
    }


def _page_big(rng: random.Random, n: int) -> list[Case]:
    # Words of their own: two pages of a million words drawn from one vocabulary are near-duplicates.
    words = " ".join(rng.choices([f"{word}{n}" for word in _WORDS], k=BIG_BODY_BYTES // 6))
    body = f"<html><body><p>{words}</p></body></html>".encode()[:BIG_BODY_BYTES]
    return [_page_ok("page_10mb", n, "unique", body_base64=_b64(body)),
            _page("page_17mb", _json(url=f"http://p{n}.example/huge", body="x" * TOO_LARGE_BYTES),
                  "too_large"),
            _page_ok("gzip_bomb", n + 1, "skipped:binary_body", body_base64=_b64(gzip_bomb()),
                     headers={"Content-Encoding": "gzip"})]


def _page_valid(rng: random.Random, i: int) -> Case:
    url = f"http://valid{i}.example/page/{i}"
    html = f"<html><head><title>page {i}</title></head><body><p>{_text(rng, 150)}</p></body></html>"
    return Case("valid", _json(url=url, status=200, content_type="text/html; charset=utf-8", body=html,
                               fetched_at=f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z"),
                {PAGE_STAGE: PROCESSED, REVISIT_STAGE: PROCESSED}, key=url.encode(), url=url,
                verdict="unique")


def pages_mix(hostile: int = 1000, valid: int = 300, big: int = 1, seed: int = 43) -> list[Case]:
    """``hostile`` fetched pages (``big`` of each multi-megabyte kind among them), ``valid``
    ordinary ones, shuffled."""
    return _mix(_page_kinds(), _page_big, _page_valid, hostile, valid, big, seed)


# --- both ------------------------------------------------------------------------------------------


def _mix(kinds: Mapping[str, Builder], make_big: Callable[[random.Random, int], list[Case]],
         make_valid: Builder, hostile: int, valid: int, big: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    serial = 0
    for _ in range(big):
        cases.extend(make_big(rng, serial))
        serial += 2
    names = sorted(kinds)
    while len(cases) < hostile:
        cases.append(kinds[names[len(cases) % len(names)] if len(cases) < 2 * len(names)
                           else rng.choice(names)](rng, serial))
        serial += 1
    cases = cases[:hostile] + [make_valid(rng, i) for i in range(valid)]
    rng.shuffle(cases)
    return cases


def expected_dead_letters(cases: Iterable[Case], stage: str) -> Counter[str]:
    """How many dead letters of each reason ``stage`` must write for ``cases``."""
    return Counter(case.expect[stage] for case in cases if case.expect[stage] != PROCESSED)


def processed(cases: Iterable[Case], stage: str) -> list[Case]:
    """The cases ``stage`` must process (each gives exactly one output carrying its ``url``)."""
    return [case for case in cases if case.expect[stage] == PROCESSED]
