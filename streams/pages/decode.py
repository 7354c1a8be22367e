"""A fetched body as Unicode text, or the reason it is not a page we read.

:func:`decode_page` is total: any body, content type and headers give a :class:`DecodedPage` or a
:class:`Skipped`, never an exception, and nothing is dropped without a reason.

**Media.** The media type comes from ``Content-Type`` (RFC 9110 §8.3; several values joined by
commas are read as the Fetch Standard's "extract a MIME type" does: the last valid one wins).
``text/html`` and ``application/xhtml+xml`` are ``"html"``; ``text/plain`` and the few other
prose types of :data:`TEXT_TYPES` are ``"text"``; everything else is skipped as
``content_type:<type>``. A missing, malformed or placeholder type is sniffed after the WHATWG MIME
Sniffing Standard §7.1 ("identifying a resource with an unknown MIME type"), lightly: known binary
signatures and binary data bytes in the first 1,445 bytes mean ``binary_body``; HTML tags near the
start mean ``"html"``; the rest is ``"text"``.

**Charset** (bytes only), the first that applies, as the WHATWG HTML Standard §13.2.3 "determining
the character encoding" orders them: a byte order mark; the ``charset`` parameter of the
Content-Type header; for HTML, ``<meta charset>`` or ``<meta http-equiv=content-type>`` found by
the HTML prescan (§13.2.3.2) in the first 1,024 bytes; detection (uchardet, through resiliparse);
UTF-8. A declared or detected charset that does not decode the body strictly is passed over;
when none does, the most trusted one decodes with U+FFFD replacements. Labels map to codecs as
the WHATWG Encoding Standard §4.2 says, then to the Python codec that decodes the Standard's
superset (:mod:`streams.pages.charset_labels`, which also holds the prescan). Reason codes and the
measured choice of detector: ``docs/extraction.md``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from resiliparse.parse.encoding import detect_encoding

from streams.pages.charset_labels import ASCII_WHITESPACE, codec_for_label, prescan_charset, python_name

HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES: Final = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
# Types that say nothing about the body (WHATWG MIME Sniffing §7.1 sniffs these too).
_UNKNOWN_TYPES: Final = frozenset({"unknown/unknown", "application/unknown", "*/*"})

SNIFF_BYTES: Final = 1445  # WHATWG MIME Sniffing §5.2: the resource header is at most 1,445 bytes
PRESCAN_BYTES: Final = 1024  # WHATWG HTML §13.2.3.2: the prescan reads the first 1,024 bytes
# A longer Content-Type is no usable type (the body is sniffed): RFC 9110 sets no limit, but servers
# keep whole header sections under 8-64 KB, and the quoted-string scan's cost grows with every
# character (docs/extraction.md, "Media type and skip reasons", has the figure).
MAX_CONTENT_TYPE_CHARS: Final = 64 * 1024

# uchardet's Python names that the WHATWG label table does not know (they are its supersets).
_DETECTED_NAMES: Final = frozenset({"cp949", "cp932", "cp874", "euc_jis_2004", "big5hkscs", "mac-cyrillic"})
_BOMS: Final = ((b"\xef\xbb\xbf", "utf-8"), (b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le"))

_BINARY_BYTES: Final = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")  # MIME Sniffing §4.6
# Signatures of MIME Sniffing §6 (images, audio/video, archives) and PDF that no text starts with.
# Those that prose can start with ("BM", "ID3", "RIFF", "OggS") are left to the binary-byte test,
# which their headers' size fields fail anyway.
_SIGNATURES: Final = (
    b"%PDF-", b"GIF87a", b"GIF89a", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"\x00\x00\x01\x00",
    b"\x1aE\xdf\xa3", b"\x1f\x8b\x08", b"PK\x03\x04", b"Rar!\x1a\x07", b"7z\xbc\xaf\x27\x1c",
    b"\x00\x00\x00\x18ftyp", b"\x00\x00\x00\x1cftyp", b"\x00\x00\x00\x20ftyp",
)
# MIME Sniffing §7.1 HTML patterns: after leading whitespace, one of these and a space or ">".
_HTML_START: Final = re.compile(
    rb"<(?:!doctype html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)[\s>]",
    re.IGNORECASE)
# The light part: these further in (after an XML declaration, a comment, stray text).
_HTML_NEAR: Final = re.compile(rb"<(?:!doctype html|html|head|body)[\s>]", re.IGNORECASE)
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2 token
_QUOTED: Final = re.compile(r'"((?:[^"\\]|\\.)*)"?')  # RFC 9110 §5.6.4, an unclosed one to the end
_QUOTED_PAIR: Final = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class DecodedPage:
    """A page as text: ``media`` is ``"html"`` or ``"text"``; ``charset`` is the Python codec that
    decoded it (``"utf-8"`` for text the fetcher already decoded, which reached us as a JSON
    string); ``charset_source`` says where the charset came from: ``given``, ``bom``,
    ``header``, ``meta``, ``detected`` or ``default``."""

    text: str
    media: str
    charset: str
    charset_source: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A body that is not a page we read: ``empty_body``, ``binary_body`` or ``content_type:<type>``."""

    reason: str


