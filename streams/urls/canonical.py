"""Canonical URLs: one spelling per resource, so the dedup stage keys each URL once.

Profile ``safe`` applies only meaning-preserving rewrites: RFC 3986 §6.2.2 (case, escapes, dot
segments) and §6.2.3 (default port, empty path), the WHATWG URL Standard's host parser (UTS #46
IDNA, IPv4 numbers in any base, IPv6), and fragment removal (never sent, RFC 9110 §7.1).
``aggressive`` adds rewrites that may merge distinct resources: ``www.``, session-id and tracking
parameters, query order. Rules and examples: ``docs/canonicalization.md``.

Pure and total: any ``str`` gives a canonical URL or :class:`~streams.errors.RecordRejected`.
Length is checked first, parsing uses ``find``/``partition`` (no regular expression) and escapes
are decoded once in one pass, so hostile inputs cost linear time. Idempotent by construction.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple, TextIO

import mmh3
import orjson

from streams.errors import ConfigError, RecordRejected
from streams.urls.host import C0_AND_SPACE, DIGITS, HEX, normalize_host, strip_www

CANONICALIZATION_VERSION: Final = 1
"""Bumped whenever any output could change; state built with another version must be migrated."""

PROFILES: Final = ("safe", "aggressive")

_DEFAULT_PORTS: Final = {"http": "80", "https": "443"}
_SCHEME_CHARS: Final = frozenset(string.ascii_letters + string.digits + "+-.")  # RFC 3986 §3.1
_UNRESERVED: Final = frozenset(string.ascii_letters + string.digits + "-._~")  # RFC 3986 §2.3
_SUB_DELIMS: Final = frozenset("!$&'()*+,;=")  # RFC 3986 §2.2
_USERINFO_SAFE: Final = _UNRESERVED | _SUB_DELIMS | {":"}  # RFC 3986 §3.2.1
_PATH_SAFE: Final = _UNRESERVED | _SUB_DELIMS | {":", "@", "/"}  # pchar and "/", RFC 3986 §3.3
_QUERY_SAFE: Final = _PATH_SAFE | {"?"}  # RFC 3986 §3.4
_DROP_TAB_NEWLINE: Final = str.maketrans("", "", "\t\n\r")  # WHATWG "ASCII tab or newline"
# A URL plainly written canonically (see _plain_canonical): lower-case http(s), a host of lower-case
# letters, digits, "-" and ".", then path and non-empty query of characters that need no escaping
# (RFC 3986 pchar without "@") and "%", then perhaps a fragment of printable ASCII. Each part is one
# character class repeated, which the regular expression engine runs as a tight loop in C: an
# alternation per character ("a plain character or an escape") cost three times as much, and a
# set test (frozenset.issuperset) made a string object per character. The escapes are checked
# apart, only in URLs that have a "%" (_ESCAPE_NOT_PLAIN).
_PLAIN_CHARS: Final = r"A-Za-z0-9\-._~!$&'()*+,;=:%"
_PLAIN_URL: Final = re.compile(rf"https?://([a-z0-9.\-]+)(/[{_PLAIN_CHARS}/]*)"
                               rf"(?:\?([{_PLAIN_CHARS}/?]+))?(?:#([\x21-\x7e]*))?")
# A "%" that is not an upper-case escape of a character that stays escaped: an escape of an
# unreserved character (RFC 3986 §2.3: ALPHA, DIGIT, "-", ".", "_", "~"), which is decoded, or a
# "%" not followed by two upper-case hex digits (lower-case hex is upper-cased, a bare "%" encoded).
_ESCAPE_NOT_PLAIN: Final = re.compile(
    r"%(?:2[DE]|3[0-9]|4[1-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE]|(?![0-9A-F]{2}))")

# Defaults of CanonicalSettings (aggressive profile only). Session ids: Java servlets, PHP, classic
# ASP and ASP.NET, ColdFusion, osCommerce/Zen Cart and generic spellings.
SESSION_ID_PARAMS: Final[tuple[str, ...]] = (
    "jsessionid", "phpsessid", "aspsessionid", "asp.net_sessionid", "sid", "sessionid",
    "session_id", "sessid", "cfid", "cftoken", "oscsid", "zenid",
)
# Click and campaign identifiers of ad and mail platforms (Google, Microsoft, Meta, Yandex,
# Mailchimp, HubSpot, Marketo, Instagram, TikTok, X); ``utm_*`` goes by prefix.
TRACKING_PARAMS: Final[tuple[str, ...]] = (
    "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "mc_cid",
    "mc_eid", "_ga", "_gl", "igshid", "_hsenc", "_hsmi", "mkt_tok", "ttclid", "twclid",
)


@dataclass(frozen=True)
class CanonicalSettings:
    """What :func:`canonicalize` does beyond the fixed rules (changing one changes outputs).

    * ``profile`` -- ``"safe"`` (default: meaning-preserving rewrites only) or ``"aggressive"``.
    * ``max_url_bytes`` -- 4096: longer input (UTF-8 octets) or output is ``url_too_long``; twice
      the Sitemaps protocol's 2,048-character limit, far above real links.
    * ``session_id_params`` -- :data:`SESSION_ID_PARAMS`; query and ``;name=value`` path parameters
      removed by the aggressive profile, names matched case-insensitively.
    * ``tracking_params`` -- :data:`TRACKING_PARAMS`; query parameters removed by the aggressive
      profile, case-insensitively.
    * ``tracking_param_prefixes`` -- ``("utm_",)``: likewise, for any name with one of the prefixes.
    * ``strip_www`` -- True: the aggressive profile removes leading ``www.`` labels.
    * ``sort_query`` -- True: the aggressive profile sorts query parameters by name, then value.
    """

    profile: str = "safe"
    max_url_bytes: int = 4096
    session_id_params: tuple[str, ...] = SESSION_ID_PARAMS
    tracking_params: tuple[str, ...] = TRACKING_PARAMS
    tracking_param_prefixes: tuple[str, ...] = ("utm_",)
    strip_www: bool = True
    sort_query: bool = True

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError(f"canonicalization profile must be one of {PROFILES}, not {self.profile!r}")
        if self.max_url_bytes < 1:
            raise ConfigError(f"max_url_bytes must be positive, not {self.max_url_bytes}")

    @property
    def aggressive(self) -> bool:
        return self.profile == "aggressive"


DEFAULT: Final = CanonicalSettings()


class _Reference(NamedTuple):
    """A URI reference split as in RFC 3986 Appendix B; None means "component absent"."""

    scheme: str | None
    authority: str | None
    path: str
    query: str | None


def canonicalize(url: str, settings: CanonicalSettings = DEFAULT, base: str | None = None) -> str:
    """The canonical form of ``url``, resolved against ``base`` (the page it was found on) if relative.

    Raises :class:`RecordRejected` (``url_too_long``, ``unsupported_scheme``, ``invalid_url``) and
    nothing else, for any ``str``.
    """
    plain = _plain_canonical(url, settings)
    return plain if plain is not None else _parsed_canonical(url, settings, base)


def _parsed_canonical(url: str, settings: CanonicalSettings, base: str | None) -> str:
    """:func:`canonicalize` by the full parse: every rule applied, whatever the input."""
    reference = _resolve(_split(_prepare(url, settings.max_url_bytes, "URL")), base, settings)
    scheme = (reference.scheme or "").lower()
    if scheme not in _DEFAULT_PORTS:
        raise RecordRejected("unsupported_scheme", f"scheme {scheme[:20]!r} is not http or https")
    if reference.authority is None:
        raise RecordRejected("invalid_url", "http(s) URL without an authority (//host)")
    userinfo, host, port = _normalize_authority(reference.authority, scheme)
    if settings.aggressive and settings.strip_www:
        host = strip_www(host)
    authority = f"{userinfo}@{host}" if userinfo else host
    authority = f"{authority}:{port}" if port else authority
    query = _normalize_query(reference.query, settings)
    canonical = f"{scheme}://{authority}{_normalize_path(reference.path, settings)}"
    canonical = f"{canonical}?{query}" if query else canonical
    if len(canonical) > settings.max_url_bytes:  # all ASCII: characters are octets
        raise RecordRejected("url_too_long", f"canonical form exceeds {settings.max_url_bytes} bytes")
    return canonical


def _plain_canonical(url: str, settings: CanonicalSettings) -> str | None:
    """The canonical form of ``url`` when it is plainly written canonically, else None (full parse).

    Most discovered links are written canonically already (an absolute link as the site's own
    pages print it), and the full parse cost 3.3 µs per URL, the largest share of routing one.
    Conservative: a result only when every rule provably leaves the URL unchanged but for its
    fragment: lower-case http(s) scheme (absolute, so ``base`` plays no part), only characters
    that need no escaping (no ``@``) and upper-case escapes of other characters (UTF-8 octets,
    reserved delimiters), a host the host parser returns unchanged and no port, a path with no
    segment starting with a dot, no empty ``?``, a fragment (dropped) of printable ASCII only, as
    the full parse refuses controls anywhere; the aggressive profile's rewrites are ruled out by
    no query, no ``;`` and no ``www.`` to strip. Anything else takes the full parse
    (tests/test_canonical.py checks both agree).
    """
    match = _PLAIN_URL.fullmatch(url) if len(url) <= settings.max_url_bytes else None
    if match is None:
        return None
    host, path, query, fragment = match.groups()
    end = len(url) if fragment is None else len(url) - len(fragment) - 1  # the fragment is dropped
    if "/." in path or ("%" in url and _ESCAPE_NOT_PLAIN.search(url, 0, end)):
        return None
    if settings.aggressive and (query is not None or ";" in path or strip_www(host) != host):
        return None
    if host not in _CANONICAL_HOSTS and not _host_is_canonical(host):
        return None
    return url if fragment is None else url[:end]


# Hosts the host parser returns unchanged, as met by _plain_canonical: a set lookup costs a third of
# a call to normalize_host's LRU cache, whose bookkeeping misses the CPU caches on a frontier of
# thousands of hosts. Bounded: emptied when full (a miss only costs the parser's cached answer).
_CANONICAL_HOSTS: Final[set[str]] = set()
_CANONICAL_HOSTS_MAX: Final = 65_536


def _host_is_canonical(host: str) -> bool:
    try:
        if normalize_host(host) != host:
            return False
    except RecordRejected:
        return False
    if len(_CANONICAL_HOSTS) >= _CANONICAL_HOSTS_MAX:
        _CANONICAL_HOSTS.clear()
    _CANONICAL_HOSTS.add(host)
    return True


def fingerprint(canonical: str) -> bytes:
    """128-bit MurmurHash3 (x64) of the canonical URL, 16 bytes big-endian: the dedup key.

    ``hash_bytes`` gives the hash's bytes little-endian; reversed, they are the big-endian bytes of
    ``hash128``'s unsigned value, without building the integer."""
    return mmh3.hash_bytes(canonical.encode())[::-1]


