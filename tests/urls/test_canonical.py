"""URL canonicalization: the rule table of docs/canonicalization.md, rejections, properties."""

from __future__ import annotations

import io
import string
from pathlib import Path
from typing import NamedTuple

import mmh3
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.errors import ConfigError, RecordRejected
from streams.urls.canonical import (
    CANONICALIZATION_VERSION,
    PROFILES,
    CanonicalSettings,
    _parsed_canonical,
    _plain_canonical,
    canonicalize,
    canonicalize_lines,
    fingerprint,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "canonicalization.md"
SAFE = CanonicalSettings()
AGGRESSIVE = CanonicalSettings(profile="aggressive")
REASONS = {"url_too_long", "unsupported_scheme", "invalid_url"}
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Example(NamedTuple):
    rule: str
    profile: str
    url: str
    base: str | None
    expected: str  # the canonical URL, or "rejected: <reason>"
    differs: str  # where the browser's URL differs, why ours does; "" where they agree


def _ex(rule: str, profile: str, url: str, expected: str, base: str | None = None,
        differs: str = "") -> Example:
    return Example(rule, profile, url, base, expected, differs)


DIFFERS_DOT = "browser keeps the dots; the same server for every resolver"
DIFFERS_DNS = "browser accepts; DNS cannot resolve it (RFC 1035 §2.3.4)"
DIFFERS_ESCAPES = "browser sends as written; the same resource (RFC 3986 §6.2.2.2)"
DIFFERS_FRAGMENT = "browser keeps it; never sent (RFC 9110 §7.1)"
DIFFERS_QUERY = "browser keeps `?`; the same resource (RFC 3986 §6.2.3)"
DIFFERS_BASE = "browser throws; an absolute link stands alone"


E = "http://example.com"
EXAMPLES = [
    _ex("surrounding C0 controls and spaces stripped", "safe", "\t http://example.com/ \n", E + "/"),
    _ex("tabs and newlines inside removed", "safe", "http://exam\nple.com/pa\tth", E + "/path"),
    _ex("relative reference resolved", "safe", "../d?x", E + "/a/d?x", "http://example.com/a/b/c"),
    _ex("relative reference resolved", "safe", "//Other.example/x", "https://other.example/x",
        "https://example.com/a"),
    _ex("relative reference resolved", "safe", "?page=2", E + "/list?page=2", E + "/list?page=1"),
    _ex("relative reference resolved", "safe", "#top", E + "/list?page=1", E + "/list?page=1"),
    _ex("backslashes are slashes", "safe", "..\\d\\e", E + "/a/d/e", E + "/a/b/c"),
    _ex("backslashes are slashes", "safe", "http:\\\\example.com\\a", E + "/a"),
    _ex("http(s) URLs without //", "safe", "http:/example.com", E + "/"),
    _ex("http(s) URLs without //", "safe", "http:example.com/a", E + "/a"),
    _ex("http(s) URLs without //", "safe", "http:x", E + "/a/x", E + "/a/b"),
    _ex("http(s) URLs without //", "safe", "///other.example/p", "https://other.example/p", "https://example.com/"),
    _ex("a base that is not a URL is not used", "safe", "https://example.com/x", "https://example.com/x",
        "not a URL", differs=DIFFERS_BASE),
    _ex("scheme lower-cased", "safe", "HTTPS://example.com/", "https://example.com/"),
    _ex("only http and https", "safe", "ftp://example.com/file", "rejected: unsupported_scheme"),
    _ex("only http and https", "safe", "mailto:someone@example.com", "rejected: unsupported_scheme"),
    _ex("only http and https", "safe", "javascript:alert(1)", "rejected: unsupported_scheme"),
    _ex("host lower-cased", "safe", "http://EXAMPLE.Com/", E + "/"),
    _ex("host to IDNA (UTS #46, non-transitional)", "safe", "http://Bücher.example/",
        "http://xn--bcher-kva.example/"),
    _ex("host to IDNA (UTS #46, non-transitional)", "safe", "http://faß.de/", "http://xn--fa-hia.de/"),
    _ex("host to IDNA (UTS #46, non-transitional)", "safe", "http://ＥＸＡＭＰＬＥ。com/", E + "/"),
    _ex("host to IDNA (UTS #46, non-transitional)", "safe", "http://XN--BCHER-KVA.example/",
        "http://xn--bcher-kva.example/"),
    _ex("host percent-decoded", "safe", "http://%65xample.com/", E + "/"),
    _ex("invalid host rejected", "safe", "http://exa%2Fmple.com/", "rejected: invalid_url"),
    _ex("invalid host rejected", "safe", "http://ex\ufffdample.com/", "rejected: invalid_url"),
    _ex("invalid host rejected", "safe", "http://exa mple.com/", "rejected: invalid_url"),
    _ex("trailing dots of host removed", "safe", "http://example.com./", E + "/", differs=DIFFERS_DOT),
    _ex("trailing dots of host removed", "safe", "http://example.com../", E + "/", differs=DIFFERS_DOT),
    _ex("host DNS cannot resolve rejected", "safe", "http://a..example/", "rejected: invalid_url",
        differs=DIFFERS_DNS),
    _ex("host DNS cannot resolve rejected", "safe", f"http://{'a' * 64}.example/", "rejected: invalid_url",
        differs=DIFFERS_DNS),
    _ex("IPv4 numbers to dotted decimal", "safe", "http://0x7f.1/", "http://127.0.0.1/"),
    _ex("IPv4 numbers to dotted decimal", "safe", "http://2130706433/", "http://127.0.0.1/"),
    _ex("IPv4 numbers to dotted decimal", "safe", "http://0177.0.0.1/", "http://127.0.0.1/"),
    _ex("IPv4 numbers to dotted decimal", "safe", "http://256.0.0.1/", "rejected: invalid_url"),
    _ex("IPv4 numbers to dotted decimal", "safe", "http://example.123/", "rejected: invalid_url"),
    _ex("IPv6 lower-case, compressed", "safe", "http://[2001:DB8:0:0:0:0:0:1]/", "http://[2001:db8::1]/"),
    _ex("IPv6 lower-case, compressed", "safe", "http://[::1", "rejected: invalid_url"),
    _ex("IPv6 lower-case, compressed", "safe", "http://[fe80::1%25eth0]/", "rejected: invalid_url"),
    _ex("userinfo kept, escapes normalised", "safe", "http://User:Pa%73s@example.com/",
        "http://User:Pass@example.com/"),
    _ex("userinfo kept, escapes normalised", "safe", "http://user:@example.com/", "http://user@example.com/"),
    _ex("userinfo kept, escapes normalised", "safe", "http://@example.com/", E + "/"),
    _ex("default port removed", "safe", "http://example.com:80/", E + "/"),
    _ex("default port removed", "safe", "https://example.com:0443/", "https://example.com/"),
    _ex("default port removed", "safe", "http://example.com:/", E + "/"),
    _ex("default port removed", "safe", "http://example.com:08080/", E + ":8080/"),
    _ex("default port removed", "safe", "http://example.com:65536/", "rejected: invalid_url"),
    _ex("empty path is /", "safe", "http://example.com", E + "/"),
    _ex("dot segments removed", "safe", "http://example.com/a/./b/../c", E + "/a/c"),
    _ex("dot segments removed", "safe", "http://example.com/../../a/..", E + "/"),
    _ex("dot segments removed", "safe", "http://example.com/a/%2E%2e/b", E + "/b"),
    _ex("escaped unreserved characters decoded", "safe", "http://example.com/%7Euser/%41%2d%5f",
        E + "/~user/A-_", differs=DIFFERS_ESCAPES),
    _ex("hex of other escapes upper-cased", "safe", "http://example.com/a%2fb?q=%3d", E + "/a%2Fb?q=%3D",
        differs=DIFFERS_ESCAPES),
    _ex("characters that must be escaped are encoded", "safe", "http://example.com/a b/é?q=ü d",
        E + "/a%20b/%C3%A9?q=%C3%BC%20d"),
    _ex("characters that must be escaped are encoded", "safe", "http://example.com/{a}^b[c]",
        E + "/%7Ba%7D%5Eb%5Bc%5D", differs=DIFFERS_ESCAPES),
    _ex("characters that must be escaped are encoded", "safe", "http://example.com/a@b!c;d=e",
        E + "/a@b!c;d=e"),
    _ex("characters that must be escaped are encoded", "safe", "http://example.com/100%", E + "/100%25",
        differs=DIFFERS_ESCAPES),
    _ex("characters that must be escaped are encoded", "safe", "http://example.com/?q='x'",
        E + "/?q=%27x%27"),
    _ex("escapes decoded exactly once", "safe", "http://example.com/%252541", E + "/%252541"),
    _ex("fragment removed", "safe", "http://example.com/a#top", E + "/a", differs=DIFFERS_FRAGMENT),
    _ex("empty query removed", "safe", "http://example.com/a?", E + "/a", differs=DIFFERS_QUERY),
    _ex("query otherwise kept as is", "safe", "http://www.example.com/?utm_source=x&b=a+b&a=1&&a",
        "http://www.example.com/?utm_source=x&b=a+b&a=1&&a"),
    _ex("what a browser cannot resolve rejected", "safe", "http://", "rejected: invalid_url"),
    _ex("what a browser cannot resolve rejected", "safe", "/a/b", "rejected: invalid_url"),
    _ex("what a browser cannot resolve rejected", "safe", "http://exa\x00mple.com/", "rejected: invalid_url"),
    _ex("control characters percent-encoded", "safe", "http://example.com/a\x1bb\x7f", E + "/a%1Bb%7F"),
    _ex("leading www. labels removed", "aggressive", "http://www.example.com/", E + "/"),
    _ex("leading www. labels removed", "aggressive", "http://WWW.www.example.com/", E + "/"),
    _ex("leading www. labels removed", "aggressive", "http://www2.example.com/", "http://www2.example.com/"),
    _ex("leading www. labels removed", "aggressive", "http://www.com/", "http://www.com/"),
    _ex("session-id parameters removed", "aggressive", "http://example.com/?PHPSESSID=ab12&id=7",
        E + "/?id=7"),
    _ex("session-id parameters removed", "aggressive", "http://example.com/cart;JSESSIONID=0A1B;v=2?x=1",
        E + "/cart;v=2?x=1"),
    _ex("tracking parameters removed", "aggressive",
        "http://example.com/?utm_source=news&UTM_Medium=mail&gclid=x&fbclid=y&id=7", E + "/?id=7"),
    _ex("tracking parameters removed", "aggressive", "http://example.com/?utm_campaign=x", E + "/"),
    _ex("query parameters sorted, empty ones dropped", "aggressive", "http://example.com/?b=2&a=2&&a=1&a",
        E + "/?a&a=1&a=2&b=2"),
    _ex("everything the safe profile does", "aggressive", "HTTP://WWW.Example.COM:80/a/../b?b=1&a=%7e#x",
        E + "/b?a=~&b=1"),
]


def _doc_text(text: str) -> str:
    """How a string is written in the doc's table: backslashes and control characters as Python escapes."""
    assert "|" not in text and "`" not in text
    named = {"\t": "\\t", "\n": "\\n", "\\": "\\\\"}
    return "".join(named.get(c, f"\\x{ord(c):02x}") if c < " " or c in "\x7f\\" else c for c in text)


def _doc_row(example: Example) -> tuple[str, str, str, str, str, str]:
    base = f"`{_doc_text(example.base)}`" if example.base is not None else ""
    return (example.rule, example.profile, f"`{_doc_text(example.url)}`", base, f"`{example.expected}`",
            example.differs)


def _doc_table_rows() -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = tuple(cell.strip() for cell in line.strip().strip("|").split("|"))
        if line.startswith("|") and len(cells) == 6 and cells[1] in PROFILES:
            rows.append(cells)
    return rows


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.profile}:{e.url!r}" for e in EXAMPLES])
def test_rule_examples(example: Example) -> None:
    settings_ = CanonicalSettings(profile=example.profile)
    if example.expected.startswith("rejected: "):
        with pytest.raises(RecordRejected) as rejected:
            canonicalize(example.url, settings_, base=example.base)
        assert rejected.value.reason == example.expected.removeprefix("rejected: ")
        return
    canonical = canonicalize(example.url, settings_, base=example.base)
    assert canonical == example.expected
    assert canonicalize(canonical, settings_) == canonical


