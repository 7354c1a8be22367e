"""Features (tokens, shingles, weights) and 64-bit SimHash: checked against plain-Python definitions."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.pages import features
from streams.pages.features import GRAM, WORD, feature_hashes, fold_and_kind, token_hashes, token_spans
from streams.pages.simhash import from_hex, hamming, simhash64, to_hex

MASK = (1 << 64) - 1
fingerprints = st.integers(min_value=0, max_value=MASK)
# Text mixing the cases the tokenizer treats differently: Latin, digits, marks, CJK, Thai, astral.
ALPHABET = "abcXYZ éß0129 ,.-_'\u0301ｶﾞＡ東京都にの行くテスト한국어ภาษาไทย𠀋😀\u00a0\n"
texts = st.text(alphabet=st.sampled_from(list(ALPHABET)), max_size=60)


# --- reference definitions -----------------------------------------------------------------------


def reference_spans(text: str, gram: int) -> list[tuple[int, int]]:
    """Tokens by the module docstring's rules, one character at a time."""
    kinds = [fold_and_kind(char)[1] for char in text]
    spans, start = [], 0
    while start < len(text):
        kind = kinds[start]
        end = start
        while end < len(text) and kinds[end] == kind:
            end += 1
        if kind == WORD:
            spans.append((start, end))
        elif kind == GRAM and end - start >= gram:
            spans.extend((s, s + gram) for s in range(start, end - gram + 1))
        elif kind == GRAM:
            spans.append((start, end))
        start = end
    return spans


def fmix64(value: int) -> int:
    value ^= value >> 33
    value = value * 0xFF51AFD7ED558CCD & MASK
    value ^= value >> 33
    value = value * 0xC4CEB9FE1A85EC53 & MASK
    return value ^ value >> 33


def reference_token_hash(token: str) -> int:
    total = sum(fold_and_kind(char)[0] * pow(0x100000001B3, min(i, 1023), 1 << 64)
                for i, char in enumerate(token))
    return fmix64((total + len(token) * 0xC2B2AE3D27D4EB4F) & MASK)


def reference_simhash(hashes: list[int], weights: list[float]) -> int:
    """Charikar 2002: per bit, + weight where the feature hash has a 1, - weight where it has a 0."""
    value = 0
    for bit in range(64):
        total = sum(w if h >> bit & 1 else -w for h, w in zip(hashes, weights, strict=True))
        value |= (total > 0) << bit
    return value


# --- tokens and features -------------------------------------------------------------------------


def test_tokens_of_mixed_scripts() -> None:
    text = "Hello, WORLD! 東京都に行く ２０２４年 ﾃｽﾄ naïve café ภาษาไทย 한국어 문장"
    assert [text[s:e] for s, e in token_spans(text, cjk_ngram_chars=2)] == [
        "Hello", "WORLD", "東京", "京都", "都に", "に行", "行く", "２０２４", "年", "ﾃｽ", "ｽﾄ",
        "naïve", "café", "ภา", "าษ", "ษา", "าไ", "ไท", "ทย", "한국어", "문장"]


def test_folding_makes_case_width_and_compatibility_forms_one_token() -> None:
    assert len(set(token_hashes("Straße STRASSE straße"))) == 2  # ß is kept; ss is another token
    assert len(set(token_hashes("Hello HELLO ｈｅｌｌｏ hello"))) == 1
    assert len(set(token_hashes("ｶﾀｶﾅ カタカナ", cjk_ngram_chars=2))) == 3  # the same three bigrams


def test_marks_stay_inside_words() -> None:
    assert [("हिन्दी"[s:e]) for s, e in token_spans("हिन्दी")] == ["हिन्दी"]
    assert token_spans("e\u0301te\u0301") == [(0, 5)]


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(min_value=1, max_value=4))
def test_spans_match_the_reference(text: str, gram: int) -> None:
    assert token_spans(text, cjk_ngram_chars=gram) == reference_spans(text, gram)


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(min_value=1, max_value=3))
def test_token_hashes_match_the_reference(text: str, gram: int) -> None:
    expected = [reference_token_hash(text[s:e]) for s, e in reference_spans(text, gram)]
    assert token_hashes(text, cjk_ngram_chars=gram).tolist() == expected


def test_shingles_and_weights() -> None:
    tokens = token_hashes("a b c a b c a b")
    hashes, weights = feature_hashes("a b c a b c a b", shingle_words=2, weighting="tf")
    pairs = [features.shingle_hashes(tokens[i:i + 2], 2)[0] for i in range(len(tokens) - 1)]
    counts = {h: pairs.count(h) for h in pairs}
    assert hashes.tolist() == sorted(counts)
    assert weights.tolist() == [counts[h] for h in hashes.tolist()]  # ab x3, bc x2, ca x2
    assert feature_hashes("a b c a b c a b", shingle_words=2, weighting="log_tf")[1].tolist() == [
        1 + int(np.floor(np.log2(counts[h]))) for h in hashes.tolist()]
    assert set(feature_hashes("a b c a b c a b", weighting="binary")[1].tolist()) == {1.0}