def canonicalize_lines(lines: Iterable[str], out: TextIO, settings: CanonicalSettings = DEFAULT) -> None:
    """``python -m streams canonicalize``: one JSON line per input line, in order, flushed each time."""
    for line in lines:
        out.write(_result_line(line.rstrip("\r\n"), settings))
        out.flush()


def _result_line(url: str, settings: CanonicalSettings) -> str:
    shown = url.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot go into JSON
    try:
        canonical = canonicalize(url, settings)
    except RecordRejected as rejected:
        record = {"url": shown, "error": f"{rejected.reason}: {rejected.detail}"}
    else:
        record = {"url": shown, "canonical": canonical, "fingerprint": fingerprint(canonical).hex()}
    return orjson.dumps(record).decode() + "\n"


def _prepare(text: str, max_url_bytes: int, role: str) -> str:
    """Size first; then WHATWG's stripping: C0 and spaces around, tab and newline anywhere."""
    if len(text) > max_url_bytes:
        raise RecordRejected("url_too_long", f"{role} exceeds {max_url_bytes} bytes")
    try:
        size_bytes = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise RecordRejected("invalid_url", f"{role} contains a lone surrogate") from error
    if size_bytes > max_url_bytes:
        raise RecordRejected("url_too_long", f"{role} exceeds {max_url_bytes} bytes")
    text = text.strip(C0_AND_SPACE)
    if "\t" in text or "\n" in text or "\r" in text:  # rare; translate() walks every character
        text = text.translate(_DROP_TAB_NEWLINE)
    printable_ascii = text.isascii() and text.isprintable()  # the common case, checked in C
    control = None if printable_ascii else next((c for c in text if c < " " or c == "\x7f"), None)
    if control is not None:
        raise RecordRejected("invalid_url", f"{role} contains control character U+{ord(control):04X}")
    return text