def test_doc_table_is_exactly_the_examples() -> None:
    assert sorted(_doc_table_rows()) == sorted(_doc_row(example) for example in EXAMPLES)


def test_doc_states_the_version() -> None:
    assert f"CANONICALIZATION_VERSION = {CANONICALIZATION_VERSION}" in DOC.read_text(encoding="utf-8")


def test_safe_profile_keeps_what_aggressive_removes() -> None:
    url = "http://www.example.com/cart;jsessionid=1?utm_source=x&b=1&a=2"
    assert canonicalize(url) == url
    assert canonicalize(url, AGGRESSIVE) == "http://example.com/cart?a=2&b=1"


def test_aggressive_options_and_custom_lists() -> None:
    custom = CanonicalSettings(profile="aggressive", strip_www=False, sort_query=False,
                               session_id_params=("token",), tracking_params=(),
                               tracking_param_prefixes=("x_",))
    url = "http://www.example.com/p;Token=1?b=1&TOKEN=2&x_y=3&utm_source=4&a=5"
    assert canonicalize(url, custom) == "http://www.example.com/p?b=1&utm_source=4&a=5"


@pytest.mark.parametrize("bad", [{"profile": "loose"}, {"max_url_bytes": 0}])
def test_settings_are_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        CanonicalSettings(**bad)  # type: ignore[arg-type]


