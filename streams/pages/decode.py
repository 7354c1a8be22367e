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
superset (:data:`SUPERSET_CODECS`). Reason codes and the measured choice of detector:
``docs/extraction.md``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

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

# WHATWG Encoding §4.2 maps labels to encodings whose decoders are supersets of what the label
# names; these Python codecs decode those supersets (e.g. GBK pages routinely use GB18030-only
# characters, Shift_JIS pages the NEC/IBM extensions of cp932). Keys are ``codecs.lookup`` names.
SUPERSET_CODECS: Final = {
    "gb2312": "gb18030", "gbk": "gb18030", "shift_jis": "cp932", "euc_kr": "cp949",
    "big5": "big5hkscs", "ascii": "cp1252", "iso8859-1": "cp1252", "iso8859-9": "cp1254",
    "iso8859-11": "cp874", "tis-620": "cp874",
}
# uchardet's Python names that the WHATWG label table does not know (they are its supersets).
_DETECTED_NAMES: Final = frozenset({"cp949", "cp932", "cp874", "euc_jis_2004", "big5hkscs", "mac-cyrillic"})
_BOMS: Final = ((b"\xef\xbb\xbf", "utf-8"), (b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le"))

_WS: Final = b"\t\n\x0c\r "  # ASCII whitespace, WHATWG Infra
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
    start = head.lstrip(_WS)
    if _HTML_START.match(start) or _HTML_NEAR.search(head[:PRESCAN_BYTES]):
        return "html"
    return "text"


def _has_bom(head: bytes) -> bool:
    return head.startswith(tuple(bom for bom, _ in _BOMS))


def _bom_free_ascii(head: bytes) -> bytes:
    """The ASCII bytes of a BOM-marked head (UTF-16 NULs dropped), for pattern matching."""
    return head.replace(b"\x00", b"")


# --- charset -------------------------------------------------------------------------------


def codec_for_label(label: str) -> str | None:
    """The Python codec for a charset label per WHATWG Encoding §4.2 "get an encoding" (labels
    are matched after trimming ASCII whitespace, case-insensitively), then :data:`SUPERSET_CODECS`;
    None for labels the Standard does not know (a declaration to ignore, never a guess)."""
    name = map_encoding_to_html5(label.strip("\t\n\x0c\r ").lower(), fallback_utf8=False)
    canonical = _python_name(name) if name else None
    return SUPERSET_CODECS.get(canonical, canonical) if canonical else None


def _python_name(codec: str) -> str | None:
    try:
        return codecs.lookup(codec).name
    except LookupError:
        return None


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
    canonical = _python_name(name) if name else None
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


def prescan_charset(head: bytes) -> str | None:
    """WHATWG HTML §13.2.3.2 "prescan a byte stream to determine its encoding": the codec named by
    the first usable ``<meta>`` in ``head``, skipping comments and other tags' attributes."""
    position, end = head.find(b"<"), len(head)
    while 0 <= position < end:
        if head.startswith(b"<!--", position):
            close = head.find(b"-->", position + 2)
            position = end if close < 0 else close + 3
            continue
        if head[position:position + 5].lower() == b"<meta" and head[position + 5:position + 6] in (
                b"\t", b"\n", b"\x0c", b"\r", b" ", b"/"):
            codec, position = _meta_charset(head, position + 5)
            if codec:
                return codec
            continue
        if re.match(rb"</?[A-Za-z]", head[position:position + 3]):
            position = _skip_tag(head, position)
            continue
        if head[position:position + 2] in (b"<!", b"</", b"<?"):
            close = head.find(b">", position + 2)
            position = end if close < 0 else close + 1
            continue
        position = head.find(b"<", position + 1)  # the Standard steps byte by byte to the next "<"
    return None


def _skip_tag(head: bytes, position: int) -> int:
    """Past a start or end tag and its attributes (the prescan's "<" + letter branch)."""
    while position < len(head) and head[position] not in b"\t\n\x0c\r >":
        position += 1
    while (attribute := _get_attribute(head, position)) is not None:
        position = attribute[2]
    return position + 1


def _meta_charset(head: bytes, position: int) -> tuple[str | None, int]:
    """The prescan's ``<meta>`` branch: ``(codec or None, position after the tag)``."""
    seen: set[bytes] = set()
    got_pragma, need_pragma, charset, declared = False, None, None, False
    while (attribute := _get_attribute(head, position)) is not None:
        name, value, position = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == b"http-equiv" and value == b"content-type":
            got_pragma = True
        elif name == b"content" and not declared:
            label = _charset_from_content(value)
            if label is not None:
                charset, declared, need_pragma = codec_for_label(label), True, True
        elif name == b"charset":
            charset, declared, need_pragma = codec_for_label(value.decode("latin-1")), True, False
    position += 1
    if need_pragma is None or (need_pragma and not got_pragma) or charset is None:
        return None, position
    if charset.startswith("utf-16"):  # a document that parses as ASCII here is not UTF-16
        return "utf-8", position
    return charset, position


def _get_attribute(head: bytes, position: int) -> tuple[bytes, bytes, int] | None:
    """WHATWG HTML §13.2.3.2 "get an attribute": ``(name, value, position after it)`` with names
    and unquoted values lower-cased, or None at ``>`` or the end."""
    end = len(head)
    while position < end and head[position] in b"\t\n\x0c\r /":
        position += 1
    if position >= end or head[position] == 0x3E:
        return None
    name = bytearray()
    while position < end:
        byte = head[position]
        if byte == 0x3D and name:  # "="
            return _attribute_value(head, position + 1, bytes(name))
        if byte in b"\t\n\x0c\r ":
            break
        if byte in b"/>":
            return bytes(name), b"", position
        name.append(byte | 0x20 if 0x41 <= byte <= 0x5A else byte)
        position += 1
    while position < end and head[position] in b"\t\n\x0c\r ":
        position += 1
    if position >= end or head[position] != 0x3D:
        return (bytes(name), b"", position) if position < end else None
    return _attribute_value(head, position + 1, bytes(name))


def _attribute_value(head: bytes, position: int, name: bytes) -> tuple[bytes, bytes, int] | None:
    end = len(head)
    while position < end and head[position] in b"\t\n\x0c\r ":
        position += 1
    if position >= end:
        return None
    quote = head[position]
    if quote in b"\"'":
        close = head.find(bytes([quote]), position + 1)
        return None if close < 0 else (name, head[position + 1:close].lower(), close + 1)
    if quote == 0x3E:
        return name, b"", position
    stop = position
    while stop < end and head[stop] not in b"\t\n\x0c\r >":
        stop += 1
    return None if stop >= end else (name, head[position:stop].lower(), stop)


def _charset_from_content(content: bytes) -> str | None:
    """WHATWG HTML §2.4 "extracting a character encoding from a meta element" (``content`` of a
    ``http-equiv`` meta, already lower-cased): the label after ``charset=``, or None."""
    position = 0
    while (found := content.find(b"charset", position)) >= 0:
        position = found + 7
        rest = content[position:].lstrip(_WS)
        if not rest.startswith(b"="):
            continue
        rest = rest[1:].lstrip(_WS)
        if rest[:1] in (b'"', b"'"):
            label, closed, _ = rest[1:].partition(rest[:1])
            return label.decode("latin-1") if closed else None
        label = re.split(rb"[\t\n\x0c\r ;]", rest, maxsplit=1)[0]
        return label.decode("latin-1") or None
    return None
