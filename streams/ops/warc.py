"""WARC records as the crawler's topic records: fetched pages and the links found in them.

Pure: no Kafka here, so ``replay`` and the tests share one conversion. A WARC (ISO 28500) file is
read with FastWARC. What becomes a record:

- ``response`` records with an HTTP message and an http(s) ``WARC-Target-URI`` become fetched pages
  (``schemas/fetched_page.schema.json``): the status, the header fields (names lower-cased,
  repeated fields as lists), ``content_type`` from the header, the body as ``body_base64`` (raw
  bytes: the page stage decodes charsets itself, a fetcher's guess would only be in its way),
  ``fetched_at`` from ``WARC-Date`` and ``warc_record_id`` from ``WARC-Record-ID`` (the page
  stage's verdicts name it for the later copies of the same payload);
- ``revisit`` records whose HTTP status is 304 become fetched pages with that status and no body;
  other revisits (identical payload digest) carry no body to compare, and are skipped;
- the ``<a href>`` and ``<area href>`` links of 2xx HTML responses become frontier records
  (``schemas/frontier_url.schema.json``): resolved against the page URL (or its ``<base href>``),
  fragments removed, only http(s), no self-links, each once, at most ``max_links`` per page;
- everything else (``request``, ``metadata``, ``warcinfo``, ``resource``...) is skipped and counted.

The payload is stored as it came off the wire, so the transfer coding (``chunked``) and content
coding (``gzip``, ``deflate``, ``br``) are undone here (FastWARC's own decoding loses the records
after a chunked gzip body in 2.0.1), and their header fields dropped. Decoded bodies stop at
:data:`MAX_BODY_BYTES`, so a compression bomb cannot take the replay's memory.
"""

from __future__ import annotations

import base64
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final
from urllib.parse import urldefrag, urljoin, urlsplit

import orjson
from fastwarc.stream_io import BrotliReader
from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from resiliparse.parse.html import DOMContext, ElementNode, HTMLTree, Node, traverse_dom

from streams import records
from streams.errors import RecordRejected
from streams.pages.decode import DecodedPage, decode_page

FETCHED_PAGES: Final = "fetched-pages"
FRONTIER: Final = "frontier"
MAX_BODY_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_LINKS: Final = 1000
_HTTP_SCHEMES: Final = frozenset({"http", "https"})
_LINK_TAGS: Final = frozenset({"a", "area", "base"})
_URL_SPACE: Final = " \t\n\r\x0c"  # WHATWG URL: leading and trailing C0 space is stripped


@dataclass(frozen=True, slots=True)
class Out:
    """One record to produce: the short topic name (``fetched-pages``, ``frontier``), key, value."""

    topic: str
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class Skip:
    """An input record that becomes no output, and why (counted in the replay's summary)."""

    reason: str
    detail: str = ""


Item = Out | Skip


def warc_items(stream: BinaryIO, max_links: int = DEFAULT_MAX_LINKS) -> Iterator[Item]:
    """Every record of one WARC stream (plain or gzipped, detected) as outputs and skips, in order."""
    for record in ArchiveIterator(stream, parse_http=True, auto_decode="none"):
        yield from record_items(record, max_links)


def record_items(record: WarcRecord, max_links: int = DEFAULT_MAX_LINKS) -> list[Item]:
    """One WARC record: a fetched page and its links, or the reason it gives nothing."""
    kind = record.record_type
    if kind not in (WarcRecordType.response, WarcRecordType.revisit):
        return [Skip(str(kind))]
    url = (record.headers.get("WARC-Target-URI") or "").strip("<> ")
    if not record.is_http or urlsplit(url).scheme.lower() not in _HTTP_SCHEMES:
        return [Skip("not_http", url)]
    status = record.http_headers.status_code
    if status is None or not 100 <= status <= 599:
        return [Skip("bad_http_status", url)]
    if kind == WarcRecordType.revisit and status != 304:
        return [Skip("revisit", url)]
    if record.content_length > MAX_BODY_BYTES:
        return [Skip("payload_too_large", url)]
    pairs = record.http_headers.items_bytes()
    return page_items(url, record.headers.get("WARC-Date"), status, pairs, record.reader.read(), max_links,
                      record.headers.get("WARC-Record-ID"))