def test_too_long_is_rejected_before_parsing() -> None:
    too_long = "http://example.com/" + "a" * 4096
    with pytest.raises(RecordRejected) as rejected:
        canonicalize(too_long)
    assert rejected.value.reason == "url_too_long"
    with pytest.raises(RecordRejected) as multibyte:  # 4096 characters but more UTF-8 bytes
        canonicalize("http://example.com/" + "é" * 2040)
    assert multibyte.value.reason == "url_too_long"
    assert canonicalize("http://example.com/" + "a" * 4077) == "http://example.com/" + "a" * 4077


def test_output_longer_than_the_limit_is_rejected() -> None:
    short_input = "http://example.com/" + "é" * 1000  # 2019 bytes in, 6019 bytes out
    with pytest.raises(RecordRejected) as rejected:
        canonicalize(short_input)
    assert rejected.value.reason == "url_too_long"
    assert canonicalize("http://e.com/ü", CanonicalSettings(max_url_bytes=19)) == "http://e.com/%C3%BC"
    with pytest.raises(RecordRejected):
        canonicalize("http://e.com/ü", CanonicalSettings(max_url_bytes=18))


def test_base_handling() -> None:
    assert canonicalize("HTTP://b.example/x", base="garbage") == "http://b.example/x"  # absolute: base unused
    assert canonicalize("x", base="http://example.com") == "http://example.com/x"
    assert canonicalize("", base="http://example.com/a?q#f") == "http://example.com/a?q"
    assert canonicalize("https:x", base="http://example.com/a/") == "https://x/"  # another scheme: absolute
    # A base that cannot be used (not a URL, over the size limit, not encodable) is left out, so a
    # relative link has nothing to resolve against.
    for base, reason in [("/relative", "invalid_url"), ("ftp://example.com/", "unsupported_scheme"),
                         ("http://example.com/" + "a" * 5000, "url_too_long"),
                         ("http://example.com/\ud800", "invalid_url")]:
        with pytest.raises(RecordRejected) as rejected:
            canonicalize("page.html", base=base)
        assert rejected.value.reason == reason


