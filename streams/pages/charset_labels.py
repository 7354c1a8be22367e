"""What a charset label names, and the label a page's first bytes declare.

:func:`codec_for_label` maps a label to the Python codec that decodes what the label names, as the
WHATWG Encoding Standard §4.2 "get an encoding" does, then to the superset decoders of
:data:`SUPERSET_CODECS`. :func:`prescan_charset` is the WHATWG HTML Standard §13.2.3.2 prescan: the
charset of the first usable ``<meta>`` in the first 1,024 bytes. Both serve
:func:`streams.pages.decode.decode_page`, which orders them among the other sources of a charset.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from resiliparse.parse.encoding import map_encoding_to_html5

ASCII_WHITESPACE: Final = b"\t\n\x0c\r "  # ASCII whitespace, WHATWG Infra

# WHATWG Encoding §4.2 maps labels to encodings whose decoders are supersets of what the label
# names; these Python codecs decode those supersets (e.g. GBK pages routinely use GB18030-only
# characters, Shift_JIS pages the NEC/IBM extensions of cp932). Keys are ``codecs.lookup`` names.
SUPERSET_CODECS: Final = {
    "gb2312": "gb18030", "gbk": "gb18030", "shift_jis": "cp932", "euc_kr": "cp949",
    "big5": "big5hkscs", "ascii": "cp1252", "iso8859-1": "cp1252", "iso8859-9": "cp1254",
    "iso8859-11": "cp874", "tis-620": "cp874",
}


def codec_for_label(label: str) -> str | None:
    """The Python codec for a charset label per WHATWG Encoding §4.2 "get an encoding" (labels
    are matched after trimming ASCII whitespace, case-insensitively), then :data:`SUPERSET_CODECS`;
    None for labels the Standard does not know (a declaration to ignore, never a guess)."""
    name = map_encoding_to_html5(label.strip("\t\n\x0c\r ").lower(), fallback_utf8=False)
    canonical = python_name(name) if name else None
    return SUPERSET_CODECS.get(canonical, canonical) if canonical else None


def python_name(codec: str) -> str | None:
    try:
        return codecs.lookup(codec).name
    except LookupError:
        return None


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
        rest = content[position:].lstrip(ASCII_WHITESPACE)
        if not rest.startswith(b"="):
            continue
        rest = rest[1:].lstrip(ASCII_WHITESPACE)
        if rest[:1] in (b'"', b"'"):
            label, closed, _ = rest[1:].partition(rest[:1])
            return label.decode("latin-1") if closed else None
        label = re.split(rb"[\t\n\x0c\r ;]", rest, maxsplit=1)[0]
        return label.decode("latin-1") or None
    return None
