"""A response as a WARC/1.1 ``revisit`` record of the identical-payload-digest profile.

ISO 28500:2017 (WARC 1.1) section 6.7.2: a revisit record "should be used instead of a response
record" when the payload is identical to an earlier capture's, so that the payload is stored once;
its ``WARC-Profile`` is ``http://netpreserve.org/warc/1.1/revisit/identical-payload-digest``,
``WARC-Payload-Digest`` is mandatory, and ``WARC-Refers-To-Target-URI`` and ``WARC-Refers-To-Date``
(new in 1.1, section 5.11 and 5.12) name the earlier capture, ``WARC-Refers-To`` its record where
known. The block keeps the HTTP status line and header fields ("the record block may contain ... the
HTTP headers"), so a replay tool serves the revisit's own status and headers with the original's
payload, as pywb does (``ResolvingLoader``: headers from the revisit, payload from the record its
index finds by refers-to URI, date and digest).

What is kept of the response: its ``WARC-Record-ID`` (request and metadata records refer to it
through ``WARC-Concurrent-To``, and the capture it names is the same one), ``WARC-Date``,
``WARC-Target-URI`` and every other field but the ones that describe the block or payload it no
longer has (:data:`REPLACED`). ``WARC-Block-Digest`` is computed for the new block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from streams.archives.payload import format_sha1, sha1_of

PROFILE: Final = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
VERSION_LINE: Final = b"WARC/1.1\r\n"
HTTP_RESPONSE_TYPE: Final = "application/http; msgtype=response"
# Fields of the response that describe its block or payload, rewritten for the revisit's.
REPLACED: Final = frozenset({"warc-type", "content-length", "content-type", "warc-block-digest",
                             "warc-payload-digest", "warc-truncated", "warc-profile",
                             "warc-refers-to", "warc-refers-to-target-uri", "warc-refers-to-date"})


@dataclass(frozen=True, slots=True)
class Capture:
    """The earlier capture a revisit refers to: its target URI, ``WARC-Date`` as it was written,
    ``WARC-Record-ID`` (None when only an index named it), and ``WARC-Payload-Digest`` as the
    capture declares it (the revisit repeats it, so a replay tool's index finds that capture by
    it: :mod:`streams.archives.dedup` says why it is not always recomputed)."""

    uri: str
    date: str
    record_id: str | None
    digest: str


def revisit_fields(response: tuple[tuple[str, str], ...], original: Capture) -> list[tuple[str, str]]:
    """The header fields of the revisit that replaces ``response`` (``Content-Length`` and
    ``WARC-Block-Digest`` are added by :func:`revisit_record`)."""
    fields: list[tuple[str, str]] = [("WARC-Type", "revisit")]
    fields += [(name, value) for name, value in response if name.lower() not in REPLACED]
    fields += [("WARC-Profile", PROFILE), ("WARC-Refers-To-Target-URI", original.uri),
               ("WARC-Refers-To-Date", original.date)]
    if original.record_id:
        fields.append(("WARC-Refers-To", original.record_id))
    fields += [("WARC-Payload-Digest", original.digest), ("Content-Type", HTTP_RESPONSE_TYPE)]
    return fields


def revisit_record(response: tuple[tuple[str, str], ...], http_head: bytes, original: Capture) -> bytes:
    """The revisit record's bytes, its closing CRLFs included: ``http_head`` (the response's status
    line and header fields, through their empty line) is its block."""
    fields = revisit_fields(response, original)
    fields += [("WARC-Block-Digest", format_sha1(sha1_of(http_head))),
               ("Content-Length", str(len(http_head)))]
    lines = b"".join(f"{name}: {_one_line(value)}\r\n".encode("utf-8", "surrogateescape")
                     for name, value in fields)
    return VERSION_LINE + lines + b"\r\n" + http_head + b"\r\n\r\n"


def _one_line(value: str) -> str:
    """A field value on one line (a value read from a continuation line was joined already)."""
    return value.replace("\r", " ").replace("\n", " ")
