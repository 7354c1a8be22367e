"""Hosts of URLs: the WHATWG URL Standard's host parser, as the canonicalizer needs it.

A host is an IPv6 literal (RFC 4291, written in the RFC 5952 short form), an IPv4 address in any
of the numeric forms browsers accept (1 to 4 parts, decimal, octal or hex; WHATWG "IPv4 parser"),
or a domain: percent-decoded once, mapped by UTS #46 and written as ASCII (``xn--`` Punycode,
RFC 3492). Names longer than DNS allows (RFC 1035 §2.3.4) are refused, which also bounds the
Punycode work on hostile input.
"""

from __future__ import annotations

import functools
import ipaddress
import string
import urllib.parse
from typing import Final

import idna

from streams.errors import RecordRejected

HEX: Final = frozenset(string.hexdigits)
DIGITS: Final = frozenset(string.digits)
_OCTAL: Final = frozenset(string.octdigits)
_IPV6_CHARS: Final = HEX | {":", "."}
C0_AND_SPACE: Final = "".join(chr(code) for code in range(0x21))  # WHATWG "C0 control or space"
# WHATWG "forbidden domain code point": forbidden host code points, C0 controls, "%" and DEL.
_FORBIDDEN_DOMAIN: Final = frozenset(C0_AND_SPACE + "#%/:<>?@[\\]^|\x7f")
_MAX_LABEL_OCTETS, _MAX_DOMAIN_OCTETS = 63, 253  # RFC 1035 §2.3.4: longer names cannot be resolved
_MAX_UNICODE_DOMAIN_CHARS: Final = 1024  # bounds UTS #46 mapping work; ignored characters may shrink a name
_MAX_NUMBER_DIGITS: Final = 11  # a 32-bit value has at most 11 significant digits in base 8, 10 or 16


@functools.lru_cache(maxsize=65_536)
def normalize_host(host: str) -> str:
    """WHATWG host parser: IPv6 literal, or percent-decoded domain to ASCII, or an IPv4 number.

    Cached: a crawl frontier names the same hosts over and over (a pure function; rejections
    raise and are not cached).
    """
    if host.startswith("["):
        return _normalize_ipv6(host[1:-1])
    if not host:
        raise RecordRejected("invalid_url", "URL has no host")
    labels = _domain_to_ascii(_percent_decode(host)).split(".")
    if len(labels) > 1 and not labels[-1]:
        labels.pop()  # the trailing dot of a fully qualified name
    if not all(labels):
        raise RecordRejected("invalid_url", "host has an empty label")
    if _ends_in_number(labels[-1]):
        return _ipv4_text(labels)
    domain = ".".join(labels)
    if len(domain) > _MAX_DOMAIN_OCTETS or any(len(label) > _MAX_LABEL_OCTETS for label in labels):
        raise RecordRejected("invalid_url", "host longer than DNS allows (RFC 1035 §2.3.4)")
    return domain


def _percent_decode(text: str) -> str:
    """Decode every escape once, then UTF-8 (WHATWG host parsing; RFC 3986 §3.2.2)."""
    try:
        return urllib.parse.unquote_to_bytes(text).decode("utf-8")  # one linear pass
    except UnicodeDecodeError as error:
        raise RecordRejected("invalid_url", "percent-encoded host is not UTF-8") from error


def _domain_to_ascii(domain: str) -> str:
    """UTS #46 ToASCII as WHATWG uses it (non-transitional, no STD3 rules, no hyphen checks).

    Non-ASCII labels become ``xn--`` + Punycode (RFC 3492); ``xn--`` labels must decode to a mapped
    non-ASCII label that encodes back to them.
    """
    if not domain.isascii() and len(domain) > _MAX_UNICODE_DOMAIN_CHARS:  # ours, not idna's bound
        raise RecordRejected("invalid_url", "internationalized host too long")
    try:  # for ASCII the whole UTS #46 mapping is lower-casing
        domain = domain.lower() if domain.isascii() else idna.uts46_remap(domain, False, False)
        labels = [_label_to_ascii(label) for label in domain.split(".")]
    except UnicodeError as error:
        raise RecordRejected("invalid_url", f"invalid internationalized host: {str(error)[:80]}") from error
    domain = ".".join(labels)
    if not _FORBIDDEN_DOMAIN.isdisjoint(domain):
        raise RecordRejected("invalid_url", "host contains a forbidden character")
    return domain


