"""Main text and full text: noise removed, stable under markup whitespace, never empty when the page
has text, never raising; normalise_text; the benchmark's metric; ten pages of the corpus."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resiliparse.parse.html import HTMLParserException

import streams.pages.extract as extract_module
from streams.pages.decode import DecodedPage, Skipped, decode_page
from streams.pages.extract import MAX_MAIN_CONTENT_DEPTH, ExtractedText, extract_text, normalise_text
from testing.extraction import Scores, evaluate, precision, recall, shingle_scores

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "article-extraction-benchmark"

ARTICLE = ("The council approved the new budget for the city's libraries after a long debate on Tuesday. "
           "Opening hours will be extended in six branches, and the mobile library returns in spring. ")
PAGE = f"""<!DOCTYPE html><html><head><title>  Budget
  approved </title><style>p {{ color: red }}</style><script>var tracking = "script text";</script></head>
<body><header><nav><ul><li><a href="/">Home</a></li><li><a href="/news">All news</a></li></ul></nav></header>
<main><article><h1>Budget approved</h1><p>{ARTICLE}</p><p>{ARTICLE}</p>
<figure><img src="a.jpg" alt="Photo of the council"><figcaption>The council in session.</figcaption></figure>
<p>What comes next: the plan goes to the regional office for a final review in May.</p>
<div class="comments"><p>Great news for readers! -- reader123</p></div>
<p class="byline">By Jane Doe, 3 hours ago</p></article></main>
<aside>Related: stories you may like</aside><footer>Copyright 2026 Example News</footer></body></html>"""


def _html(text: str) -> DecodedPage:
    return DecodedPage(text, "html", "utf-8", "given")


def test_main_text_is_the_article() -> None:
    result = extract_text(_html(PAGE))
    body = f"Budget approved {ARTICLE}{ARTICLE}What comes next: the plan goes to the regional office"
    assert result.main_text == body + " for a final review in May."
    assert result.title == "Budget approved"
    for noise in ("Home", "All news", "reader123", "Jane Doe", "Related", "Copyright", "council in session"):
        assert noise not in result.main_text
        assert noise in result.full_text
    for hidden in ("tracking", "color", "script text"):
        assert hidden not in result.full_text
    assert "Photo of the council" in result.full_text


_PARAGRAPHS = [ARTICLE, "Second paragraph, with a <b>bold</b> word and a <a href='/x'>link</a> in it.",
               "Third one &mdash; entities&nbsp;and&#160;numeric references."]
SAME_CONTENT = [
    "<article>" + "".join(f"<p>{p}</p>" for p in _PARAGRAPHS) + "</article>",
    "<article>\n  " + "\n\n  ".join(f"<p>\n    {p}\n  </p>" for p in _PARAGRAPHS) + "\n</article>\n",
    "<article>\r\n\t" + "\r\n\t".join(f"<p>{p.replace(' ', '  ')}</p>" for p in _PARAGRAPHS) + "</article>",
    "<html><body><article>" + "".join(f"<p>{p}" for p in _PARAGRAPHS) + "</article>",  # unclosed <p>
]


def test_markup_whitespace_does_not_change_the_text() -> None:
    texts = {extract_text(_html(page)) for page in SAME_CONTENT}
    assert len(texts) == 1, texts
    (text,) = texts
    assert "entities and numeric references." in text.main_text and "—" in text.main_text


@pytest.mark.parametrize(("html", "main", "full"), [
    ("<title>Tiny</title><nav>Menu</nav><p>Only a line of text.</p>", "Menu Only a line of text.",
     "Menu Only a line of text."),
    ("<img src=x alt='A picture and nothing else'>", "A picture and nothing else",
     "A picture and nothing else"),
    ("<script>only(script)</script><style>p{}</style>", "", ""),
    ("", "", ""),
])
def test_short_main_text_falls_back_to_full_text(html: str, main: str, full: str) -> None:
    result = extract_text(_html(html))
    assert (result.main_text, result.full_text) == (main, full)


def test_min_main_chars() -> None:
    article = f"<nav>Home News Sport</nav><article><p>{ARTICLE}</p></article>"
    assert extract_text(_html(article), min_main_chars=len(ARTICLE) + 50).main_text.startswith("Home")
    assert extract_text(_html(article), min_main_chars=50).main_text == ARTICLE.strip()


def test_plain_text_is_used_as_is() -> None:
    page = DecodedPage("  <b>not markup</b>\n\n  second\u00a0line  ", "text", "utf-8", "given")
    text = "<b>not markup</b> second line"
    assert extract_text(page) == ExtractedText(text, text, "")


@pytest.mark.parametrize("html", [
    "<html><p>truncated <a href=\"http://exa",
    "<p>tag soup <b><i>unclosed</b> <td>cell</table> </div></div></span>",
    "<div>" * 50_000 + "deep text",
    "<p>nul\x00bytes\x00inside</p>\x00",
    "<p>lone \ud800 surrogate \udfff</p>",
    "<",
    "<!--",
    "<![CDATA[ x",
    "\ufeff<p>bom</p>",
    "<svg><foreignObject><p>x</p></foreignObject></svg><math><mi>y",
    "<table>" + "<tr><td>cell" * 5000,
    "\x00" * 1000,
])
def test_never_raises_on_garbage(html: str) -> None:
    result = extract_text(_html(html))
    for text in (result.main_text, result.full_text, result.title):
        assert normalise_text(text) == text


def test_deep_pages_skip_main_content() -> None:
    """Nesting beyond MAX_MAIN_CONTENT_DEPTH: full text as main text, not minutes of extraction."""
    shallow = "<div>" * (MAX_MAIN_CONTENT_DEPTH - 10) + ARTICLE * 3
    deep = "<nav>Menu</nav>" + "<div>" * (MAX_MAIN_CONTENT_DEPTH + 1) + ARTICLE * 3
    assert extract_text(_html(shallow)).main_text == (ARTICLE * 3).strip()
    deep_text = extract_text(_html(deep))
    assert deep_text.main_text == deep_text.full_text == "Menu " + (ARTICLE * 3).strip()


def test_parser_failure_falls_back_to_stripped_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    class FailingTree:
        @staticmethod
        def parse(html: str) -> None:
            raise HTMLParserException("lexbor failed")

    monkeypatch.setattr(extract_module, "HTMLTree", FailingTree)
    result = extract_text(_html("<p>still <b>some</b> text</p>"))
    assert result == ExtractedText("still some text", "still some text", "")


@pytest.mark.parametrize(("raw", "normal"), [
    ("  a \t b\n\n c  ", "a b c"),
    ("a\u00a0b\u2003c\u3000d\u202fe", "a b c d e"),  # NBSP, em space, ideographic space, narrow NBSP
    ("Ｆｕｌｌ　ｗｉｄｔｈ １２３", "Full width 123"),
    ("ﬁne ﬂour", "fine flour"),
    ("ｶﾀｶﾅ", "カタカナ"),
    ("cafe\u0301", "café"),
    ("soft\u00adhyphen zero\u200bwidth word\u2060joiner \ufeffbom", "softhyphen zerowidth wordjoiner bom"),
    ("nul\x00 and\x07 bell\x1b and \x9f c1", "nul and bell and c1"),
    ("zwnj\u200cstays zwj\u200dstays", "zwnj\u200cstays zwj\u200dstays"),
    ("line\u2028sep\u2029para\x85nel\x0bvt\x0cff", "line sep para nel vt ff"),
    ("lone \ud800 surrogate", "lone \ufffd surrogate"),
    ("", ""),
    (" \n\t ", ""),
])
def test_normalise_text(raw: str, normal: str) -> None:
    assert normalise_text(raw) == normal


@PROPERTY
@given(st.text())
def test_normalise_text_is_idempotent(text: str) -> None:
    once = normalise_text(text)
    assert normalise_text(once) == once
    assert once == once.strip() and "  " not in once
    once.encode("utf-8")


_SPACE = st.text(alphabet=" \t\n\r\u00a0\u2003\u3000", min_size=1, max_size=4)
_WORD = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Z", "C"]), min_size=1, max_size=8)


@PROPERTY
@given(words=st.lists(_WORD, min_size=1, max_size=10), spaces=st.lists(_SPACE, min_size=11, max_size=11))
def test_normalise_text_ignores_whitespace_spelling(words: list[str], spaces: list[str]) -> None:
    spaced = spaces[0] + "".join(word + space for word, space in zip(words, spaces[1:], strict=False))
    assert normalise_text(spaced) == normalise_text(" ".join(words))


@PROPERTY
@given(st.text(max_size=3000))
def test_extract_text_is_total(text: str) -> None:
    for media in ("html", "text"):
        result = extract_text(DecodedPage(text, media, "utf-8", "given"))
        for part in (result.main_text, result.full_text, result.title):
            assert normalise_text(part) == part


@PROPERTY
@given(st.text(alphabet=st.sampled_from("<>/=\"' !-abdiptv\n"), max_size=400))
def test_extract_text_is_total_on_tag_soup(text: str) -> None:
    extract_text(_html(text))


# --- the benchmark's metric (bench/extract_bench.py) ----------------------------------------


@pytest.mark.parametrize(("true", "predicted", "scores"), [
    ("one two three four five", "one two three four five", Scores(1.0, 0.0, 0.0)),
    ("one two three four five", "", Scores(0.0, 0.0, 1.0)),
    ("", "one two three four five", Scores(0.0, 1.0, 0.0)),
    ("", "", Scores(0.0, 0.0, 0.0)),
    ("one two three four five", "one two three four six", Scores(1 / 3, 1 / 3, 1 / 3)),  # 2 shingles each
    ("a b", "a b", Scores(1.0, 0.0, 0.0)),  # shorter than a shingle: one short shingle
    ("One, two; three - four!", "one two three four", Scores(0.0, 0.5, 0.5)),  # punctuation out, case kept
])
def test_shingle_scores(true: str, predicted: str, scores: Scores) -> None:
    assert shingle_scores(true, predicted) == pytest.approx(scores)


def test_scores_and_summary() -> None:
    assert precision(Scores(0.0, 0.0, 0.0)) == recall(Scores(0.0, 0.0, 0.0)) == 1.0
    assert precision(Scores(0.0, 0.0, 1.0)) == recall(Scores(0.0, 1.0, 0.0)) == 0.0  # nothing right
    result = evaluate(["a b c d e", "f g h i j"], ["a b c d e", ""], bootstrap=20, seed=1)
    # page 2 has no prediction: out of the precision mean, 0 in the recall mean
    assert (result["precision"], result["recall"], result["accuracy"]) == (1.0, 0.5, 0.5)
    assert result["f1"] == pytest.approx(2 / 3)
    assert result["f1_std"] > 0


# --- the corpus ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_pages() -> list[bytes]:
    html = CORPUS / "html"
    if not html.is_dir():
        pytest.skip(f"corpus not found at {CORPUS} (the article-extraction-benchmark checkout)")
    return [gzip.decompress(path.read_bytes()) for path in sorted(html.glob("*.html.gz"))[:10]]


def test_corpus_pages_extract(corpus_pages: list[bytes]) -> None:
    assert len(corpus_pages) == 10
    for body in corpus_pages:
        page = decode_page(body, "text/html", {})
        assert not isinstance(page, Skipped) and page.media == "html"
        result = extract_text(page)
        assert len(result.main_text) >= 200
        assert len(result.main_text) < len(result.full_text)
        assert result.title