def test_lone_surrogate_is_rejected() -> None:
    with pytest.raises(RecordRejected) as rejected:
        canonicalize("http://example.com/\ud800")
    assert rejected.value.reason == "invalid_url"


def test_fingerprint_is_128_bit_mmh3_big_endian() -> None:
    key = fingerprint("http://example.com/")
    expected = int(mmh3.hash128(b"http://example.com/", signed=False)).to_bytes(16, "big")
    assert key == expected and len(key) == 16


def test_canonicalize_lines_writes_one_json_line_per_input_line() -> None:
    out = io.StringIO()
    lines_in = ["HTTP://Example.com:80\n", "ftp://x/\n", "\n", "http://example.com/\ud800"]
    canonicalize_lines(lines_in, out, SAFE)
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == {"url": "HTTP://Example.com:80", "canonical": "http://example.com/",
                        "fingerprint": fingerprint("http://example.com/").hex()}
    assert lines[1]["error"].startswith("unsupported_scheme: ")
    assert lines[2]["error"].startswith("invalid_url: ")
    assert lines[3] == {"url": "http://example.com/?", "error": "invalid_url: URL contains a lone surrogate"}
    assert len(lines) == 4 and len(lines[0]["fingerprint"]) == 32


def test_percent_encoding_bomb_is_decoded_once() -> None:
    bomb = "http://example.com/" + "%25" * 1200 + "?" + "%2525" * 80
    assert canonicalize(bomb) == bomb
    assert canonicalize(bomb.lower()) == bomb