def _split(text: str) -> _Reference:
    """RFC 3986 Appendix B with ``partition``: fragment, query, scheme, then authority."""
    text = text.partition("#")[0]
    text, question_mark, query = text.partition("?")
    scheme = None
    colon = text.find(":")
    if colon > 0 and text[0] in string.ascii_letters and _SCHEME_CHARS.issuperset(text[:colon]):
        scheme, text = text[:colon], text[colon + 1:]
    authority = None
    if text.startswith("//"):
        slash = text.find("/", 2)
        end = len(text) if slash < 0 else slash
        authority, text = text[2:end], text[end:]
    return _Reference(scheme, authority, text, query if question_mark else None)


def _resolve(reference: _Reference, base: str | None, settings: CanonicalSettings) -> _Reference:
    """Target URI of a relative reference (RFC 3986 §5.2.2; dot segments are removed later)."""
    if reference.scheme is not None:
        return reference
    if base is None:
        raise RecordRejected("invalid_url", "relative URL without a base URL")
    origin = _split(_prepare(base, settings.max_url_bytes, "base URL"))
    if origin.scheme is None:
        raise RecordRejected("invalid_url", "base URL is not absolute")
    if reference.authority is not None:
        return reference._replace(scheme=origin.scheme)
    if not reference.path:
        query = origin.query if reference.query is None else reference.query
        return origin._replace(query=query)
    return origin._replace(path=_merge(origin, reference.path), query=reference.query)