def page_items(url: str, warc_date: str | None, status: int, pairs: tuple[tuple[bytes, bytes], ...],
               payload: bytes, max_links: int = DEFAULT_MAX_LINKS,
               record_id: str | None = None) -> list[Item]:
    """A fetched page (and the frontier records of its links) from the parts of an HTTP response."""
    headers = http_headers(pairs)
    body = decode_body(payload, headers)
    if isinstance(body, Skip):
        return [Skip(body.reason, url)]
    fetched_at = warc_timestamp(warc_date)
    page = fetched_page(url, status, headers, body, fetched_at, record_id)
    out: list[Item] = [Out(FETCHED_PAGES, url.encode("utf-8", "surrogatepass"), orjson.dumps(page))]
    if max_links > 0 and 200 <= status < 300:
        out.extend(frontier_record(link, url, fetched_at)
                   for link in page_links(body, headers, url, max_links))
    return out


def fetched_page(url: str, status: int, headers: dict[str, str | list[str]], body: bytes,
                 fetched_at: str | None, record_id: str | None = None) -> dict[str, object]:
    """The fetched-page record (only ``url`` is required; absent fields are left out, not null)."""
    page: dict[str, object] = {"schema_version": records.SCHEMA_VERSION, "url": url, "status": status,
                               "headers": headers}
    content_type = _last(headers.get("content-type"))
    if content_type is not None:
        page["content_type"] = content_type
    if body:
        page["body_base64"] = base64.b64encode(body).decode("ascii")
    if fetched_at is not None:
        page["fetched_at"] = fetched_at
    if record_id:
        page["warc_record_id"] = record_id.strip()
    return page


def frontier_record(link: str, source_url: str, discovered_at: str | None) -> Out:
    """A link as a frontier record, keyed by its URL like every URL the replay produces."""
    record: dict[str, object] = {"schema_version": records.SCHEMA_VERSION, "url": link,
                                 "source_url": source_url}
    if discovered_at is not None:
        record["discovered_at"] = discovered_at
    return Out(FRONTIER, link.encode("utf-8", "surrogatepass"), orjson.dumps(record))


def warc_timestamp(value: str | None) -> str | None:
    """``WARC-Date`` (a W3C-DTF date, in practice RFC 3339 in UTC) as the records' RFC 3339 form.

    An unreadable date is left out rather than guessed: the stages then order by Kafka's timestamp.
    """
    if not value:
        return None
    try:
        return records.rfc3339(records.parse_rfc3339(value.strip()))
    except RecordRejected:
        return None


def http_headers(pairs: tuple[tuple[bytes, bytes], ...]) -> dict[str, str | list[str]]:
    """Header fields with lower-case names, a repeated field as the list of its values in order.

    Values are UTF-8 when they decode as such, else ISO-8859-1 (RFC 9110 section 5.5, obs-text):
    never a lone surrogate, which JSON cannot carry.
    """
    headers: dict[str, str | list[str]] = {}
    for raw_name, raw_value in pairs:
        name, value = raw_name.decode("latin-1").strip().lower(), _header_text(raw_value)
        if not name:
            continue
        known = headers.get(name)
        if known is None:
            headers[name] = value
        elif isinstance(known, list):
            known.append(value)
        else:
            headers[name] = [known, value]
    return headers


def _header_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return raw.decode("latin-1").strip()


def _last(value: str | list[str] | None) -> str | None:
    return value[-1] if isinstance(value, list) else value


def _joined(value: str | list[str]) -> str:
    return ", ".join(value) if isinstance(value, list) else value


# --- transfer and content codings ------------------------------------------------------------------