def test_short_and_empty_texts() -> None:
    assert feature_hashes("one two", shingle_words=5)[0].size == 1  # fewer tokens than a shingle: one
    for empty in ("", "  ,.;!  ", "★ → ☆"):
        hashes, weights = feature_hashes(empty)
        assert hashes.size == weights.size == 0
    with pytest.raises(ValueError):
        feature_hashes("x", shingle_words=0)


def test_features_are_deterministic_across_calls_and_astral_text() -> None:
    text = "𠀋𠀋 emoji 😀 and 𝐁𝐨𝐥𝐝 math"
    assert [text[s:e] for s, e in token_spans(text)] == ["𠀋𠀋", "emoji", "and", "𝐁𝐨𝐥𝐝", "math"]
    first, again = feature_hashes(text), feature_hashes(text)
    assert first[0].tolist() == again[0].tolist()
    assert token_hashes("𝐁𝐨𝐥𝐝")[0] == token_hashes("bold")[0]  # NFKC folds mathematical bold


# --- SimHash -------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(fingerprints, st.integers(min_value=1, max_value=9)), max_size=40,
                unique_by=lambda pair: pair[0]))
def test_simhash_matches_charikar(pairs: list[tuple[int, int]]) -> None:
    hashes = np.array([h for h, _ in pairs], dtype=np.uint64)
    weights = np.array([w for _, w in pairs], dtype=np.float64)
    assert simhash64(hashes, weights) == reference_simhash([h for h, _ in pairs], [w for _, w in pairs])


def test_simhash_of_the_same_features_in_any_order_is_the_same() -> None:
    hashes, weights = feature_hashes("the quick brown fox jumps over the lazy dog " * 3)
    order = np.random.default_rng(1).permutation(hashes.size)
    assert simhash64(hashes, weights) == simhash64(hashes[order], weights[order])
    assert simhash64(np.zeros(0, np.uint64), np.zeros(0)) == 0
    with pytest.raises(ValueError):
        simhash64(hashes, weights[:-1])


@settings(max_examples=300)
@given(fingerprints, fingerprints, fingerprints)
def test_hamming_is_a_metric(a: int, b: int, c: int) -> None:
    assert hamming(a, a) == 0
    assert hamming(a, b) == hamming(b, a) == bin(a ^ b).count("1")
    assert hamming(a, c) <= hamming(a, b) + hamming(b, c)


@given(fingerprints)
def test_hex_round_trip(value: int) -> None:
    text = to_hex(value)
    assert len(text) == 16 and text == text.lower() and from_hex(text) == value


def test_hex_format() -> None:
    assert to_hex(255) == "00000000000000ff"
    assert to_hex(1 << 63) == "8000000000000000"
    for bad in ("ff", "00000000000000FF", "0x00000000000000f", "g000000000000000", " 00000000000000f"):
        with pytest.raises(ValueError):
            from_hex(bad)
    with pytest.raises(ValueError):
        to_hex(1 << 64)


def _article(rng: random.Random, vocabulary: list[str], words: int) -> list[str]:
    return [rng.choice(vocabulary) for _ in range(words)]


def test_small_edits_move_few_bits_and_other_texts_many() -> None:
    """Statistical sanity on 40 seeded texts of 800 words: one changed word moves the fingerprint by
    a few bits on average; an unrelated text sits near 32 bits away (independent bits)."""
    rng = random.Random(4)
    vocabulary = [f"w{i}" for i in range(3000)]
    edited, unrelated = [], []
    for _ in range(40):
        words = _article(rng, vocabulary, 800)
        base = simhash64(*feature_hashes(" ".join(words)))
        words[rng.randrange(len(words))] = "changed"
        edited.append(hamming(base, simhash64(*feature_hashes(" ".join(words)))))
        unrelated.append(hamming(base, simhash64(*feature_hashes(" ".join(_article(rng, vocabulary, 800))))))
    assert sum(edited) / len(edited) <= 3
    assert max(edited) <= 10
    assert 28 <= sum(unrelated) / len(unrelated) <= 36


# --- numbers (features version 2) ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(min_value=1, max_value=3))
def test_number_tokens_match_the_reference(text: str, gram: int) -> None:
    hashes, numbers = features.text_tokens(text, cjk_ngram_chars=gram)
    spans = reference_spans(text, gram)
    expected = [all(unicodedata.category(chr(fold_and_kind(c)[0]))[0] == "N" for c in text[s:e])
                for s, e in spans]
    assert numbers.tolist() == expected
    assert hashes.tolist() == token_hashes(text, cjk_ngram_chars=gram).tolist()


def test_numbers_are_not_features_unless_all_tokens_are() -> None:
    assert features.FEATURES_VERSION == 2
    with_numbers = feature_hashes("the 3 bridges of 2009 and ４２ cats, Ⅻ a320", shingle_words=1)
    without = feature_hashes("the bridges of and cats, a320", shingle_words=1)
    assert with_numbers[0].tolist() == without[0].tolist()
    assert feature_hashes("12 34 12", shingle_words=1)[0].tolist() == sorted(
        set(features.shingle_hashes(token_hashes("12 34"), 1).tolist()))
    assert simhash64(*feature_hashes("Page 1 of 20: the story")) == simhash64(
        *feature_hashes("Page 2 of 21: the story"))
