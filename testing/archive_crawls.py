"""Two crawls of real pages as WARC files, and what a correct de-duplication makes of them.

The pages are the shared corpus's HTML (``../shared/corpus``, :func:`testing.neardup_set.corpus_files`),
or, where it is absent, generated ones (so the replay test still runs on a fresh clone). Crawl 1
fetches each page once, some from a mirror host too (the same bytes), some chunked
(``Transfer-Encoding: chunked``), some gzipped (``Content-Encoding``), a not-found page three times,
an empty 204; with a request record before each response and a metadata record after some, as
crawlers write them. Crawl 2, a day later, fetches every page again: most unchanged, some with one
line ending changed (one byte more), some with one byte changed, some with a word changed, some
chunked ones re-chunked at another size and some served unchunked now, plus pages crawl 1 did not
have. Every response declares ``WARC-Payload-Digest`` and ``WARC-Block-Digest`` as warcio's writer
computes them (over the stored body: ``warcio check`` passes on them).

:func:`expected_revisits` is the oracle, independent of the code under test: it compares entity
bodies byte for byte (no digest), in record order, and says which responses must become revisits
of which earlier capture.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.recordloader import ArcWarcRecord

from streams.archives.revisit import PROFILE
from testing.neardup_set import CORPUS, corpus_files
from testing.warcs import chunked as chunk_body

HTML = "Content-Type: text/html; charset=utf-8"
DAY1, DAY2 = "2024-05-01", "2024-05-02"


@dataclass(frozen=True)
class Response:
    """A response record as written, with its entity body and whether it is chunked."""

    uri: str
    date: str
    record_id: str
    entity: bytes
    chunked: bool
    declared: str
    raw: bytes
    status: str = "200 OK"


@dataclass
class Crawl:
    """One crawl's WARC records (uncompressed bytes, in order) and its responses."""

    records: list[bytes]
    responses: list[Response]

    def warc(self, gzipped: bool = True) -> bytes:
        return b"".join(gzip.compress(r, mtime=0) if gzipped else r for r in self.records)


def source_pages(count: int, corpus: Path = CORPUS) -> list[bytes]:
    """``count`` HTML pages: the corpus's first ones, else generated pages of a few KB."""
    files = corpus_files(corpus) if corpus.is_dir() else []
    pages = []
    for path in files[:count]:
        raw = path.read_bytes()
        pages.append(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    rng = random.Random(48)
    words = ["archive", "capture", "payload", "revisit", "digest", "crawl", "record", "replay", "index"]
    while len(pages) < count:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(300, 1500)))
        pages.append(f"<!doctype html>\n<html><head><title>page {len(pages)}</title></head>\n<body>\n<p>"
                     f"{text}</p>\n</body></html>\n".encode())
    return pages


def _sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


class _Writer:
    def __init__(self, crawl: int) -> None:
        self.crawl = crawl
        self.serial = 0
        self.records: list[bytes] = []
        self.responses: list[Response] = []

    def _id(self) -> str:
        self.serial += 1
        return f"<urn:uuid:48480000-0000-4000-8000-{self.crawl:04d}{self.serial:08d}>"

    def _record(self, kind: str, uri: str | None, date: str, content_type: str, block: bytes,
                extra: list[tuple[str, str]]) -> str:
        record_id = self._id()
        fields = [("WARC-Type", kind), ("WARC-Record-ID", record_id), ("WARC-Date", date)]
        if uri is not None:
            fields.append(("WARC-Target-URI", uri))
        fields += [*extra, ("Content-Type", content_type), ("Content-Length", str(len(block)))]
        head = "WARC/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields) + "\r\n"
        self.records.append(head.encode() + block + b"\r\n\r\n")
        return record_id

    def warcinfo(self, date: str) -> None:
        self._record("warcinfo", None, date, "application/warc-fields",
                     b"software: testing/archive_crawls.py\r\nformat: WARC File Format 1.1\r\n", [])

    def fetch(self, uri: str, date: str, entity: bytes, *, status: str = "200 OK",
              chunk_size: int | None = None, gzipped: bool = False, metadata: bool = False) -> None:
        """A request record, the response, and a metadata record when asked."""
        request = f"GET /{uri.split('/', 3)[-1]} HTTP/1.1\r\nHost: {uri.split('/')[2]}\r\n\r\n".encode()
        request_id = self._record("request", uri, date, "application/http; msgtype=request", request, [])
        body = gzip.compress(entity, mtime=0) if gzipped else entity
        headers = [HTML] + (["Content-Encoding: gzip"] if gzipped else [])
        if chunk_size is None:
            headers.append(f"Content-Length: {len(body)}")
            stored = body
        else:
            headers.append("Transfer-Encoding: chunked")
            stored = chunk_body(body, chunk_size)
        head = ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode()
        declared = _sha1(stored)  # warcio's: over the stored body (webrecorder/warcio#74)
        response_id = self._record("response", uri, date, "application/http; msgtype=response", head + stored,
                                   [("WARC-Concurrent-To", request_id), ("WARC-Payload-Digest", declared),
                                    ("WARC-Block-Digest", _sha1(head + stored))])
        self.responses.append(Response(uri, date, response_id, body, chunk_size is not None, declared,
                                       self.records[-1], status))
        if metadata:
            self._record("metadata", uri, date, "application/warc-fields", b"via: testing\r\n",
                         [("WARC-Concurrent-To", response_id)])

    def crawl_of(self) -> Crawl:
        return Crawl(self.records, self.responses)


def _when(day: str, second: int) -> str:
    return f"{day}T{10 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"


def _url(k: int) -> str:
    return f"https://site{k % 7}.example/page/{k}"


