"""The page sketch (one permutation, densified, one-bit minwise hashing) and the near-duplicate decision."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.pages import sketch
from streams.pages.features import shingle_hashes, text_tokens
from streams.pages.sketch import (
    BINS_BYTES,
    DEFAULT_RULE,
    SKETCH_BYTES,
    SLOTS,
    NearDuplicateRule,
    PageSignature,
    Sketch,
    is_near_duplicate,
    length_ratio,
    match_rank,
    matching_bins,
    resemblance,
    sketch_shingles,
    sketch_tokens,
)

MASK = (1 << 64) - 1
hash_sets = st.lists(st.integers(min_value=0, max_value=MASK), min_size=1, max_size=600)
sketches = st.builds(Sketch, st.binary(min_size=BINS_BYTES, max_size=BINS_BYTES),
                     st.integers(min_value=0, max_value=sketch.MAX_SHINGLES))


def _array(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def _reference(values: set[int], seed: int = sketch.SEED) -> list[int]:
    """The bins one at a time: each bin's smallest remixed hash, or, empty, the first filled bin along
    its probe sequence (then the next filled bin cyclically); its lowest bit."""
    mixed = [int(h) for h in sketch.fmix64(_array(sorted(values)) ^ np.uint64(seed))]
    minima: dict[int, int] = {}
    for value in mixed:
        slot = value >> (64 - sketch.SLOT_BITS)
        minima[slot] = min(minima.get(slot, value), value)
    sequences = sketch._probe_sequences()
    bits = []
    for slot in range(SLOTS):
        if slot not in minima:
            tried = [int(b) for b in sequences[slot] if int(b) in minima]
            source = tried[0] if tried else min((b for b in minima if b > slot), default=min(minima))
            bits.append(minima[source] & 1)
        else:
            bits.append(minima[slot] & 1)
    return bits


@settings(max_examples=150, deadline=None)
@given(hash_sets)
def test_sketch_matches_the_one_bin_at_a_time_reference(values: list[int]) -> None:
    made = sketch_shingles(_array(values))
    bits = np.unpackbits(np.frombuffer(made.bins, dtype=np.uint8)).tolist()
    assert bits == _reference(set(values))
    assert made.shingles == len(set(values))


@settings(max_examples=100, deadline=None)
@given(hash_sets, st.randoms(use_true_random=False))
def test_a_set_in_any_order_and_with_repeats_has_one_sketch(values: list[int], rng: object) -> None:
    shuffled = values + values[: len(values) // 2]
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert sketch_shingles(_array(shuffled)) == sketch_shingles(_array(values))


@settings(max_examples=200)
@given(sketches, sketches)
def test_resemblance_is_symmetric_and_in_range(a: Sketch, b: Sketch) -> None:
    assert resemblance(a, b) == resemblance(b, a)
    assert 0.0 <= resemblance(a, b) <= 1.0
    assert matching_bins(a, b) == matching_bins(b, a)
    assert length_ratio(a, b) == length_ratio(b, a) and 0.0 <= length_ratio(a, b) <= 1.0
    assert resemblance(a, a) == 1.0 and length_ratio(a, a) == 1.0


@given(sketches)
def test_encoding_round_trip(made: Sketch) -> None:
    raw = made.encode()
    assert len(raw) == SKETCH_BYTES == 36
    assert Sketch.decode(raw) == made


def test_bad_sketches_are_refused() -> None:
    with pytest.raises(ValueError):
        Sketch(bytes(BINS_BYTES - 1), 1)
    with pytest.raises(ValueError):
        Sketch(bytes(BINS_BYTES), -1)
    with pytest.raises(ValueError):
        Sketch.decode(bytes(SKETCH_BYTES + 1))
    with pytest.raises(ValueError):
        NearDuplicateRule(radius=65)


def test_identical_texts_give_resemblance_one() -> None:
    text = "the council approved the budget for the new bridge on tuesday " * 5
    a, b = (sketch_tokens(text_tokens(text)[0]) for _ in range(2))
    assert a == b and resemblance(a, b) == 1.0 and length_ratio(a, b) == 1.0
    empty = sketch_tokens(text_tokens("")[0])
    assert empty == Sketch(bytes(BINS_BYTES), 0)
    assert sketch_tokens(text_tokens("word")[0]).shingles == 1  # fewer tokens than a shingle: one


def test_word_pairs_are_the_shingles() -> None:
    tokens = text_tokens("a b c a b c")[0]
    assert sketch_tokens(tokens) == sketch_shingles(shingle_hashes(tokens, 2))
    assert sketch_tokens(tokens).shingles == 3  # ab, bc, ca


def test_seeds_give_other_sketches() -> None:
    tokens = text_tokens(" ".join(f"w{i}" for i in range(500)))[0]
    assert sketch_tokens(tokens, seed=1) != sketch_tokens(tokens)


def _pair(rng: np.random.Generator, shared: int, own: int) -> tuple[Sketch, Sketch, float]:
    common = rng.integers(0, 2**63, shared, dtype=np.uint64)
    first = np.concatenate((common, rng.integers(0, 2**63, own, dtype=np.uint64)))
    second = np.concatenate((common, rng.integers(0, 2**63, own, dtype=np.uint64)))
    return sketch_shingles(first), sketch_shingles(second), shared / (shared + 2 * own)


@pytest.mark.parametrize(("shared", "own"), [(900, 50), (800, 100), (400, 200), (40, 5), (8, 1)])
def test_resemblance_estimates_jaccard(shared: int, own: int) -> None:
    """Li and König's b = 1 estimator, densified, is unbiased: over 300 seeded pairs the mean error is
    within 4 standard errors. Its spread is that of 256 one-bit bins (sd of 2P - 1: 2 sqrt(P(1-P)/256))
    when the sets fill the bins; a set of 10 shingles copies each value into 25 bins (about 2 times)."""
    rng = np.random.default_rng(shared * 1000 + own)
    errors, jaccard = [], 0.0
    for _ in range(300):
        a, b, jaccard = _pair(rng, shared, own)
        errors.append(2.0 * matching_bins(a, b) / SLOTS - 1.0 - jaccard)  # unclipped
    agree = jaccard + (1 - jaccard) / 2
    sd = 2 * (agree * (1 - agree) / SLOTS) ** 0.5
    spread = statistics.pstdev(errors)
    assert abs(statistics.fmean(errors)) <= 4 * spread / 300 ** 0.5
    assert spread <= (1.2 if shared + 2 * own >= SLOTS else 2.5) * sd


def test_unrelated_texts_are_far_apart() -> None:
    rng = np.random.default_rng(3)
    found = [resemblance(*_pair(rng, 0, 500)[:2]) for _ in range(200)]
    assert max(found) < 0.35  # sd 0.0625 around 0


# --- the decision ------------------------------------------------------------------------------------


def _signature(text: str, simhash: int = 0) -> PageSignature:
    return PageSignature(simhash, sketch_tokens(text_tokens(text)[0]))


_WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "su", "ti") for b in "xyzwv"]
ARTICLE = " ".join(np.random.default_rng(19).choice(_WORDS, 600).tolist())


def test_copies_are_near_duplicates_and_other_pages_not() -> None:
    page = _signature(ARTICLE)
    words = ARTICLE.split()
    edited = _signature(" ".join(words[:100] + ["changed"] + words[101:300] + ["edits"] + words[301:]))
    assert is_near_duplicate(edited, page, distance=4)
    assert not is_near_duplicate(edited, page, distance=DEFAULT_RULE.radius + 1)
    longer = _signature(ARTICLE + " " + " ".join(reversed(words[:60])))
    assert length_ratio(longer.sketch, page.sketch) < DEFAULT_RULE.min_length_ratio
    assert resemblance(longer.sketch, page.sketch) >= DEFAULT_RULE.min_resemblance
    assert not is_near_duplicate(longer, page, distance=0)
    other = _signature(" ".join(np.random.default_rng(20).choice(_WORDS, 600).tolist()))
    assert length_ratio(other.sketch, page.sketch) >= DEFAULT_RULE.min_length_ratio  # same size, other text
    assert not is_near_duplicate(other, page, distance=0)


@settings(max_examples=100)
@given(st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=64))
def test_the_rule_reads_radius_ratio_and_resemblance(distance: int, radius: int) -> None:
    page = _signature(ARTICLE)
    rule = NearDuplicateRule(radius=radius, min_resemblance=1.0, min_length_ratio=1.0)
    assert is_near_duplicate(page, page, distance, rule) == (distance <= radius)


def test_rank_prefers_more_agreeing_bins_then_fewer_bits() -> None:
    page = _signature(ARTICLE)
    words = ARTICLE.split()
    close = _signature(" ".join(words[:-3]))
    further = _signature(" ".join(words[:200] + words[260:]))
    assert match_rank(page, page, 3) < match_rank(page, close, 0) < match_rank(page, further, 0)
    assert match_rank(page, page, 1) < match_rank(page, page, 2)
