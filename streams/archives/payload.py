"""The WARC payload digest: ``sha1:`` and the base32 of the SHA-1 of the HTTP entity body.

WARC 1.1 (ISO 28500:2017) section 5.9 defines ``WARC-Payload-Digest`` over the record's payload,
and for an ``application/http`` block "the payload ... is its 'entity-body' (per RFC 2616)": the
message body with its *transfer* coding removed (RFC 2616 section 4.3; RFC 9112 section 7.1 for
``chunked``) and its *content* coding kept (``Content-Encoding`` is an entity header: a gzipped
page's payload is the gzip bytes). The IIPC's clarification of the specification
(iipc/warc-specifications#22) says so for chunked bodies, and wget-lua (#13) and Heritrix
(heritrix3#769, fixed by #770) now digest after de-chunking. warcio 1.8.1 does not: its writer
(``recordbuilder.ensure_digest``), its ``check`` command (``DigestVerifyingReader``) and pywb's
indexer (``archiveindexer``, when a record declares no digest) all hash the stored message body,
chunk framing included (webrecorder/warcio#74, #75, open). For a body that is not chunked (nearly
all) the two agree; :mod:`streams.archives.dedup` says what it does where they do not.

SHA-1 in base32 (RFC 4648 section 6) is what Heritrix, warcprox, wget and warcio write and what CDX
indexes carry, so a digest here compares with theirs as text. The body is hashed whole; a ``chunked``
body that does not parse is hashed as stored, as :func:`streams.ops.warc.decode_body` keeps it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Final

from streams.ops.warc import dechunk

SHA1_BYTES: Final = 20
PREFIX: Final = "sha1:"


def is_chunked(transfer_encoding: str | None) -> bool:
    """Whether a ``Transfer-Encoding`` value (repeated fields joined by commas) ends in ``chunked``."""
    if not transfer_encoding:
        return False
    codings = [coding.strip().lower() for coding in transfer_encoding.split(",")]
    return "chunked" in codings


def dechunked(body: bytes, transfer_encoding: str | None) -> bytes | None:
    """The entity body of a message body whose header says ``chunked`` and which parses as chunks
    (at most 64 MiB of them, :data:`streams.ops.warc.MAX_BODY_BYTES`); None for any other body,
    whose entity body is the body as stored."""
    return dechunk(body) if is_chunked(transfer_encoding) else None


def entity_body(body: bytes, transfer_encoding: str | None) -> bytes:
    """The entity body of a message body (see :func:`dechunked`)."""
    found = dechunked(body, transfer_encoding)
    return body if found is None else found


def sha1_of(entity: bytes) -> bytes:
    return hashlib.sha1(entity, usedforsecurity=False).digest()


def payload_digest(body: bytes, transfer_encoding: str | None = None) -> str:
    """``WARC-Payload-Digest`` of a message body (see the module docstring)."""
    return format_sha1(sha1_of(entity_body(body, transfer_encoding)))


def format_sha1(digest: bytes) -> str:
    """20 bytes of SHA-1 as ``sha1:`` and 32 base32 characters."""
    return PREFIX + base64.b32encode(digest).decode("ascii")


def parse_sha1(text: str) -> bytes | None:
    """The 20 bytes of a SHA-1 digest as archives write it: ``sha1:`` and base32 (or base16, which
    RFC 4648 and warcio accept too), or the bare base32 a CDX index carries; None for another
    algorithm or anything malformed."""
    value = text.strip()
    algorithm, colon, rest = value.partition(":")
    if colon:
        if algorithm.strip().lower() != "sha1":
            return None
        value = rest.strip()
    try:
        if len(value) == 32:
            return base64.b32decode(value.upper())
        if len(value) == 2 * SHA1_BYTES:
            return bytes.fromhex(value)
    except (binascii.Error, ValueError):
        return None
    return None