def _merge(origin: _Reference, path: str) -> str:
    """RFC 3986 §5.2.3: a relative path replaces the last segment of the base path."""
    if path.startswith("/") or (origin.authority is not None and not origin.path):
        return "/" + path.removeprefix("/")
    return origin.path[: origin.path.rfind("/") + 1] + path


def _normalize_authority(authority: str, scheme: str) -> tuple[str, str, str]:
    """Userinfo, host and port, each normalised; "" for an absent userinfo or default port."""
    userinfo, at_sign, host_port = authority.rpartition("@")  # the last "@", as WHATWG does
    host, port = _split_port(host_port)
    userinfo = _normalize_userinfo(userinfo) if at_sign else ""
    return userinfo, normalize_host(host), _normalize_port(port, scheme)


def _split_port(host_port: str) -> tuple[str, str]:
    if not host_port.startswith("["):
        host, colon, port = host_port.rpartition(":")
        return (host, port) if colon else (host_port, "")
    close = host_port.find("]")
    if close < 0:
        raise RecordRejected("invalid_url", "unterminated IPv6 literal")
    rest = host_port[close + 1:]
    if rest and not rest.startswith(":"):
        raise RecordRejected("invalid_url", "junk after IPv6 literal")
    return host_port[: close + 1], rest[1:]


def _normalize_userinfo(userinfo: str) -> str:
    """Kept, as credentials may change the response (RFC 3986 §3.2.1); empty parts dropped (WHATWG)."""
    user, _, password = userinfo.partition(":")
    user = _normalize_escapes(user, _USERINFO_SAFE)
    return f"{user}:{_normalize_escapes(password, _USERINFO_SAFE)}" if password else user


