"""analyze_page: which pages are compared, digests, SimHash, and the block design it sizes."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from typing import Any

import orjson
import pytest

from streams import records
from streams.errors import ConfigError, RecordRejected
from streams.pages.analyze import (
    PageAnalysis,
    PageSettings,
    analysis_from_json,
    analysis_to_json,
    analyze_page,
    design_for,
    digest,
)
from streams.pages.blocks import block_design
from streams.pages.decode import Skipped
from streams.pages.simhash import hamming
from streams.pages.sketch import PageSignature, is_near_duplicate
from streams.records import RecordKind

SETTINGS = PageSettings()
ARTICLE = " ".join(
    f"Paragraph {n}: the committee met on Tuesday to discuss the budget for the coming year, and "
    f"members disagreed about how much to spend on roads, schools and the harbour." for n in range(12))
CHINESE = "北京市政府今天宣布，将在明年投入更多资金用于公共交通建设，以缓解城市交通拥堵问题。" * 8


def html(text: str, host: str = "news.example.com", nav: str = "Home News Sport",
         charset: str = "utf-8") -> str:
    return (f'<!doctype html><html><head><meta charset="{charset}"><title>Budget</title></head><body>'
            f'<nav><a href="https://{host}/">{nav}</a></nav><article><h1>Budget</h1><p>{text}</p></article>'
            f"<footer>© {host}</footer></body></html>")


def page(body: str | bytes, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"url": "https://news.example.com/a", "status": 200,
                              "headers": {"content-type": "text/html; charset=utf-8"},
                              "content_type": "text/html; charset=utf-8"}
    if isinstance(body, bytes):
        record["body_base64"] = base64.b64encode(body).decode()
    else:
        record["body"] = body
    record.update(fields)
    return record


def analysed(record: dict[str, Any], settings: PageSettings = SETTINGS) -> PageAnalysis:
    result = analyze_page(record, settings)
    assert isinstance(result, PageAnalysis), result
    return result


@pytest.mark.parametrize(("fields", "reason"), [
    ({"method": "HEAD"}, "head_request"),
    ({"status": 404}, "status:404"),
    ({"status": 304}, "status:304"),
    ({"status": 503}, "status:503"),
    ({"status": 206}, "status:206"),
    ({"status": None}, "no_response"),
])
def test_pages_not_compared(fields: dict[str, Any], reason: str) -> None:
    assert analyze_page(page(html(ARTICLE), **fields), SETTINGS) == Skipped(reason)


def test_skips_from_decoding_and_extraction() -> None:
    assert analyze_page(page(""), SETTINGS) == Skipped("empty_body")
    assert analyze_page({"url": "https://x.example/"}, SETTINGS) == Skipped("empty_body")
    png = page(b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png",
               headers={"content-type": "image/png"})
    assert analyze_page(png, SETTINGS) == Skipped("content_type:image/png")
    assert analyze_page(page("<html><body><script>var x = 1;</script>  <p> ★ · — </p></body></html>"),
                        SETTINGS) == Skipped("no_text")


def test_status_absent_or_other_2xx_is_analysed() -> None:
    record = page(html(ARTICLE))
    del record["status"]
    assert isinstance(analyze_page(record, SETTINGS), PageAnalysis)
    assert isinstance(analyze_page(page(html(ARTICLE), status=203), SETTINGS), PageAnalysis)


def test_invalid_base64_is_a_dead_letter() -> None:
    record = page(b"x")
    record["body_base64"] = "abc"  # the schema's pattern allows it, but it is not whole base64
    with pytest.raises(RecordRejected) as error:
        analyze_page(record, SETTINGS)
    assert error.value.reason == "schema" and "body_base64" in error.value.detail


def test_digests_and_fingerprint() -> None:
    body = html(ARTICLE)
    as_text, as_bytes = analysed(page(body)), analysed(page(body.encode()))
    assert as_text.text_digest == as_bytes.text_digest and as_text.simhash == as_bytes.simhash
    assert len(as_text.text_digest) == 16 and 0 <= as_text.simhash < 1 << 64
    assert as_text.text_chars >= len(ARTICLE) and as_text.media == "html"
    assert (as_bytes.charset, as_bytes.charset_source) == ("utf-8", "header")
    assert digest(b"") == hashlib.blake2b(b"", digest_size=16).digest()


def test_same_text_other_host_markup_and_charset_is_an_exact_copy() -> None:
    original = analysed(page(html(CHINESE)))
    mirror = analysed(page(html(CHINESE, host="mirror.example.net", nav="首页 新闻")))
    gbk_body = html(CHINESE, charset="gbk").encode("gbk", "xmlcharrefreplace")
    gbk = analysed(page(gbk_body, content_type="text/html", headers={"content-type": "text/html"}))
    assert gbk.charset_source == "meta" and gbk.charset == "gb18030"
    assert original.text_digest == mirror.text_digest == gbk.text_digest


def test_small_edit_is_near_other_article_is_far() -> None:
    original = analysed(page(html(ARTICLE)))
    edited = analysed(page(html(ARTICLE.replace("Tuesday", "Wednesday", 1))))
    other = analysed(page(html(" ".join(word[::-1] for word in ARTICLE.split()))))  # other words
    assert edited.text_digest != original.text_digest
    assert hamming(edited.simhash, original.simhash) <= SETTINGS.hamming_threshold
    assert hamming(other.simhash, original.simhash) > 10


def test_the_sketch_comes_from_the_same_main_text() -> None:
    original = analysed(page(html(ARTICLE)))
    mirror = analysed(page(html(ARTICLE, host="mirror.example.net", nav="Start Shop")))
    edited = analysed(page(html(ARTICLE.replace("Tuesday", "Wednesday", 1))))
    assert original.sketch is not None and mirror.sketch is not None and edited.sketch is not None
    assert original.sketch == mirror.sketch  # the same main text
    near = PageSignature(edited.simhash, edited.sketch)
    stored = PageSignature(original.simhash, original.sketch)
    assert is_near_duplicate(near, stored, hamming(edited.simhash, original.simhash))
    without = analyze_page(page(html(ARTICLE)), SETTINGS, sketch=False)
    assert without == dataclasses.replace(original, sketch=None)


def test_the_analysis_crosses_a_pipe_with_its_sketch() -> None:
    for found in (analysed(page(html(ARTICLE))), analyze_page(page(html(ARTICLE)), SETTINGS, sketch=False),
                  Skipped("no_text")):
        assert analysis_from_json(analysis_to_json(found)) == found


def test_a_record_as_the_stage_decodes_it() -> None:
    raw = orjson.dumps({"url": "https://news.example.com/a", "status": 200,
                        "headers": {"Content-Type": ["text/html", "charset=utf-8"]},
                        "body": html(ARTICLE), "fetched_at": "2026-11-01T00:00:00Z"})
    record = records.decode(RecordKind.FETCHED_PAGE, raw)
    assert analysed(record).text_digest == analysed(page(html(ARTICLE))).text_digest


def test_design_for_settings() -> None:
    assert design_for(SETTINGS) == block_design(3, 10_000_000)
    assert len(design_for(SETTINGS).tables) == 10
    assert design_for(SETTINGS) is design_for(PageSettings())
    assert len(design_for(PageSettings(hamming_threshold=4)).tables) == 35


@pytest.mark.parametrize("fields", [
    {"hamming_threshold": 64}, {"hamming_threshold": -1}, {"weighting": "idf"}, {"expected_pages": 0},
    {"shingle_words": 0}, {"cjk_ngram_chars": 0}, {"min_main_chars": -1},
])
def test_settings_out_of_range(fields: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        PageSettings(**fields)
