"""Page decoding: charsets declared and detected in many scripts, the HTML prescan, Content-Type,
media types and skip reasons, and that decode_page never raises."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.pages.charset_labels import codec_for_label, prescan_charset
from streams.pages.decode import DecodedPage, Skipped, decode_page, parse_content_type
from testing.charsets import CASES, SAMPLES, Case, encodable, html_page

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def _ids(case: Case) -> str:
    return f"{case.lang}-{case.encoding}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_charset_from_header(case: Case) -> None:
    text = html_page(encodable(SAMPLES[case.lang], case.encoding))
    page = decode_page(text.encode(case.encoding), f"text/html; charset={case.label}", {})
    assert page == DecodedPage(text, "html", case.codec, "header")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_charset_from_meta(case: Case) -> None:
    text = html_page(encodable(SAMPLES[case.lang], case.encoding), f'<meta charset="{case.label}">')
    page = decode_page(text.encode(case.encoding), "text/html", {})
    assert page == DecodedPage(text, "html", case.codec, "meta")


@pytest.mark.parametrize("case", [c for c in CASES if c.detectable], ids=_ids)
@pytest.mark.parametrize("media", ["html", "text"])
def test_charset_detected(case: Case, media: str) -> None:
    sample = encodable(SAMPLES[case.lang], case.encoding)
    text = html_page(sample) if media == "html" else sample
    page = decode_page(text.encode(case.encoding), "text/html" if media == "html" else "text/plain", {})
    assert isinstance(page, DecodedPage)
    assert (page.text, page.media, page.charset_source) == (text, media, "detected")


@pytest.mark.parametrize("case", [c for c in CASES if not c.detectable], ids=_ids)
def test_charset_not_detectable_still_decodes(case: Case) -> None:
    """Detection may pick a sibling single-byte charset here; the page still decodes, in full."""
    text = html_page(encodable(SAMPLES[case.lang], case.encoding))
    page = decode_page(text.encode(case.encoding), "text/html", {})
    assert isinstance(page, DecodedPage) and page.charset_source == "detected"
    assert len(page.text) == len(text) and "\ufffd" not in page.text


@pytest.mark.parametrize(("bom", "encoding"), [
    (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
])
@pytest.mark.parametrize("content_type", ["text/html; charset=windows-1252", "text/plain", None])
def test_bom_wins(bom: bytes, encoding: str, content_type: str | None) -> None:
    text = html_page(SAMPLES["ko"], '<meta charset="iso-8859-2">')
    page = decode_page(bom + text.encode(encoding), content_type, {})
    media = "text" if content_type == "text/plain" else "html"
    assert page == DecodedPage(text, media, encoding, "bom")


class Fallback(NamedTuple):
    name: str
    body: bytes
    content_type: str
    text: str
    charset: str
    source: str


_RU = html_page(SAMPLES["ru"])
_JA = html_page(SAMPLES["ja"], '<meta charset="shift_jis">')
_UTF8 = html_page(SAMPLES["de"]).encode()
_CUT = ("<p>" + SAMPLES["ru"][:-1]).encode()[:-1]  # ends with the first byte of a two-byte "к"
FALLBACKS = [
    Fallback("wrong header, detection right", _RU.encode("cp1251"), "text/html; charset=utf-8", _RU,
             "cp1251", "detected"),
    Fallback("wrong header, meta right", _JA.encode("shift_jis"), "text/html; charset=utf-8", _JA, "cp932",
             "meta"),
    Fallback("unknown label ignored", _RU.encode("koi8_r"), "text/html; charset=x-no-such", _RU, "koi8-r",
             "detected"),
    Fallback("body cut inside a character", _CUT, "text/html; charset=utf-8", "<p>" + SAMPLES["ru"][:-2],
             "utf-8", "header"),
    Fallback("one bad byte: declared charset, replacement", _UTF8[:300] + b"\xff" + _UTF8[300:],
             "text/html; charset=utf-8", _UTF8[:300].decode() + "\ufffd" + _UTF8[300:].decode(), "utf-8",
             "header"),
    Fallback("no declaration, ASCII", b"<p>plain ascii page</p>", "text/html", "<p>plain ascii page</p>",
             "cp1252", "detected"),
    Fallback("meta after the first 1024 bytes is not read", (" " * 1100 + _JA).encode("shift_jis"),
             "text/html", " " * 1100 + _JA, "cp932", "detected"),
]


@pytest.mark.parametrize("case", FALLBACKS, ids=lambda c: c.name)
def test_charset_fallbacks(case: Fallback) -> None:
    assert decode_page(case.body, case.content_type, {}) == DecodedPage(case.text, "html", case.charset,
                                                                        case.source)


@pytest.mark.parametrize(("head", "codec"), [
    (b'<meta charset="shift_jis">', "cp932"),
    (b"<META CHARSET=GBK>", "gb18030"),
    (b"<meta charset = ' euc-kr '>", "cp949"),
    (b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">', "cp1251"),
    (b'<meta content="text/html; charset=\'koi8-r\'" http-equiv=content-type>', "koi8-r"),
    (b'<meta content="text/html; charset=koi8-r">', None),  # content without the pragma
    (b'<meta http-equiv="refresh" content="0; charset=koi8-r">', None),
    (b"<!-- <meta charset=big5> --><meta charset=euc-jp>", "euc_jp"),
    (b'<div title="<meta charset=big5>"><meta charset=euc-jp>', "euc_jp"),
    (b"<meta charset=no-such-thing><meta charset=iso-8859-7>", "iso8859-7"),
    (b"<meta charset=utf-16le>", "utf-8"),  # WHATWG: a prescanned UTF-16 is UTF-8
    (b"<meta charset=latin1 charset=big5>", "cp1252"),  # the first of a repeated attribute
    (b"<metal charset=big5>", None),
    (b"<?xml version='1.0' encoding='big5'?><meta charset=windows-1250>", "cp1250"),
    (b"<meta charset=big5", None),  # cut off: the prescan gives up
    (b"", None),
])
def test_prescan(head: bytes, codec: str | None) -> None:
    assert prescan_charset(head) == codec


@pytest.mark.parametrize(("label", "codec"), [
    ("utf-8", "utf-8"), (" UTF8 ", "utf-8"), ("unicode-1-1-utf-8", "utf-8"),
    ("gb2312", "gb18030"), ("GBK", "gb18030"), ("x-gbk", "gb18030"), ("gb18030", "gb18030"),
    ("big5", "big5hkscs"), ("big5-hkscs", "big5hkscs"), ("shift_jis", "cp932"), ("sjis", "cp932"),
    ("ms932", "cp932"), ("euc-kr", "cp949"), ("windows-949", "cp949"), ("euc-jp", "euc_jp"),
    ("iso-8859-1", "cp1252"), ("latin1", "cp1252"), ("ascii", "cp1252"), ("us-ascii", "cp1252"),
    ("iso-8859-9", "cp1254"), ("windows-874", "cp874"), ("iso-8859-2", "iso8859-2"), ("koi8-u", "koi8-u"),
    ("utf-16", "utf-16-le"), ("utf-16be", "utf-16-be"),
    ("utf-7", None), ("rot13", None), ("base64", None), ("x-no-such", None), ("", None),
])
def test_codec_for_label(label: str, codec: str | None) -> None:
    assert codec_for_label(label) == codec


@pytest.mark.parametrize(("value", "parsed"), [
    ("text/html", ("text/html", None)),
    ("Text/HTML; Charset=UTF-8", ("text/html", "UTF-8")),
    ('text/html;charset="Shift_JIS"', ("text/html", "Shift_JIS")),
    ('text/plain; format=flowed; charset="a\\"b"', ("text/plain", 'a"b')),
    ("text/html ; charset = utf-8", ("text/html", "utf-8")),  # spaces around "=" tolerated
    ("text/html; charset=", ("text/html", None)),
    ('text/html; title="a;b,c"; charset=big5', ("text/html", "big5")),
    ("text/html; charset=gbk, text/html", ("text/html", "gbk")),  # joined duplicates
    ("text/html; charset=gbk, text/plain", ("text/plain", None)),
    ("text/html, nonsense", ("text/html", None)),
    ("nonsense", None), ("text/", None), ("/html", None), ("text/ht ml", None), ("", None), (None, None),
])
def test_parse_content_type(value: str | None, parsed: tuple[str, str | None] | None) -> None:
    assert parse_content_type(value) == parsed


_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10"
_PROSE = "A short note in plain text, with no markup at all.\nSecond line.\n"


@pytest.mark.parametrize(("content_type", "body", "expected"), [
    ("text/html", b"<p>x</p>", "html"),
    ("application/xhtml+xml; charset=utf-8", b"<html xmlns='http://www.w3.org/1999/xhtml'/>", "html"),
    ("text/plain", _PROSE.encode(), "text"),
    ("text/markdown", b"# Title\n\nBody", "text"),
    ("text/plain", b"\x00\x01\x02binary\x03", Skipped("binary_body")),  # MIME Sniffing 7.2
    ("text/html", b"\x1f\x8b\x08\x00\x00\x00\x00\x00", Skipped("binary_body")),  # still gzipped
    ("text/html", _PNG, Skipped("binary_body")),
    ("image/png", _PNG, Skipped("content_type:image/png")),
    ("IMAGE/JPEG; q=1", b"\xff\xd8\xff\xe0", Skipped("content_type:image/jpeg")),
    ("application/pdf", b"%PDF-1.7", Skipped("content_type:application/pdf")),
    ("application/octet-stream", b"<p>x</p>", Skipped("content_type:application/octet-stream")),
    ("video/mp4", b"\x00\x00\x00\x18ftypmp42", Skipped("content_type:video/mp4")),
    ("audio/mpeg", b"ID3\x03", Skipped("content_type:audio/mpeg")),
    ("application/zip", b"PK\x03\x04", Skipped("content_type:application/zip")),
    ("text/css", b"p { color: red }", Skipped("content_type:text/css")),
    ("application/json", b'{"a": 1}', Skipped("content_type:application/json")),
    (None, b"<!DOCTYPE html><html><body>x</body></html>", "html"),
    (None, b"\n\t <html lang=en><p>x", "html"),
    (None, b"<p>just a paragraph</p>", "html"),
    (None, b"<?xml version='1.0'?>\n<html xmlns='http://www.w3.org/1999/xhtml'>", "html"),
    (None, b"<!-- generated --><head><title>x</title></head>", "html"),
    (None, _PROSE.encode(), "text"),
    (None, "Grüße aus Köln, schöne Stadt.".encode("cp1252"), "text"),
    (None, _PNG, Skipped("binary_body")),
    (None, b"%PDF-1.4\n%\xe2\xe3", Skipped("binary_body")),
    (None, b"\x00\x01\x02\x03 not text", Skipped("binary_body")),
    (None, b"RIFF$\x00\x00\x00WAVEfmt ", Skipped("binary_body")),
    (None, b"BMW sales rose in May.", "text"),  # "BM" is a bitmap only with binary bytes after it
    ("text/plain", b"ID3 tags, explained.", "text"),
    ("nonsense", b"<html><body>x</body></html>", "html"),  # unparsable: sniffed
    ("*/*", _PROSE.encode(), "text"),
    ("application/unknown", _PNG, Skipped("binary_body")),
    (None, b"", Skipped("empty_body")),
    ("text/html", b" \r\n\t ", Skipped("empty_body")),
    ("image/png", b"", Skipped("empty_body")),
])
def test_media(content_type: str | None, body: bytes, expected: str | Skipped) -> None:
    page = decode_page(body, content_type, {})
    assert (page.media if isinstance(page, DecodedPage) else page) == expected


def test_content_type_header_used_when_field_missing() -> None:
    assert decode_page(_PNG, None, {"content-type": "image/png"}) == Skipped("content_type:image/png")
    page = decode_page(b"<p>x</p>", "text/html", {"content-type": "image/png"})
    assert isinstance(page, DecodedPage) and page.media == "html"
    headers = {"content-type": "text/plain; charset=windows-1253"}
    page = decode_page("Καλημέρα".encode("cp1253"), None, headers)
    assert page == DecodedPage("Καλημέρα", "text", "cp1253", "header")


@pytest.mark.parametrize(("body", "content_type", "expected"), [
    ("<p>déjà vu</p>", "text/html; charset=iso-8859-1",
     DecodedPage("<p>déjà vu</p>", "html", "utf-8", "given")),
    ("Plain words.", None, DecodedPage("Plain words.", "text", "utf-8", "given")),
    ("<p>a\ud800b</p>", "text/html", DecodedPage("<p>a\ufffdb</p>", "html", "utf-8", "given")),
    ("<p>\ud83d\ude00</p>", "text/html", DecodedPage("<p>\U0001f600</p>", "html", "utf-8", "given")),
    ("   ", "text/html", Skipped("empty_body")),
    ("", None, Skipped("empty_body")),
    ("<p>x</p>", "image/gif", Skipped("content_type:image/gif")),
])
def test_text_given_by_the_fetcher(body: str, content_type: str | None,
                                   expected: DecodedPage | Skipped) -> None:
    assert decode_page(body, content_type, {}) == expected


_CONTENT_TYPES = st.one_of(
    st.none(), st.text(max_size=40),
    st.sampled_from(["text/html", "text/plain", "text/html; charset=utf-16", "text/html; charset=iso-2022-jp",
                     "text/plain; charset=gb18030", "application/xhtml+xml; charset=shift_jis", "image/png",
                     'text/html; charset="', "text/html, text/plain; charset=big5"]),
)
_HEADERS = st.dictionaries(st.sampled_from(["content-type", "content-encoding", "x-other"]),
                           st.text(max_size=30))


@PROPERTY
@given(body=st.one_of(st.binary(max_size=3000), st.text(max_size=2000)), content_type=_CONTENT_TYPES,
       headers=_HEADERS)
def test_decode_page_is_total(body: bytes | str, content_type: str | None, headers: dict[str, str]) -> None:
    page = decode_page(body, content_type, headers)
    if isinstance(page, Skipped):
        assert page.reason in {"empty_body", "binary_body"} or page.reason.startswith("content_type:")
    else:
        page.text.encode("utf-8")  # valid Unicode: no lone surrogates
        assert page.media in {"html", "text"}
        assert page.charset_source in {"given", "bom", "header", "meta", "detected", "default"}


@PROPERTY
@given(prefix=st.binary(max_size=1100), label=st.sampled_from(["big5", "koi8-r", "windows-1250", "utf-8"]))
def test_prescan_is_total(prefix: bytes, label: str) -> None:
    codec = prescan_charset(prefix + f"<meta charset={label}>".encode())
    assert codec is None or codec == codec_for_label(label)
