"""The revisit stage's change text and features (streams.pages.changes): what counts as the page."""

from __future__ import annotations

from html import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.pages.analyze import PageSettings
from streams.pages.changes import ChangeFeatures, change_features, mask_numbers, number_buckets
from streams.pages.decode import DecodedPage, Skipped
from streams.pages.extract import change_text, extract_text
from streams.stages.revisit.numbers import moved_buckets

ARTICLE = ("The council approved the new budget for the city's libraries after a long debate on Tuesday. "
           "Opening hours will be extended in six branches, and the mobile library returns in spring. ")
LINKS = "".join(f'<li><a href="/guide/{n}">Guide to topic {n}</a></li>' for n in ("one", "two", "three"))
SETTINGS = PageSettings(shingle_words=2, weighting="tf", cjk_ngram_chars=2)


def html(body: str) -> DecodedPage:
    return DecodedPage(f"<!doctype html><html><head><title>T</title></head><body>{body}</body></html>",
                       "html", "utf-8", "given")


def record(body: str) -> dict[str, object]:
    return {"url": "http://example.com/a", "status": 200, "content_type": "text/html",
            "body": f"<html><body>{body}</body></html>"}


CHROME = ('<header><nav><a href="/">Home</a> <a href="/login?session=4f2a">Sign in</a></nav></header>'
          '<aside><h3>Popular</h3><ul><li><a href="/x">Some page</a></li></ul>'
          '<p>Sponsored: try it.</p></aside>'
          '<footer>12,345 views. Rendered 2024-06-01 12:00 UTC.</footer>')


@pytest.mark.parametrize(("body", "expected"), [
    # a declared <main>: all of it (its list of links too), less the boilerplate inside it
    (f"{CHROME}<main><h1>Guide</h1><p>{ARTICLE}</p><ul>{LINKS}</ul><nav>in-page nav</nav></main>",
     f"Guide {ARTICLE}Guide to topic one Guide to topic two Guide to topic three"),
    # one <article> without <main>
    (f"{CHROME}<div><article><h1>Guide</h1><p>{ARTICLE}</p></article></div>", f"Guide {ARTICLE}".strip()),
    # a one-line reference entry in <main>: not replaced by the page's full text
    (f"{CHROME}<main><h1>math.Round</h1><pre>math.Round 1.5 -> 2</pre></main>",
     "math.Round math.Round 1.5 -> 2"),
    # a short page without landmarks: the text outside the header, footer and sidebars
    (f"{CHROME}<div><h1>csvclean</h1><p>Find errors in CSV files.</p></div>",
     "csvclean Find errors in CSV files."),
])
def test_change_text(body: str, expected: str) -> None:
    assert change_text(html(body)) == expected.strip()


def test_a_listing_of_several_articles_uses_the_main_content_heuristics() -> None:
    page = html(f"{CHROME}<article><p>{ARTICLE}</p></article><article><p>{ARTICLE}</p></article>")
    assert change_text(page) == extract_text(page, full_text=False).main_text


def test_a_long_main_text_without_landmarks_is_the_page_stages() -> None:
    page = html(f'<div id="nav"><a href="/">Home</a></div><div class="story"><p>{ARTICLE * 3}</p></div>')
    assert change_text(page) == extract_text(page, full_text=False).main_text


@pytest.mark.parametrize(("text", "masked"), [
    ("Read 1041 times.", "Read 0 times."),
    ("1,234,567 views at 12:03:44 on 2024-06-01", "0 views at 0 on 0-0-0"),
    ("version 1.2.3 and ４２", "version 0 and 0"),
    ("no numbers here", "no numbers here"),
])
def test_mask_numbers(text: str, masked: str) -> None:
    assert mask_numbers(text) == masked


@settings(deadline=None, max_examples=100)
@given(st.text(), st.integers(0, 10**9), st.integers(0, 10**9))
def test_numbers_alone_never_change_the_wording(prefix: str, before: int, after: int) -> None:
    words = escape(repr(prefix))  # any text, as text: "<?" unescaped would open a bogus comment
    a = change_features(record(f"<main><p>{ARTICLE} {words} read {before:,} times</p></main>"), SETTINGS)
    b = change_features(record(f"<main><p>{ARTICLE} {words} read {after:,} times</p></main>"), SETTINGS)
    assert isinstance(a, ChangeFeatures) and isinstance(b, ChangeFeatures)
    assert a.wording_digest == b.wording_digest
    assert (a.text_digest == b.text_digest) is (before == after)


