"""Canonical URLs: one spelling per resource, so the dedup stage keys each URL once.

Version 2: a URL is first parsed and resolved against the page it was found on exactly as a
browser does (the WHATWG URL Standard through ada, :mod:`streams.urls.whatwg`: backslashes,
``http:example.com``, controls percent-encoded, IDNA, IPv4 and IPv6 forms), so the canonical URL
is the one the browser would fetch. Then profile ``safe`` applies only meaning-preserving rewrites
of RFC 3986: escapes of unreserved characters decoded, hex upper-cased, characters RFC 3986 does
not allow encoded (§6.2.2.2), the empty query dropped (§6.2.3), trailing host dots and the
fragment removed (never sent, RFC 9110 §7.1). ``aggressive`` adds rewrites that may merge distinct
resources: ``www.``, session-id and tracking parameters, query order. Rules, examples and where
the safe profile differs from a browser on purpose: ``docs/canonicalization.md``.

Pure and total: any ``str`` gives a canonical URL or :class:`~streams.errors.RecordRejected`.
Length is checked first, the parser runs in linear time and escapes are decoded once in one pass,
so hostile inputs cost linear time. Idempotent (tests/urls/test_canonical.py, a Hypothesis property).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TextIO

import mmh3
import orjson

from streams.errors import ConfigError, RecordRejected
from streams.urls import whatwg
from streams.urls.host import canonical_host, strip_www

CANONICALIZATION_VERSION: Final = 2
"""Bumped whenever any output could change; state built with another version must be migrated."""

PROFILES: Final = ("safe", "aggressive")

_UNRESERVED: Final = frozenset(string.ascii_letters + string.digits + "-._~")  # RFC 3986 §2.3
_SUB_DELIMS: Final = frozenset("!$&'()*+,;=")  # RFC 3986 §2.2
_USERINFO_SAFE: Final = _UNRESERVED | _SUB_DELIMS | {":"}  # RFC 3986 §3.2.1
_PATH_SAFE: Final = _UNRESERVED | _SUB_DELIMS | {":", "@", "/"}  # pchar and "/", RFC 3986 §3.3
_QUERY_SAFE: Final = _PATH_SAFE | {"?"}  # RFC 3986 §3.4
_HEX: Final = frozenset(string.hexdigits)
# A URL plainly written canonically (see _plain_canonical): lower-case http(s), a host of lower-case
# letters, digits, "-" and ".", then path and non-empty query of characters that need no escaping
# (RFC 3986 pchar without "@"; the query without "'", which the parser encodes there) and "%",
# then perhaps a fragment of printable ASCII. Each part is one
# character class repeated, which the regular expression engine runs as a tight loop in C: an
# alternation per character ("a plain character or an escape") costs several times as much
# (docs/decisions/0005-browser-url-parsing.md, "Parsing costs, measured"), and a set test
# (frozenset.issuperset) makes a string object per character. The escapes are checked
# apart, only in URLs that have a "%" (_ESCAPE_NOT_PLAIN).
_PLAIN_CHARS: Final = r"A-Za-z0-9\-._~!$&()*+,;=:%"
_PLAIN_URL: Final = re.compile(rf"https?://([a-z0-9.\-]+)(/[{_PLAIN_CHARS}'/]*)"
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


def canonicalize(url: str, settings: CanonicalSettings = DEFAULT, base: str | None = None) -> str:
    """The canonical form of ``url``, resolved against ``base`` (the page it was found on) if relative.

    Raises :class:`RecordRejected` (``url_too_long``, ``unsupported_scheme``, ``invalid_url``) and
    nothing else, for any ``str``.
    """
    plain = _plain_canonical(url, settings)
    return plain if plain is not None else _parsed_canonical(url, settings, base)


def _parsed_canonical(url: str, settings: CanonicalSettings, base: str | None) -> str:
    """:func:`canonicalize` by the full parse: the WHATWG parser, then every rule of ours on top.

    The parser's output is most often plainly canonical already (it has lower-cased the host,
    dropped the default port, resolved the link), and then :func:`_plain_canonical` answers for it.
    """
    url_bytes = _encoded(url, settings.max_url_bytes, "URL")
    base_bytes, base_refused = _usable_base(base, settings.max_url_bytes)
    try:
        href = whatwg.serialize(url_bytes, base_bytes)
    except RecordRejected as refused:
        if base_refused is None:
            raise
        raise base_refused from refused  # a relative link: why its base was left out
    plain = _plain_canonical(href, settings)
    return plain if plain is not None else _ruled_canonical(href, settings)


def _ruled_canonical(href: str, settings: CanonicalSettings) -> str:
    """Our rules on the parser's serialisation ``href``, part by part."""
    if not href.startswith(("http://", "https://")):
        scheme = href.partition(":")[0]
        raise RecordRejected("unsupported_scheme", f"scheme {scheme[:20]!r} is not http or https")
    parsed = whatwg.split_http(href)
    host = canonical_host(parsed.host)
    if settings.aggressive and settings.strip_www:
        host = strip_www(host)
    userinfo = _normalize_escapes(parsed.userinfo, _USERINFO_SAFE)
    authority = f"{userinfo}@{host}" if userinfo else host
    authority = f"{authority}:{parsed.port}" if parsed.port else authority
    query = _normalize_query(parsed.query, settings)
    canonical = f"{parsed.scheme}://{authority}{_normalize_path(parsed.path, settings)}"
    canonical = f"{canonical}?{query}" if query else canonical
    if len(canonical) > settings.max_url_bytes:  # all ASCII: characters are octets
        raise RecordRejected("url_too_long", f"canonical form exceeds {settings.max_url_bytes} bytes")
    return canonical