def decode_body(payload: bytes, headers: dict[str, str | list[str]]) -> bytes | Skip:
    """The entity body: de-chunked and decompressed; the coding fields are removed from ``headers``.

    A ``chunked`` body that does not parse is kept as it is (as warcio does: WARCs written by some
    tools keep the header after removing the coding). An unknown or broken content coding is a
    skip (``content_encoding``): the page cannot be read, and its compressed bytes would only look
    like a binary page to the stages.
    """
    transfer = _joined(headers.get("transfer-encoding", "")).lower()
    if "chunked" in transfer:
        dechunked = dechunk(payload)
        payload = payload if dechunked is None else dechunked
        headers.pop("transfer-encoding", None)
    codings = [c.strip().lower() for c in _joined(headers.get("content-encoding", "")).split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        decoded = decompress(payload, coding)
        if decoded is None:
            return Skip("content_encoding", coding)
        payload = decoded
    headers.pop("content-encoding", None)
    return payload


def dechunk(payload: bytes) -> bytes | None:
    """Undo HTTP/1.1 chunked transfer coding (RFC 9112 section 7.1); ``None`` when it does not parse."""
    out, position = bytearray(), 0
    while True:
        line_end = payload.find(b"\n", position)
        if line_end < 0:
            return None
        size_text = payload[position:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)
        start = line_end + 1
        if size < 0 or start + size > len(payload) or len(out) + size > MAX_BODY_BYTES:
            return None
        out += payload[start:start + size]
        position = start + size
        position += 2 if payload[position:position + 2] == b"\r\n" else 1


def decompress(data: bytes, coding: str) -> bytes | None:
    """One content coding undone, at most :data:`MAX_BODY_BYTES`; ``None`` if unknown or broken."""
    try:
        if coding in ("gzip", "x-gzip"):
            return _inflate(data, zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
        if coding == "deflate":  # RFC 9110 says zlib; some servers send raw deflate
            return _inflate(data, zlib.MAX_WBITS) if data[:1] == b"\x78" else _inflate(data, -zlib.MAX_WBITS)
        if coding == "br":
            return BrotliReader(io.BytesIO(data)).read(MAX_BODY_BYTES)
    except (zlib.error, OSError):
        return None
    return None


def _inflate(data: bytes, wbits: int) -> bytes:
    return zlib.decompressobj(wbits).decompress(data, MAX_BODY_BYTES)


# --- links -----------------------------------------------------------------------------------------


def page_links(body: bytes, headers: dict[str, str | list[str]], url: str, max_links: int) -> list[str]:
    """The links of an HTML body (charset found as the page stage finds it); none for other media."""
    flat = {name: _joined(value) for name, value in headers.items()}
    decoded = decode_page(body, flat.get("content-type"), flat)
    if not isinstance(decoded, DecodedPage) or decoded.media != "html":
        return []
    return extract_links(decoded.text, url, max_links)


def extract_links(html: str, page_url: str, max_links: int = DEFAULT_MAX_LINKS) -> list[str]:
    """Absolute http(s) URLs of the ``<a>`` and ``<area>`` links, in document order, each once.

    Parsed with resiliparse (lexbor, an HTML5 parser: no regular expression over the markup, so no
    backtracking on hostile pages) and walked once with ``traverse_dom``: iterating a
    ``query_selector_all`` result costs quadratic time in resiliparse 2.0.1
    (docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis, measured"). The first
    ``<base href>`` applies. Links to the page itself (``#top``, ``""``) are left out.
    """
    document = HTMLTree.parse(html).document
    root = document.first_element_child if document is not None else None  # <html>, always made
    if root is None:
        return []
    hrefs, bases = _hrefs(root)
    base = (resolve_link(bases[0], page_url) if bases else None) or page_url
    links: list[str] = []
    seen = {urldefrag(page_url)[0]}
    for href in hrefs:
        link = resolve_link(href, base)
        if link is None or link in seen:
            continue
        seen.add(link)
        links.append(link)
        if len(links) >= max_links:
            break
    return links


def _hrefs(root: Node) -> tuple[list[str], list[str]]:
    """The ``href`` of every link element and of every ``<base>`` under ``root``, in document order."""
    hrefs: list[str] = []
    bases: list[str] = []

    def visit(context: DOMContext) -> None:
        node = context.node
        if isinstance(node, ElementNode) and node.tag in _LINK_TAGS:
            href = node.get_attribute("href")
            if href is not None:
                (bases if node.tag == "base" else hrefs).append(href)

    traverse_dom(root, visit, elements_only=True)
    return hrefs, bases


def resolve_link(href: str, base: str) -> str | None:
    """``href`` resolved against ``base`` without its fragment; ``None`` unless http(s) with a host."""
    try:
        resolved, _ = urldefrag(urljoin(base, href.strip(_URL_SPACE)))
        parts = urlsplit(resolved)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return None
    if parts.scheme.lower() not in _HTTP_SCHEMES or not parts.netloc:
        return None
    return resolved