def test_dot_segment_flood() -> None:
    assert canonicalize("http://example.com" + "/.." * 1350 + "/a") == "http://example.com/a"
    assert canonicalize("http://example.com" + "/a/." * 1000) == "http://example.com" + "/a" * 1000 + "/"


def test_hostile_hosts() -> None:
    for host in ["ü" * 2000, "a." * 2000, "[" + ":" * 4000 + "]", "1." * 2000]:
        with pytest.raises(RecordRejected):
            canonicalize(f"http://{host}/", CanonicalSettings(max_url_bytes=8192))
    assert canonicalize("http://0x" + "0" * 4000 + "1/", CanonicalSettings(max_url_bytes=8192)) == "http://0.0.0.1/"


# --- Hypothesis ----------------------------------------------------------------------------------

UNRESERVED = string.ascii_letters + string.digits + "-._~"
UNICODE_LABELS = ["bücher", "münchen", "faß", "例子", "пример", "ελληνικά", "☃", "ＷＷＷ", "é"]
PATH_CHARS = UNRESERVED + "!$&'()*+,;=:@ %\"<>[]{}^`|éü€😀\\"


@st.composite
def _random_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))


@st.composite
def _escape(draw: st.DrawFn) -> str:
    octet = draw(st.integers(0, 255))
    return "%" + draw(_random_case(f"{octet:02x}"))


@st.composite
def _ipv4_host(draw: st.DrawFn) -> str:
    address = draw(st.integers(0, 2**32 - 1))
    octets = address.to_bytes(4, "big")
    forms = [".".join(map(str, octets)), str(address), hex(address), ".".join(f"0{o:o}" for o in octets),
             f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}"]
    return draw(st.sampled_from(forms))


@st.composite
def _domain(draw: st.DrawFn) -> str:
    ascii_label = st.text(string.ascii_lowercase + string.digits + "-", min_size=1, max_size=8)
    labels = draw(st.lists(st.one_of(ascii_label, st.sampled_from(UNICODE_LABELS)), min_size=1, max_size=3))
    tld = draw(st.sampled_from(["com", "de", "xn--p1ai", "рф", "org."]))
    return draw(_random_case(".".join([*labels, tld])))


def _host() -> st.SearchStrategy[str]:
    ipv6 = st.ip_addresses(v=6).map(lambda address: f"[{str(address).upper()}]")
    return st.one_of(_domain(), _ipv4_host(), ipv6)


def _component(alphabet: str, max_size: int = 8) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(st.text(alphabet, max_size=3), _escape()), max_size=max_size).map("".join)


