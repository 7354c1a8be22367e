"""The faster paths of page analysis (issue 39) give exactly what the direct formulas give.

Each shortcut in streams/pages is held here to the plain computation it replaced, so a verdict can
never depend on which path a page took: the folding tables against :func:`fold_and_kind` on every
Basic Multilingual Plane code point, prefix-sum token hashes against the direct sum, the fast paths
of :func:`normalise_text` against NFKC then split and join, and the parser tried before the
surrogate repair against the repair first. bench/pages_ab.py compares whole outputs with a clone
of main on the shared corpus.
"""

from __future__ import annotations

import sys
import unicodedata

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from streams.pages import extract, features
from streams.pages.decode import DecodedPage, valid_unicode
from streams.pages.extract import extract_text, normalise_text


def test_the_folding_tables_hold_fold_and_kind_of_every_bmp_code_point() -> None:
    folded, kinds = features._bmp_tables()
    for code in range(features._BMP):
        assert (int(folded[code]), int(kinds[code])) == features.fold_and_kind(chr(code)), hex(code)


def test_the_number_table_is_category_n() -> None:
    numbers = features._bmp_numbers()
    assert numbers.tolist() == [unicodedata.category(chr(code))[0] == "N" for code in range(features._BMP)]


def test_the_listed_spaces_are_every_whitespace_character_but_the_space() -> None:
    spaces = tuple(char for char in map(chr, range(sys.maxunicode + 1)) if char.isspace() and char != " ")
    assert spaces == extract._OTHER_SPACES


def test_the_common_compatibility_characters_are_replaced_by_their_nfkc() -> None:
    for char, folded in extract._COMMON_COMPAT:
        assert folded == unicodedata.normalize("NFKC", char) != char


def _direct_normalise(text: str) -> str:
    """normalise_text as it was written before its fast paths."""
    text = unicodedata.normalize("NFKC", extract._REMOVED.sub("", valid_unicode(text)))
    return " ".join(text.split())


# Characters where the fast paths could go wrong: every kind of whitespace, the replaced
# compatibility characters, combining marks and jamo that compose with their neighbours, controls
# that are removed, full-width forms, a lone surrogate.
_TRICKY = (" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
           "\u2026\u00ad\u200b\u2060\ufeff\x00\x7f\x9f\u0301\u0308\u0327a\u00e9eA\u212b\u1100\u1161\u11a8"
           "\uac00\uff21\uff61\uff9e\u30ab\u3099\ufb01\u00bd\u2460\u0915\u093f\ud800")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_TRICKY), max_size=40) | st.text(max_size=40))
def test_normalise_text_is_nfkc_then_split_and_join(text: str) -> None:
    assert normalise_text(text) == _direct_normalise(text)


def _spans(draw: st.DrawFn, size: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
    count = draw(st.integers(0, 20))
    starts = sorted(draw(st.lists(st.integers(0, size - 1), min_size=count, max_size=count)))
    ends = [min(size, start + draw(st.integers(1, longest))) for start in starts]
    return np.array(starts, dtype=np.intp), np.array(ends, dtype=np.intp)


@st.composite
def _codes_and_spans(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    size = draw(st.integers(1, 3000))
    codes = np.array(draw(st.lists(st.integers(0, 0x10FFFF), min_size=size, max_size=size)), dtype=np.uint64)
    starts, ends = _spans(draw, size, draw(st.sampled_from((3, 50, 1030, 3000))))
    return codes, starts, ends


@settings(max_examples=200, deadline=None)
@given(_codes_and_spans())
def test_prefix_sum_hashes_are_the_direct_sums(found: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    codes, starts, ends = found  # overlapping spans (n-grams), and spans past the capped powers
    assert features._span_hashes(codes, starts, ends).tolist() == \
        features._segment_hashes(codes, starts, ends).tolist()


def test_prefix_sums_over_a_piece_larger_than_the_kept_tables() -> None:
    rng = np.random.default_rng(39)
    size = features._CACHED_POWERS + 5000
    codes = rng.integers(0, 0x10FFFF, size, dtype=np.uint64)
    starts = np.array([0, 7, size - 2000, size - 3], dtype=np.intp)
    ends = np.array([5, 1500, size - 1, size], dtype=np.intp)
    assert features._span_hashes(codes, starts, ends).tolist() == \
        features._segment_hashes(codes, starts, ends).tolist()


@given(st.lists(st.booleans(), max_size=60))
def test_runs_are_the_maximal_runs_of_true(mask: list[bool]) -> None:
    starts, ends = features._runs(np.array(mask, dtype=np.bool_))
    expected, at = [], 0
    while at < len(mask):
        if mask[at]:
            end = at
            while end < len(mask) and mask[end]:
                end += 1
            expected.append((at, end))
            at = end
        else:
            at += 1
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == expected


def test_a_page_with_a_lone_surrogate_is_extracted_as_its_repaired_text() -> None:
    text = "<html><body><article><p>" + "Words of the article, a good many of them. " * 8 + \
        "A broken pair \ud83d here and a lone \udc00 there.</p></article></body></html>"
    page = DecodedPage(text, "html", "utf-8", "given")
    repaired = valid_unicode(text)
    found = extract_text(page)
    tree = HTMLTree.parse(repaired)
    assert found.main_text == normalise_text(str(extract_plain_text(tree, **extract.MAIN_OPTIONS)))
    assert found.full_text == normalise_text(str(extract_plain_text(tree, **extract.FULL_OPTIONS)))
    assert "\ufffd" in found.main_text
    assert extract.change_text(page) == extract.change_text(DecodedPage(repaired, "html", "utf-8", "given"))