def _encoded(text: str, max_url_bytes: int, role: str) -> bytes:
    """UTF-8 of ``text``, its size checked first (characters, then octets), before any parsing."""
    if len(text) > max_url_bytes:
        raise RecordRejected("url_too_long", f"{role} exceeds {max_url_bytes} bytes")
    try:
        encoded = text.encode()
    except UnicodeEncodeError as error:
        raise RecordRejected("invalid_url", f"{role} contains a lone surrogate") from error
    if len(encoded) > max_url_bytes:
        raise RecordRejected("url_too_long", f"{role} exceeds {max_url_bytes} bytes")
    return encoded


def _usable_base(base: str | None, max_url_bytes: int) -> tuple[bytes | None, RecordRejected | None]:
    """The base as the parser takes it, or None with the reason when it is over the size limit or
    not encodable; a relative link then fails to resolve, an absolute one stands alone."""
    if not base:
        return None, None
    try:
        return _encoded(base, max_url_bytes, "base URL"), None
    except RecordRejected as refused:
        return None, refused


def _plain_canonical(url: str, settings: CanonicalSettings) -> str | None:
    """The canonical form of ``url`` when it is plainly written canonically, else None (full parse).

    Most discovered links are written canonically already (an absolute link as the site's own
    pages print it), and one regular expression match costs a fraction of the full parse, the
    largest share of routing a URL. Conservative: a result only when the parser and every rule
    provably leave the URL unchanged but for its fragment: lower-case http(s) scheme followed by
    ``//`` (absolute, so ``base`` plays no part), only characters that neither the parser's
    percent-encode sets nor RFC 3986 escape (no ``@``, no ``'`` in the query) and upper-case
    escapes of other characters (UTF-8 octets, reserved delimiters), a host the full parse returns
    unchanged and no port, a path with no segment starting with a dot, no empty ``?``, a fragment
    (dropped) of printable ASCII; the aggressive profile's rewrites are ruled out by no query, no
    ``;`` and no ``www.`` to strip. Anything else takes the full parse (tests/urls/test_canonical.py
    checks both agree, on Hypothesis URLs and on the web-platform-tests suite).
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


# Hosts the full parse returns unchanged, as met by _plain_canonical: a set lookup instead of a
# parse for every URL of a host already met. Bounded: emptied when full (a miss costs one parse).
_CANONICAL_HOSTS: Final[set[str]] = set()
_CANONICAL_HOSTS_MAX: Final = 65_536


def _host_is_canonical(host: str) -> bool:
    plain = f"http://{host}/"
    try:
        if _ruled_canonical(whatwg.serialize(plain.encode()), DEFAULT) != plain:
            return False
    except RecordRejected:
        return False
    if len(_CANONICAL_HOSTS) >= _CANONICAL_HOSTS_MAX:
        _CANONICAL_HOSTS.clear()
    _CANONICAL_HOSTS.add(host)
    return True


def fingerprint(canonical: str, crawl: str = "") -> bytes:
    """128-bit MurmurHash3 (x64) of the canonical URL, 16 bytes big-endian: the dedup key.

    With a ``crawl`` (a frontier record's ``crawl`` name), the hash of :func:`scoped`, the name and
    the URL: a named crawl's URLs are keys of their own in the same seen-set, so a new crawl sees
    none of another's URLs while both run on the same stage.

    ``hash_bytes`` gives the hash's bytes little-endian; reversed, they are the big-endian bytes of
    ``hash128``'s unsigned value, without building the integer."""
    return mmh3.hash_bytes(scoped(canonical, crawl).encode())[::-1]


def scoped(canonical: str, crawl: str) -> str:
    """``"<crawl> <canonical>"``, or the URL alone outside a named crawl: what is hashed, and what
    the seen-set keeps. A canonical URL holds no space (it is percent-encoded), so the last space
    ends the name, whatever it holds (:func:`unscoped`)."""
    return f"{crawl} {canonical}" if crawl else canonical


def unscoped(value: str) -> tuple[str, str]:
    """(crawl, canonical URL) of a :func:`scoped` value; the crawl is empty for an unnamed one."""
    crawl, _, url = value.rpartition(" ")
    return crawl, url


def host_of(canonical_url: str) -> str:
    """The host of a canonical URL (``scheme://[userinfo@]host[:port]/...``), without re-parsing it."""
    authority = canonical_url.partition("://")[2].partition("/")[0].rpartition("@")[2]
    if authority.startswith("["):
        return authority[1: authority.index("]")]
    return authority.partition(":")[0]


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


def _normalize_path(path: str, settings: CanonicalSettings) -> str:
    """Escapes normalised; the parser has already made an empty path "/" and removed dot segments
    (``%2E%2E`` counts as ``..`` there, so decoding escapes here cannot make a new one)."""
    path = _normalize_escapes(path, _PATH_SAFE)
    if settings.aggressive:
        path = _drop_path_params(path, _lowered(settings.session_id_params))
    return path


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
        if len(hex_digits) == 2 and _HEX.issuperset(hex_digits):
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