NOT_FOUND = b"<!doctype html><title>Not found</title><h1>Not found</h1><p>No such page here.</p>\n"


def two_crawls(pages: list[bytes], new_pages: int = 3, codings: bool = True) -> tuple[Crawl, Crawl]:
    """Crawl 1 of ``pages`` less the last ``new_pages``, and crawl 2 of all of them (module docstring);
    without ``codings``, no body is chunked or gzipped."""
    old = len(pages) - new_pages
    first, second = _Writer(1), _Writer(2)
    first.warcinfo(_when(DAY1, 0))
    for k, page in enumerate(pages[:old]):
        when = _when(DAY1, 10 * k + 1)
        chunk = 1000 if k % 10 == 3 and codings else None
        gzipped = k % 10 == 5 and codings
        first.fetch(_url(k), when, page, chunk_size=chunk, gzipped=gzipped, metadata=k % 10 == 0)
        if k % 6 == 0:
            first.fetch(f"https://mirror.example/{k}", _when(DAY1, 10 * k + 2), page, chunk_size=chunk,
                        gzipped=gzipped)
    for j in range(3):
        first.fetch(f"https://site0.example/missing-{j}", _when(DAY1, 10 * old + j), NOT_FOUND,
                    status="404 Not Found")
    first.fetch("https://site1.example/ping", _when(DAY1, 10 * old + 5), b"", status="204 No Content")
    second.warcinfo(_when(DAY2, 0))
    for k, page in enumerate(pages):
        second.fetch(_url(k), _when(DAY2, 10 * k + 1), _changed(k, page, old),
                     chunk_size=_rechunk(k) if codings else None, gzipped=k % 10 == 5 and codings)
    second.fetch("https://site0.example/missing-0", _when(DAY2, 10 * len(pages)), NOT_FOUND,
                 status="404 Not Found")
    return first.crawl_of(), second.crawl_of()


def _changed(k: int, page: bytes, old: int) -> bytes:
    """Crawl 2's page ``k``: unchanged, or changed by one line ending, one byte or one word."""
    if k >= old:
        return page
    if k % 9 == 7:
        return page.replace(b" the ", b" a ", 1) if b" the " in page else page + b"<!-- edited -->"
    if k % 4 == 1:
        return page.replace(b"\n", b"\r\n", 1) if b"\n" in page else page + b"\n"
    if k % 4 == 2:
        middle = len(page) // 2
        return page[:middle] + bytes([page[middle] ^ 0x20]) + page[middle + 1:]
    return page


def _rechunk(k: int) -> int | None:
    """Crawl 2's framing of page ``k``: chunked ones at another chunk size, one in two unchunked."""
    if k % 10 != 3:
        return None
    return None if k % 20 == 13 else 700


@dataclass(frozen=True)
class Expected:
    """What the oracle says of one response: ``original`` is None for one that stays a response."""

    response: Response
    original: Response | None


def expected_revisits(*crawls: Crawl) -> list[Expected]:
    """Every response of ``crawls`` in order, with the earlier capture it must become a revisit of:
    the first with the same entity body, byte for byte, and the same framing; none for an empty one."""
    first: dict[tuple[bytes, bool], Response] = {}
    out = []
    for crawl in crawls:
        for response in crawl.responses:
            key = (response.entity, response.chunked)
            original = first.get(key) if response.entity else None
            if response.entity and original is None:
                first[key] = response
            out.append(Expected(response, original))
    return out


def members(data: bytes) -> list[bytes]:
    """The uncompressed gzip members of ``data``, one each (a record each, as written here)."""
    out = []
    while data:
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        out.append(inflater.decompress(data))
        data = inflater.unused_data
    return out


def check_output(crawls: list[Crawl], outputs: list[bytes]) -> list[str]:
    """What is wrong with ``outputs`` (one gzipped WARC per crawl) as the de-duplication of ``crawls``
    (:func:`expected_revisits`): records in order and byte for byte as they came, except that each
    expected revisit is a WARC/1.1 identical-payload revisit naming its original's URI, date, record
    ID and declared digest, with the response's HTTP head and no payload. Read with warcio."""
    problems: list[str] = []
    expected = {e.response.raw: e.original for e in expected_revisits(*crawls)}
    for crawl, output in zip(crawls, outputs, strict=True):
        written = members(output)
        if len(written) != len(crawl.records):
            return [f"{len(written)} records written of {len(crawl.records)}"]
        parsed = list(ArchiveIterator(io.BytesIO(output)))
        for raw, out, record in zip(crawl.records, written, parsed, strict=True):
            original = expected.get(raw)
            if original is None:
                if out != raw:
                    problems.append(f"changed: {raw[:200]!r}")
                continue
            problems += _revisit_problems(raw, out, record, original)
    return problems


def _revisit_problems(raw: bytes, out: bytes, record: ArcWarcRecord, original: Response) -> list[str]:
    headers = record.rec_headers
    want = {"WARC-Type": "revisit", "WARC-Profile": PROFILE, "WARC-Refers-To-Target-URI": original.uri,
            "WARC-Refers-To-Date": original.date, "WARC-Refers-To": original.record_id,
            "WARC-Payload-Digest": original.declared}
    found = {name: headers.get_header(name) for name in want}
    problems = [f"{name}: {found[name]!r}, not {value!r}" for name, value in want.items()
                if found[name] != value]
    head = raw[raw.index(b"\r\n\r\n") + 4:]
    http_head = head[:head.index(b"\r\n\r\n") + 4]
    if not out.startswith(b"WARC/1.1\r\n") or not out.endswith(b"\r\n\r\n" + http_head + b"\r\n\r\n"):
        problems.append(f"not a WARC/1.1 revisit with the response's HTTP head: {out[:300]!r}")
    return problems