@st.composite
def urls(draw: st.DrawFn) -> str:
    """Realistic URLs: random case, ports, userinfo, dot segments, escapes, Unicode, params."""
    scheme = draw(_random_case(draw(st.sampled_from(["http", "https"]))))
    userinfo = draw(st.sampled_from(["", "user@", "u:p%41ss@", ":@"]))
    port = draw(st.sampled_from(["", ":", ":80", ":443", ":0080", ":8080"]))
    segments = draw(st.lists(st.one_of(st.sampled_from([".", "..", "%2E", "%2e%2E", "", "a;jsessionid=1"]),
                                       _component(PATH_CHARS, 4)), max_size=5))
    names = st.one_of(st.sampled_from(["a", "b", "utm_source", "UTM_Medium", "gclid", "jsessionid", "sid"]),
                      _component(UNRESERVED + "%", 2))
    params = draw(st.lists(st.tuples(names, _component(PATH_CHARS + "?/", 3)), max_size=4))
    query = draw(st.sampled_from(["", "?", "?&"])) + "&".join(f"{name}={value}" for name, value in params)
    query = query if query.startswith("?") or not query else "?" + query
    fragment = draw(st.sampled_from(["", "#", "#top", "#a?b", "#a b", "#\x7f", "#é", "##"]))
    return f"{scheme}://{userinfo}{draw(_host())}{port}/{'/'.join(segments)}{query}{fragment}"


@PROPERTY
@given(url=urls(), profile=st.sampled_from(PROFILES))
def test_idempotent(url: str, profile: str) -> None:
    settings_ = CanonicalSettings(profile=profile)
    try:
        once = canonicalize(url, settings_)
    except RecordRejected as rejected:
        assert rejected.reason in REASONS
        return
    assert once.isascii()
    assert canonicalize(once, settings_) == once


@st.composite
def _spelling_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """A plain URL and a spelling of it that differs only in ways the safe profile undoes."""
    scheme = draw(st.sampled_from(["http", "https"]))
    host = ".".join(draw(st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=6), min_size=1,
                                  max_size=3))) + ".example"
    segments = draw(st.lists(st.text(UNRESERVED + "!$&'()*+,;=:@", max_size=5), max_size=4))
    query = draw(st.none() | st.text(UNRESERVED + "=&+", max_size=10))
    plain = f"{scheme}://{host}/{'/'.join(segments)}" + (f"?{query}" if query else "")

    def escape_some(text: str) -> str:
        flags = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
        escaped = [draw(_random_case(f"%{ord(c):02x}")) if flag and c in UNRESERVED else c
                   for c, flag in zip(text, flags, strict=True)]
        return "".join(escaped)

    dots = st.sampled_from(["", "./", "x/../", "./y/%2E%2e/"])
    path = "/".join(draw(dots) + escape_some(segment) for segment in segments)
    port = draw(st.sampled_from(["", ":", ":80" if scheme == "http" else ":443"]))
    variant = (f"{draw(_random_case(scheme))}://{draw(_random_case(host))}{draw(st.sampled_from(['', '.']))}"
               f"{port}/{path}" + (f"?{escape_some(query)}" if query else draw(st.sampled_from(["", "?"])))
               + draw(st.sampled_from(["", "#", "#frag"])))
    return plain, variant


@PROPERTY
@given(pair=_spelling_pairs(), profile=st.sampled_from(PROFILES))
def test_safe_spellings_share_a_fingerprint(pair: tuple[str, str], profile: str) -> None:
    plain, variant = pair
    settings_ = CanonicalSettings(profile=profile)
    assert fingerprint(canonicalize(variant, settings_)) == fingerprint(canonicalize(plain, settings_))


@PROPERTY
@given(text=st.text(), base=st.none() | st.text() | urls(), profile=st.sampled_from(PROFILES))
def test_any_text_gives_a_url_or_record_rejected(text: str, base: str | None, profile: str) -> None:
    settings_ = CanonicalSettings(profile=profile)
    for candidate in (text, "http://" + text, "https://example.com/" + text):
        try:
            canonical = canonicalize(candidate, settings_, base=base)
        except RecordRejected as rejected:
            assert rejected.reason in REASONS
        else:
            assert canonicalize(canonical, settings_) == canonical


# --- the shortcut for URLs written canonically --------------------------------------------------


