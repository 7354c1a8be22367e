"""Which WARC response becomes a revisit record: the decision, over an index of first captures.

A ``response`` record becomes a revisit (:mod:`streams.archives.revisit`) when an earlier capture
had a byte-identical payload: the same SHA-1 of the entity body (:mod:`streams.archives.payload`),
computed here from the bytes, never taken from a ``WARC-Payload-Digest`` the record declares (a
wrong declaration must not turn a different payload into a revisit: in an archive that is data
loss). Near-duplicates never become revisits: a single byte of difference keeps a response. Every
other record (``warcinfo``, ``request``, ``metadata``, ``resource``, ``revisit``...) passes
through, as do responses that cannot or should not be revisits, each counted with its reason:

- ``not_http``: no ``application/http`` block, or no HTTP status line and header end in it;
- ``segmented``: a record continued in others (``WARC-Segment-Number``, section 5.16);
- ``empty_payload``: a payload under ``min_payload_bytes`` (1: an empty one) saves nothing;
- ``same_capture``: the index holds this very capture (its record ID, else its URI and date):
  a run given an input twice, or an output as input, must not make a capture its own revisit.

The index is keyed by the SHA-1 and the body's *framing*: whether its HTTP header says
``Transfer-Encoding: chunked``. A replay tool serves a revisit's own header fields over the
original's stored body, and de-chunks that body or not as those fields say (pywb's
``RewriteInfo.is_chunked``): a chunked original behind an unchunked revisit would be served with
its chunk framing in the page. So chunked and unchunked captures of one payload are two first
captures, each referred to by its own kind.

A capture becomes the one later copies refer to (``first_capture``) unless a replay tool could not
find it by the digest a revisit carries (``not_referable``): the revisit repeats the digest the
capture *declares* (``WARC-Payload-Digest``; pywb's index takes that, whatever algorithm it names),
and when it declares none, replay tools compute one from the stored body, which for a chunked body
includes the chunk framing in warcio and pywb (webrecorder/warcio#74) and excludes it in the WARC
specification, so a de-chunked, undeclared capture is left as a response that nothing refers to:
the next copy of its payload becomes the first capture instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from streams.archives import payload
from streams.archives.revisit import Capture, revisit_record
from streams.archives.warc_records import Record

CHUNKED, UNCHUNKED = b"c", b"i"
KEY_BYTES: Final = payload.SHA1_BYTES + 1
HTTP_SCHEMES: Final = ("http:", "https:")


class CaptureIndex(Protocol):
    """The first captures known, by :func:`capture_key` (the state directory, or a dict in tests)."""

    def get(self, key: bytes) -> Capture | None: ...

    def put(self, key: bytes, capture: Capture) -> None: ...


class MemoryIndex:
    """A :class:`CaptureIndex` in a dict."""

    def __init__(self) -> None:
        self.captures: dict[bytes, Capture] = {}

    def get(self, key: bytes) -> Capture | None:
        return self.captures.get(key)

    def put(self, key: bytes, capture: Capture) -> None:
        self.captures[key] = capture


def capture_key(sha1: bytes, chunked: bool) -> bytes:
    """The index key of a payload: its SHA-1, then its framing (module docstring)."""
    return sha1 + (CHUNKED if chunked else UNCHUNKED)


@dataclass(frozen=True, slots=True)
class Response:
    """What a response record says about its payload (None from :func:`read_response`: not one)."""

    http_head: bytes
    body: bytes
    chunked: bool  # the header says chunked
    dechunked: bool  # and the body parsed as chunks: its entity body is not the body stored
    sha1: bytes
    declared: str | None


def split_http(block: bytes) -> tuple[bytes, bytes] | None:
    """An HTTP response message as (status line and header fields through their empty line, body)."""
    if not block.startswith(b"HTTP/"):
        return None
    end = block.find(b"\r\n\r\n")
    if end < 0:
        return None
    return block[:end + 4], block[end + 4:]


def read_response(record: Record) -> Response | str:
    """The payload facts of a response record, or the reason it passes through as it is."""
    if record.field("WARC-Segment-Number") is not None:
        return "segmented"
    content_type = (record.field("Content-Type") or "").lower()
    uri = (record.field("WARC-Target-URI") or "").strip("<> ").lower()
    if "application/http" not in content_type or not uri.startswith(HTTP_SCHEMES):
        return "not_http"
    parts = split_http(record.block)
    if parts is None:
        return "not_http"
    head, body = parts
    transfer = transfer_encoding(head)
    entity = payload.dechunked(body, transfer)
    return Response(head, body, payload.is_chunked(transfer), entity is not None,
                    payload.sha1_of(body if entity is None else entity), record.field("WARC-Payload-Digest"))


def transfer_encoding(http_head: bytes) -> str:
    """The ``Transfer-Encoding`` of an HTTP header block, repeated fields joined (RFC 9110 5.3)."""
    values = []
    for line in http_head.decode("latin-1").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() == "transfer-encoding":
            values.append(value.strip())
    return ", ".join(values)


def same_capture(record: Record, capture: Capture) -> bool:
    """Whether ``capture`` is ``record`` itself (by record ID, else by target URI and date)."""
    record_id = record.field("WARC-Record-ID")
    if record_id is not None and capture.record_id is not None:
        return record_id == capture.record_id
    return (record.field("WARC-Target-URI") == capture.uri and record.field("WARC-Date") == capture.date)


def referable(response: Response) -> bool:
    """Whether a replay tool finds this capture by the digest a revisit would carry (module docstring)."""
    return response.declared is not None or not response.dechunked


@dataclass(frozen=True, slots=True)
class DedupSettings:
    """``min_payload_bytes``: smaller payloads stay responses (an empty one saves nothing)."""

    min_payload_bytes: int = 1


Write = Callable[[Record], int]
WriteRaw = Callable[[bytes], int]


class Deduplicator:
    """Records in, records out: each response whose payload an earlier capture had, as a revisit.

    ``tally`` counts records by type in and out, the reasons responses stayed responses, revisits
    written and the uncompressed bytes they saved (the response's size less the revisit's).
    """

    def __init__(self, index: CaptureIndex, settings: DedupSettings | None = None) -> None:
        self._index = index
        self._settings = settings or DedupSettings()
        self.tally: Counter[str] = Counter()

    def process(self, record: Record, write: Write, write_raw: WriteRaw) -> None:
        """Decide ``record`` and write what it becomes: itself, or its revisit."""
        tally = self.tally
        kind = record.kind or "unknown"
        tally[f"in:{kind}"] += 1
        tally["bytes_in"] += len(record.head) + len(record.block) + 4
        revisit = self._revisit(record) if kind == "response" else None
        if revisit is None:
            tally[f"out:{kind}"] += 1
            write(record)
            return
        tally["out:revisit"] += 1
        tally["revisits"] += 1
        tally["bytes_saved"] += len(record.head) + len(record.block) + 4 - len(revisit)
        write_raw(revisit)

    def _revisit(self, record: Record) -> bytes | None:
        """The revisit ``record`` becomes, or None (it stays, counted by why)."""
        tally = self.tally
        response = read_response(record)
        if isinstance(response, str):
            tally[f"kept:{response}"] += 1
            return None
        if len(response.body) < self._settings.min_payload_bytes:
            tally["kept:empty_payload"] += 1
            return None
        key = capture_key(response.sha1, response.chunked)
        found = self._index.get(key)
        if found is not None:
            if same_capture(record, found):
                tally["kept:same_capture"] += 1
                return None
            return revisit_record(record.fields, response.http_head, found)
        if not referable(response):
            tally["kept:not_referable"] += 1
            return None
        self._index.put(key, Capture(
            uri=(record.field("WARC-Target-URI") or "").strip("<> "), date=record.field("WARC-Date") or "",
            record_id=record.field("WARC-Record-ID"),
            digest=response.declared or payload.format_sha1(response.sha1)))
        tally["kept:first_capture"] += 1
        return None
