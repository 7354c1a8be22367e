"""The WHATWG URL Standard's basic URL parser, through ada (the C++ parser browsers' tests measure).

Parsing, resolution against a base, host processing (UTS #46 IDNA, IPv4 numbers in any base, IPv6)
and the percent-encode sets are the standard's (https://url.spec.whatwg.org/, "basic URL parser"),
as ada implements them: it passes the web-platform-tests URL suite (tests/data/wpt/). This module
is the one place that calls it; :mod:`streams.urls.canonical` builds its own rules on what it returns.

ada's C API is called directly through the ``ada-url`` package's cffi library (its Python helpers
build a dict of every attribute, which costs more; docs/decisions/0005-browser-url-parsing.md,
"Parsing costs, measured"): one parse, the serialised URL, then the URL is freed. The
serialisation is cut into parts by its separators in Python, which costs less than reading ada's
component offsets through cffi. ``ada-url`` is pinned in ``constraints.txt``; a new release can
change outputs, so it bumps ``CANONICALIZATION_VERSION``.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from ada_url._ada_wrapper import ffi, lib

from streams.errors import RecordRejected

_FFI: Final[Any] = ffi
_LIB: Final[Any] = lib


class ParsedUrl(NamedTuple):
    """A URL as the standard serialises it, cut into its parts; ``None`` marks an absent query.

    ``userinfo`` is ``user`` or ``user:password`` without the ``@``; ``port`` is "" for none (the
    scheme's default port is already dropped, as the standard does). The fragment is left out.
    """

    scheme: str
    userinfo: str
    host: str
    port: str
    path: str
    query: str | None


def serialize(url: bytes, base: bytes | None = None) -> str:
    """``new URL(url, base).href`` as a browser computes it (UTF-8 in), or :class:`RecordRejected`
    (``invalid_url``).

    A base that does not parse is ignored rather than failing the URL (a browser's constructor
    would throw): a crawler's ``source_url`` is data from the wild too, and an absolute link found
    on a page with a broken address is still a good link. A relative link then has no base and fails.
    """
    handle = _parse(url, base)
    if handle is None:
        raise RecordRejected("invalid_url", "not a URL a browser would resolve (WHATWG URL Standard)")
    try:
        href = _LIB.ada_get_href(handle)
        return str(_FFI.unpack(href.data, href.length).decode("utf-8", "replace"))
    finally:
        _LIB.ada_free(handle)


def _parse(url: bytes, base: bytes | None) -> Any:
    """The parsed handle, or None; the base is used only when it parses itself (checked only
    when the parse with it fails, which is rare: most links resolve)."""
    if base is None:
        handle = _LIB.ada_parse(url, len(url))
    else:
        handle = _LIB.ada_parse_with_base(url, len(url), base, len(base))
        if not _LIB.ada_is_valid(handle) and not _LIB.ada_can_parse(base, len(base)):
            _LIB.ada_free(handle)
            handle = _LIB.ada_parse(url, len(url))
    if _LIB.ada_is_valid(handle):
        return handle
    _LIB.ada_free(handle)
    return None


def split_http(href: str) -> ParsedUrl:
    """The parts of a serialised http(s) URL, by its separators.

    The serialisation makes this exact: ``scheme://[userinfo@]host[:port]/path[?query][#fragment]``
    with every ``@`` of the userinfo, every ``?`` of the path and every ``#`` before the fragment
    percent-encoded, a host without ``/?#@`` and a path that starts with ``/`` ("URL serializer").
    """
    scheme, _, rest = href.partition("://")
    slash = rest.find("/")
    authority, rest = rest[:slash], rest[slash:]
    rest = rest.partition("#")[0]
    path, question_mark, query = rest.partition("?")
    userinfo, _, host_port = authority.rpartition("@")
    if host_port.endswith("]"):  # an IPv6 literal without a port
        host, port = host_port, ""
    else:
        host, _, port = host_port.rpartition(":") if ":" in host_port else (host_port, "", "")
    return ParsedUrl(scheme, userinfo, host, port, path, query if question_mark else None)