def _normalize_port(port: str, scheme: str) -> str:
    """Decimal without leading zeros; empty or default port omitted (RFC 3986 §6.2.3)."""
    if not port:
        return ""
    if not all(char in DIGITS for char in port):
        raise RecordRejected("invalid_url", f"port {port[:20]!r} is not a number")
    digits = port.lstrip("0") or "0"
    if len(digits) > 5 or int(digits) > 65535:
        raise RecordRejected("invalid_url", f"port {digits[:20]} is out of range")
    return "" if digits == _DEFAULT_PORTS[scheme] else digits


def _normalize_path(path: str, settings: CanonicalSettings) -> str:
    """Escapes, empty path "/" (RFC 3986 §6.2.3), then dot segments (§5.2.4): ``%2E%2E`` is ``..``."""
    path = _normalize_escapes(path, _PATH_SAFE) or "/"
    if settings.aggressive:
        path = _drop_path_params(path, _lowered(settings.session_id_params))
    return _remove_dot_segments(path)


def _drop_path_params(path: str, names: frozenset[str]) -> str:
    """Aggressive: remove ``;name=value`` segment parameters (``;jsessionid=...``) with these names."""
    if ";" not in path:
        return path
    segments = []
    for segment in path.split("/"):
        head, *params = segment.split(";")
        kept = [param for param in params if param.partition("=")[0].lower() not in names]
        segments.append(";".join([head, *kept]))
    return "/".join(segments)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path, over a segment list so it runs in linear time."""
    output: list[str] = []
    segments = path.split("/")[1:]
    for segment in segments:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if segments[-1] in (".", "..") and output:
        output.append("")  # "/a/b/.." is the directory "/a/"
    return "/" + "/".join(output)


def _normalize_query(query: str | None, settings: CanonicalSettings) -> str:
    """Escapes normalised; the aggressive profile filters and sorts parameters. "" means no query."""
    if not query:
        return ""  # "?" alone is the same resource as no query (RFC 3986 §6.2.3)
    query = _normalize_escapes(query, _QUERY_SAFE)
    if not settings.aggressive:
        return query
    dropped = _lowered(settings.session_id_params + settings.tracking_params)
    prefixes = tuple(prefix.lower() for prefix in settings.tracking_param_prefixes)
    params = [param for param in query.split("&") if param and not _is_dropped(param, dropped, prefixes)]
    if settings.sort_query:
        params.sort(key=lambda param: param.partition("=")[::2])  # stable: repeated names all kept
    return "&".join(params)


def _is_dropped(param: str, names: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    name = param.partition("=")[0].lower()
    return name in names or name.startswith(prefixes)


def _normalize_escapes(text: str, safe: frozenset[str]) -> str:
    """One pass of RFC 3986 §6.2.2.2, so each escape is decoded exactly once (§2.1, §2.4).

    Escapes of unreserved characters are decoded, other escapes upper-cased; a ``%`` starting no
    escape and any character outside ``safe`` are encoded (UTF-8 octets). Most components need
    none of it, and the set test that finds so runs in C; the rest is split on ``%`` once.
    """
    if safe.issuperset(text):
        return text
    head, *escaped = text.split("%")
    pieces = [_encode_unsafe(head, safe)]
    for part in escaped:
        hex_digits = part[:2]
        if len(hex_digits) == 2 and HEX.issuperset(hex_digits):
            hex_digits = hex_digits.upper()
            decoded = chr(int(hex_digits, 16))
            pieces.append(decoded if decoded in _UNRESERVED else "%" + hex_digits)
            pieces.append(_encode_unsafe(part[2:], safe))
        else:
            pieces.append("%25")
            pieces.append(_encode_unsafe(part, safe))
    return "".join(pieces)


def _encode_unsafe(text: str, safe: frozenset[str]) -> str:
    """Percent-encode (UTF-8) every character of ``text`` outside ``safe``; ``text`` has no ``%``."""
    if safe.issuperset(text):
        return text
    return "".join(char if char in safe else "".join(f"%{octet:02X}" for octet in char.encode("utf-8"))
                   for char in text)


@functools.lru_cache(maxsize=16)
def _lowered(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)