def _label_to_ascii(label: str) -> str:
    if label.isascii() and not label.startswith("xn--"):
        return label  # length checked by the caller, after the IPv4 forms (any length) are parsed
    if len(label) > _MAX_LABEL_OCTETS:  # checked before Punycode, whose cost grows quadratically
        raise RecordRejected("invalid_url", "host label longer than DNS allows (RFC 1035 §2.3.4)")
    if not label.isascii():
        return "xn--" + label.encode("punycode").decode("ascii")
    unicode_label = label[4:].encode("ascii").decode("punycode")
    if unicode_label.isascii() or idna.uts46_remap(unicode_label, False, False) != unicode_label:
        raise RecordRejected("invalid_url", f"invalid Punycode label {label!r}")
    if "xn--" + unicode_label.encode("punycode").decode("ascii") != label:
        raise RecordRejected("invalid_url", f"non-canonical Punycode label {label!r}")
    return label


def _ends_in_number(label: str) -> bool:
    """WHATWG "ends in a number": such a host must be a valid IPv4 address."""
    return DIGITS.issuperset(label) or (label.startswith("0x") and HEX.issuperset(label[2:]))


def _ipv4_text(labels: list[str]) -> str:
    """WHATWG IPv4 parser (1 to 4 numbers, last one fills the rest), serialised dotted decimal."""
    if len(labels) > 4:
        raise RecordRejected("invalid_url", "IPv4 address with more than 4 parts")
    numbers = [_ipv4_number(label) for label in labels]
    if any(number > 255 for number in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise RecordRejected("invalid_url", "IPv4 address part out of range")
    address = numbers[-1] + sum(number << (8 * (3 - index)) for index, number in enumerate(numbers[:-1]))
    return ".".join(str((address >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def _ipv4_number(label: str) -> int:
    """``0x`` prefix: hexadecimal; other leading ``0``: octal; else decimal (WHATWG, inet_aton)."""
    base, digits, allowed = 10, label, DIGITS
    if label.startswith("0x"):
        base, digits, allowed = 16, label[2:], HEX
    elif len(label) > 1 and label.startswith("0"):
        base, digits, allowed = 8, label[1:], _OCTAL
    significant = digits.lstrip("0")
    if not all(char in allowed for char in digits) or len(significant) > _MAX_NUMBER_DIGITS:
        raise RecordRejected("invalid_url", f"invalid IPv4 number {label[:20]!r}")
    return int(significant or "0", base)


def _normalize_ipv6(literal: str) -> str:
    """RFC 4291 §2.2 text parsed, serialised per RFC 5952 §4 (lower case, longest zero run as ``::``)."""
    if not literal or not all(char in _IPV6_CHARS for char in literal):  # no zone id, no IPvFuture
        raise RecordRejected("invalid_url", "invalid IPv6 literal")
    try:
        packed = ipaddress.IPv6Address(literal).packed
    except ValueError as error:
        raise RecordRejected("invalid_url", "invalid IPv6 literal") from error
    pieces = [f"{int.from_bytes(packed[i: i + 2], 'big'):x}" for i in range(0, 16, 2)]
    zeros = "".join("z" if piece == "0" else "." for piece in pieces)
    for length in range(8, 1, -1):  # the first longest run of two or more zero pieces
        start = zeros.find("z" * length)
        if start >= 0:
            return f"[{':'.join(pieces[:start])}::{':'.join(pieces[start + length:])}]"
    return f"[{':'.join(pieces)}]"


def strip_www(host: str) -> str:
    """Aggressive: drop leading ``www.`` labels while a dot remains (``www2.``, ``www-1.`` kept)."""
    while host.startswith("www.") and "." in host[4:]:
        host = host[4:]
    return host
