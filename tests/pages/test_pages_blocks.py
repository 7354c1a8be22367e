"""Block tables (Manku, Jain and Das Sarma 2007): the sizing rule against its formula, the pigeonhole
guarantee as a property, the key format, and the in-memory index."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import ConfigError
from streams.pages.blocks import (
    BlockDesign,
    BlockIndex,
    block_design,
    block_sizes,
    choose_blocks,
    expected_bucket_size,
    min_key_bits,
    near_matches,
)

MASK = (1 << 64) - 1
fingerprints = st.integers(min_value=0, max_value=MASK)


def formula_blocks(k: int, expected: int, max_bucket: float = 1.0) -> int:
    """The rule written out: smallest b > k whose narrowest table key (b - k blocks) has at least
    log2(expected / max_bucket) bits, blocks of 64 bits split as evenly as possible."""
    for blocks in range(k + 1, 65):
        widths = [64 // blocks + (i < 64 % blocks) for i in range(blocks)]
        shortest = min(sum(c) for c in itertools.combinations(widths, blocks - k))
        if shortest >= math.log2(expected / max_bucket):
            return blocks
    raise AssertionError("no design")


@pytest.mark.parametrize("k", range(0, 5))
@pytest.mark.parametrize("expected", [1, 1_000, 65_536, 65_537, 10**6, 10**7, 2**25, 2**25 + 1, 10**9])
def test_choose_blocks_follows_the_formula(k: int, expected: int) -> None:
    try:
        chosen = choose_blocks(k, expected)
    except ConfigError:
        assert math.comb(formula_blocks(k, expected), k) > 256
        return
    assert chosen == formula_blocks(k, expected)
    assert len(BlockDesign(chosen, k).tables) == math.comb(chosen, chosen - k)
    assert expected / 2 ** min_key_bits(chosen, k) <= 1


def test_designs_named_in_the_docstring() -> None:
    assert (choose_blocks(3, 10_000), choose_blocks(3, 10**7), choose_blocks(3, 2**25 + 1)) == (4, 5, 6)
    assert [len(block_design(3, n).tables) for n in (10_000, 10**7, 2**25 + 1)] == [4, 10, 20]
    assert choose_blocks(3, 8 * 10**9, max_bucket=4) == 6  # Manku et al.'s 20 tables for 8 billion pages
    assert choose_blocks(4, 10**7) == 7 and len(block_design(4, 10**7).tables) == 35


def test_block_sizes_and_key_bits() -> None:
    for blocks in range(1, 65):
        sizes = block_sizes(blocks)
        assert sum(sizes) == 64 and max(sizes) - min(sizes) <= 1
        assert list(sizes) == sorted(sizes, reverse=True)
    design = BlockDesign(5, 3)
    assert block_sizes(5) == (13, 13, 13, 13, 12)
    assert [design.key_bits(t) for t in range(10)] == [26, 26, 26, 25, 26, 26, 25, 26, 25, 25]
    assert design.key_bytes == 1 + 4
    assert expected_bucket_size(design, 10**7) == pytest.approx(
        sum(10**7 / 2 ** design.key_bits(t) for t in range(10)) / 10)


def test_invalid_designs() -> None:
    for bad in (lambda: BlockDesign(3, 3), lambda: BlockDesign(65, 3), lambda: choose_blocks(64, 10),
                lambda: choose_blocks(3, 0), lambda: block_sizes(0), lambda: choose_blocks(12, 10**9)):
        with pytest.raises(ConfigError):
            bad()


def reference_keys(design: BlockDesign, fingerprint: int) -> list[bytes]:
    """Table index byte, then the table's blocks' bits concatenated (as a bit string), big-endian."""
    bits = f"{fingerprint:064b}"
    sizes = block_sizes(design.blocks)
    starts = [sum(sizes[:i]) for i in range(design.blocks)]
    keys = []
    for index, table in enumerate(design.tables):
        packed = "".join(bits[starts[b]:starts[b] + sizes[b]] for b in table)
        keys.append(bytes([index]) + int(packed, 2).to_bytes(design.key_bytes - 1, "big"))
    return keys


DESIGNS = [BlockDesign(4, 3), BlockDesign(5, 3), BlockDesign(6, 3), BlockDesign(7, 4), BlockDesign(2, 1),
           BlockDesign(1, 0)]


@settings(max_examples=300)
@given(fingerprints, st.sampled_from(DESIGNS))
def test_keys_are_the_blocks_bits(fingerprint: int, design: BlockDesign) -> None:
    keys = design.keys(fingerprint)
    assert keys == reference_keys(design, fingerprint) == design.keys(fingerprint)
    assert len(keys) == len(design.tables) and {len(key) for key in keys} == {design.key_bytes}
    assert [key[0] for key in keys] == list(range(len(design.tables)))


@settings(max_examples=500)
@given(fingerprints, st.sampled_from(DESIGNS), st.data())
def test_within_k_bits_always_share_a_key(fingerprint: int, design: BlockDesign, data: st.DataObject) -> None:
    flips = data.draw(st.sets(st.integers(0, 63), max_size=design.k))
    other = fingerprint ^ sum(1 << bit for bit in flips)
    assert set(design.keys(fingerprint)) & set(design.keys(other))


def test_near_matches() -> None:
    candidates = [(0b1111, "a"), (0b0111, "b"), (0b1111, "a"), (0, "c"), (0b1110, "d")]
    assert near_matches(0b1111, candidates, 1) == [("a", 0), ("b", 1), ("d", 1)]
    assert near_matches(0b1111, candidates, 4) == [("a", 0), ("b", 1), ("d", 1), ("c", 4)]
    assert near_matches(0b1111, [], 3) == []


def test_block_index() -> None:
    index: BlockIndex[str] = BlockIndex(block_design(3, 10**6))
    base = 0x0123456789ABCDEF
    index.add(base, "original")
    index.add(base ^ 0b111, "three bits off")
    index.add(base ^ (0b1111 << 40), "four bits off")
    index.add(~base & MASK, "far")
    assert len(index) == 4
    assert index.near(base) == [("original", 0), ("three bits off", 3)]
    assert index.near(base ^ 1) == [("original", 1), ("three bits off", 2)]
    assert {item for _, item in index.candidates(base)} >= {"original", "three bits off"}
    assert index.near(0x5555555555555555) == []