def test_one_word_changes_the_wording_however_long_the_page() -> None:
    long_text = ARTICLE * 60
    a = change_features(record(f"<main><p>{long_text}</p></main>"), SETTINGS)
    b = change_features(record(f"<main><p>{long_text.replace('spring', 'summer', 1)}</p></main>"), SETTINGS)
    assert isinstance(a, ChangeFeatures) and isinstance(b, ChangeFeatures)
    assert a.wording_digest != b.wording_digest


def test_churn_outside_the_content_changes_nothing() -> None:
    a = change_features(record(f"{CHROME}<main><p>{ARTICLE}</p></main>"), SETTINGS)
    churned = CHROME.replace("12,345", "12,346").replace("4f2a", "9c1e").replace("Some page", "Other page")
    b = change_features(record(f"{churned}<main><p>{ARTICLE}</p></main>"), SETTINGS)
    assert isinstance(a, ChangeFeatures) and isinstance(b, ChangeFeatures)
    assert a.text_digest == b.text_digest


@pytest.mark.parametrize(("fields", "reason"), [({"method": "HEAD"}, "head_request"),
                                                ({"status": 404}, "status:404"),
                                                ({"body": ""}, "empty_body")])
def test_pages_not_compared_say_why(fields: dict[str, object], reason: str) -> None:
    assert change_features({**record("<p>x</p>"), **fields}, SETTINGS) == Skipped(reason)


@pytest.mark.parametrize(("text", "masked"), [
    ("Served Tuesday, 3 December 2024 at 12:03 UTC.", "Served 0, 0 0 0 at 0 UTC."),
    ("Released Mar 5; patched on Sept 30 (Thu).", "Released 0 0; patched on 0 0 (0)."),
    ("may the sun shine on Mayfair and Marching bands", "may the sun shine on Mayfair and Marching bands"),
], ids=["a clock in words", "abbreviations", "words that only look like months"])
def test_month_and_weekday_names_are_numbers(text: str, masked: str) -> None:
    assert mask_numbers(text) == masked


COUNTED = "Read 1,041 times. Release 3.12.7 came out on 2024-10-02 and is supported until 2028."


@pytest.mark.parametrize(("after", "moved"), [
    (COUNTED, 0),
    ("Read 1,042 times. Release 3.12.7 came out on 2024-10-02 and is supported until 2028.", 1),
    ("Read 1,041 times. Release 3.12.8 came out on 2024-10-02 and is supported until 2028.", 1),
    ("Read 1,042 times. Release 3.12.8 came out on 2024-10-02 and is supported until 2029.", 3),
    ("A new first sentence. Read 1,041 times. Release 3.12.7 came out on 2024-10-02 and is supported "
     "until 2028.", 0),   # context, not position: an insertion elsewhere moves no bucket
], ids=["same", "counter", "release", "counter, release, year", "insertion before"])
def test_number_buckets_say_which_numbers_moved(after: str, moved: int) -> None:
    before_buckets, after_buckets = number_buckets(COUNTED), number_buckets(after)
    assert before_buckets is not None and after_buckets is not None
    assert moved_buckets(before_buckets, after_buckets).bit_count() == moved


def test_a_text_without_numbers_has_no_buckets() -> None:
    assert number_buckets("no digits here at all") is None
    features = change_features(record(f"<main><p>{ARTICLE} {COUNTED}</p></main>"), SETTINGS)
    assert isinstance(features, ChangeFeatures) and features.number_buckets == number_buckets(
        " ".join(f"{ARTICLE} {COUNTED}".split()))


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=20), st.integers(0, 19), st.integers(0, 10**6))
def test_changing_one_number_moves_at_most_one_bucket(numbers: list[int], which: int, value: int) -> None:
    words = " ".join(f"word{i} {n}" for i, n in enumerate(numbers))
    changed = list(numbers)
    changed[which % len(numbers)] = value
    after = " ".join(f"word{i} {n}" for i, n in enumerate(changed))
    before_buckets, after_buckets = number_buckets(words), number_buckets(after)
    assert before_buckets is not None and after_buckets is not None
    moved = value != numbers[which % len(numbers)]
    assert moved_buckets(before_buckets, after_buckets).bit_count() == moved