@st.composite
def plain_looking_urls(draw: st.DrawFn) -> str:
    """URLs near the shortcut's boundary: mostly canonical, with one of the spellings it must refuse."""
    host = draw(st.one_of(st.text(string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=12),
                          st.sampled_from(["www.example.com", "xn--p1ai.com", "127.1", "0x7f.1", "a..b",
                                           "example.com.", "EXAMPLE.com", "www.com"])))
    path = draw(st.lists(st.one_of(st.text(UNRESERVED + "!$&'()*+,;=:@/%#.", max_size=3), _escape()),
                         max_size=5).map("".join))
    query = draw(st.sampled_from(["", "?", "?a=1", "?b=2&a=1", "?utm_source=x", "?x=%41", "??"]))
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "ftp"]))
    fragment = draw(st.sampled_from(["", "#", "#top", "#a#b", "#a b", "#\t", "#\x00", "#é", "#%zz"]))
    return f"{scheme}://{host}/{path}{query}{fragment}"


@PROPERTY
@given(url=st.one_of(urls(), plain_looking_urls()), profile=st.sampled_from(PROFILES))
def test_shortcut_only_takes_urls_the_full_parse_leaves_unchanged(url: str, profile: str) -> None:
    settings_ = CanonicalSettings(profile=profile)
    plain = _plain_canonical(url, settings_)
    if plain is not None:
        assert _parsed_canonical(url, settings_, "http://base.example/dir/") == plain


@PROPERTY
@given(url=st.one_of(urls(), plain_looking_urls()), profile=st.sampled_from(PROFILES))
def test_canonical_outputs_mostly_take_the_shortcut(url: str, profile: str) -> None:
    """Once canonical, a URL takes the shortcut unless it has one of the refused (rare) shapes."""
    settings_ = CanonicalSettings(profile=profile)
    try:
        once = _parsed_canonical(url, settings_, None)
    except RecordRejected:
        return
    unusual = "@" in once or "[" in once or "/." in once or ":" in once.split("/")[2]
    unusual = unusual or any(label.startswith("xn--") for label in once.split("/")[2].split("."))
    if not unusual and not (settings_.aggressive and ("?" in once or ";" in once)):
        assert _plain_canonical(once, settings_) == once


@pytest.mark.parametrize(("url", "plain"), [
    ("https://example.com/a/b?x=1", "https://example.com/a/b?x=1"),
    ("http://example.com/", "http://example.com/"),
    ("http://example.com/a#top", "http://example.com/a"),   # the fragment is dropped
    ("http://example.com/a?b#", "http://example.com/a?b"),
    ("http://example.com/a#\x01", None),      # a control character: the full parse refuses it
    ("http://example.com/a# b", None),        # a space in the fragment
    ("http://example.com", None),             # the empty path becomes "/"
    ("HTTP://example.com/", None),            # scheme case
    ("http://Example.com/", None),            # host case
    ("http://example.com:80/", None),         # a port
    ("http://example.com/a%2Db", None),       # an escape of an unreserved character
    ("http://example.com/caf%C3%A9?q=%2F", "http://example.com/caf%C3%A9?q=%2F"),
    ("http://example.com/caf%c3%a9", None),   # lower-case hex
    ("http://example.com/a%", None),          # a "%" starting no escape
    ("http://example.com/a%4", None),         # ... or half of one
    ("http://example.com/a?q=%G1", None),     # ... or one with no hex digits
    ("http://example.com/a?q=%7E", None),     # an escaped "~" (unreserved) in the query
    ("http://example.com/a#x%zz", "http://example.com/a"),  # anything printable in a fragment
    ("http://example.com/./a", None),         # a dot segment
    ("http://example.com/a?", None),          # an empty query
    ("http://127.1/", None),                  # an IPv4 number
    ("http://example.com./", None),           # the trailing dot of a FQDN
    ("http://u@example.com/", None),          # userinfo
    ("//example.com/a", None),                # relative
])
def test_shortcut_cases(url: str, plain: str | None) -> None:
    assert _plain_canonical(url, CanonicalSettings()) == plain
    if plain is not None:
        assert canonicalize(url) == plain