def decode_page(body: bytes | str, content_type: str | None,
                headers: Mapping[str, str]) -> DecodedPage | Skipped:
    """Decode a fetched body; ``content_type`` wins over ``headers["content-type"]`` (keys are
    lower-case)."""
    if not body or not body.strip():
        return Skipped("empty_body")
    parsed = parse_content_type(content_type if content_type is not None else headers.get("content-type"))
    essence, header_charset = parsed if parsed else (None, None)
    head = body[:SNIFF_BYTES].encode("utf-8", "replace") if isinstance(body, str) else body[:SNIFF_BYTES]
    media = _media(essence, head)
    if isinstance(media, Skipped):
        return media
    if isinstance(body, str):
        return DecodedPage(valid_unicode(body), media, "utf-8", "given")
    text, charset, source = _decode_bytes(body, header_charset, media == "html")
    return DecodedPage(text, media, charset, source)


def valid_unicode(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD, so it encodes
    to UTF-8 (Python strings may hold surrogates; parsers and digests then raise)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


# --- media type ----------------------------------------------------------------------------


def parse_content_type(value: str | None) -> tuple[str, str | None] | None:
    """``(essence, charset label or None)`` of a Content-Type value, or None if no valid type.

    RFC 9110 §8.3.1: ``type "/" subtype *( OWS ";" OWS parameter )``, tokens, case-insensitive
    type and parameter names, quoted-string values. Of comma-joined values the last valid one
    counts, keeping an earlier charset of the same essence (Fetch Standard, "extract a MIME type").
    A value longer than :data:`MAX_CONTENT_TYPE_CHARS` gives None.
    """
    if not value or len(value) > MAX_CONTENT_TYPE_CHARS:
        return None
    result: tuple[str, str | None] | None = None
    for part in _split_unquoted(value, ","):
        fields = _split_unquoted(part, ";")
        type_, _, subtype = fields[0].strip(" \t").lower().partition("/")
        if not (_TOKEN.fullmatch(type_) and _TOKEN.fullmatch(subtype)):
            continue
        charset = _parameter(fields[1:], "charset")
        if result is not None and result[0] == f"{type_}/{subtype}" and charset is None:
            charset = result[1]
        result = (f"{type_}/{subtype}", charset)
    return result


def _split_unquoted(value: str, separator: str) -> list[str]:
    """Split at ``separator`` outside RFC 9110 §5.6.4 quoted strings."""
    parts, start, quoted, escaped = [], 0, False, False
    for index, char in enumerate(value):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(value[start:index])
            start = index + 1
    parts.append(value[start:])
    return parts


def _parameter(fields: list[str], wanted: str) -> str | None:
    """The value of the first parameter named ``wanted``, a quoted string unescaped, or None."""
    for field in fields:
        name, equals, raw = field.partition("=")
        if not equals or name.strip(" \t").lower() != wanted:
            continue
        raw = raw.strip(" \t")
        quoted = _QUOTED.match(raw)
        if quoted:
            raw = _QUOTED_PAIR.sub(r"\1", quoted.group(1))
        return raw or None
    return None


def _media(essence: str | None, head: bytes) -> str | Skipped:
    """``"html"``, ``"text"`` or why not, from the declared type or, lacking one, the first bytes."""
    if essence is None or essence in _UNKNOWN_TYPES:
        return sniff_media(head)
    if essence in HTML_TYPES or essence in TEXT_TYPES:
        if head.startswith(_SIGNATURES):  # e.g. an image or a still-gzipped body labelled as HTML
            return Skipped("binary_body")
        if essence in TEXT_TYPES and not _has_bom(head) and _BINARY_BYTES.search(head):
            return Skipped("binary_body")  # MIME Sniffing §7.2: servers label binaries text/plain
        return "html" if essence in HTML_TYPES else "text"
    return Skipped(f"content_type:{essence}")


def sniff_media(head: bytes) -> str | Skipped:
    """WHATWG MIME Sniffing §7.1, lightly: the media of a body with no usable Content-Type."""
    if _has_bom(head):
        return "text" if not _HTML_NEAR.search(_bom_free_ascii(head)) else "html"
    if head.startswith(_SIGNATURES) or _BINARY_BYTES.search(head):
        return Skipped("binary_body")
    start = head.lstrip(ASCII_WHITESPACE)
    if _HTML_START.match(start) or _HTML_NEAR.search(head[:PRESCAN_BYTES]):
        return "html"
    return "text"


def _has_bom(head: bytes) -> bool:
    return head.startswith(tuple(bom for bom, _ in _BOMS))


def _bom_free_ascii(head: bytes) -> bytes:
    """The ASCII bytes of a BOM-marked head (UTF-16 NULs dropped), for pattern matching."""
    return head.replace(b"\x00", b"")


# --- charset -------------------------------------------------------------------------------


def _decode_bytes(body: bytes, header_label: str | None, html: bool) -> tuple[str, str, str]:
    """``(text, codec, source)``: BOM, header, meta, detection, default, as the module says."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return _decode(body[len(bom):], codec, "replace"), codec, "bom"
    candidates: list[tuple[str, str]] = []
    header_codec = codec_for_label(header_label) if header_label else None
    if header_codec:
        candidates.append((header_codec, "header"))
    meta_codec = prescan_charset(body[:PRESCAN_BYTES]) if html else None
    if meta_codec and meta_codec != header_codec:  # tried when a header charset does not decode
        candidates.append((meta_codec, "meta"))
    for codec, source in candidates:
        text = _decode_strict(body, codec)
        if text is not None:
            return text, codec, source
    detected = detect_charset(body)
    if detected and all(detected != codec for codec, _ in candidates):
        text = _decode_strict(body, detected)
        if text is not None:
            return text, detected, "detected"
        candidates.append((detected, "detected"))
    codec, source = candidates[0] if candidates else ("utf-8", "default")
    return _decode(body, codec, "replace"), codec, source


def detect_charset(body: bytes) -> str | None:
    """uchardet's guess (via resiliparse), mapped like a label; None when it has none.

    resiliparse's own WHATWG remapping turns uchardet's ``cp949`` (EUC-KR pages) into UTF-8, so
    the raw Python name is mapped here instead. Measured against charset-normalizer on the test
    samples: ``docs/extraction.md``."""
    name = detect_encoding(body, html5_compatible=False)
    canonical = python_name(name) if name else None
    if canonical is None or canonical in _DETECTED_NAMES:
        return canonical
    return codec_for_label(canonical)


def _decode_strict(body: bytes, codec: str) -> str | None:
    """``body`` decoded strictly, tolerating a sequence cut short at the end (fetchers truncate
    bodies at a size limit), or None if it is not in ``codec``."""
    try:
        return codecs.getincrementaldecoder(codec)("strict").decode(body, final=False)
    except UnicodeDecodeError:
        return None


def _decode(body: bytes, codec: str, errors: str) -> str:
    return codecs.getincrementaldecoder(codec)(errors).decode(body, final=False)
