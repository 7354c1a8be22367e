"""Bloom filters: sizing against the formulas, no false negatives, measured false-positive rates,
space per item, the running popcount, and the serialized form (round trip and corruption)."""

from __future__ import annotations

import math
import random
import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import ConfigError, StateError
from streams.stages.url_dedup.bloom import (
    BloomFilter,
    BloomFormatError,
    ScalableBloomFilter,
    bloom_size,
)

fingerprints = st.binary(min_size=16, max_size=16)


def random_fingerprints(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(count)]


def measured_false_positive_rate(contains_many: list[bool]) -> float:
    return sum(contains_many) / len(contains_many)


def popcount(data: bytes | bytearray) -> int:
    return sum(bin(byte).count("1") for byte in data)


# --- sizing --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("capacity_items", "false_positive_rate", "bits_per_item", "hash_count"),
    [
        (1_000_000, 0.01, 9.5851, 7),
        (10_000_000, 0.001, 14.3776, 10),
        (1_000_000, 0.1, 4.7925, 3),
        (100_000, 0.0001, 19.1701, 13),
        (50_000_000, 0.02, 8.1424, 6),
    ],
)
def test_bloom_size_matches_the_formula(
    capacity_items: int, false_positive_rate: float, bits_per_item: float, hash_count: int
) -> None:
    size_bits, k = bloom_size(capacity_items, false_positive_rate)
    ideal_bits = -capacity_items * math.log(false_positive_rate) / math.log(2) ** 2
    assert size_bits % 64 == 0
    assert ideal_bits <= size_bits < ideal_bits + 64
    assert size_bits / capacity_items == pytest.approx(bits_per_item, abs=1e-3)  # + up to 64/n bits
    assert k == hash_count == round(size_bits / capacity_items * math.log(2))


@given(st.integers(1, 10**9), st.floats(1e-9, 0.5))
def test_bloom_size_is_the_formula_rounded_up_to_words(capacity_items: int, rate: float) -> None:
    size_bits, hash_count = bloom_size(capacity_items, rate)
    ideal_bits = -capacity_items * math.log(rate) / math.log(2) ** 2
    assert size_bits % 64 == 0 and ideal_bits <= size_bits < ideal_bits + 64
    assert 1 <= hash_count <= 64
    assert hash_count == min(64, max(1, round(size_bits / capacity_items * math.log(2))))


@pytest.mark.parametrize(("capacity_items", "rate"), [(0, 0.01), (10, 0.0), (10, 1.0), (10, -1)])
def test_bloom_size_rejects_nonsense(capacity_items: int, rate: float) -> None:
    with pytest.raises(ConfigError):
        bloom_size(capacity_items, rate)


def test_from_size_takes_raw_parameters_and_checks_them() -> None:
    bloom = BloomFilter.from_size(1024, 5)
    assert (bloom.size_bits, bloom.hash_count, bloom.size_bytes) == (1024, 5, 128)
    assert bloom.capacity_items == int(1024 * math.log(2) / 5)
    for size_bits, hash_count in [(0, 1), (100, 1), (1024, 0), (1024, 65)]:
        with pytest.raises(ConfigError):
            BloomFilter.from_size(size_bits, hash_count)


# --- membership ----------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(fingerprints, max_size=300))
def test_bloom_filter_has_no_false_negatives(keys: list[bytes]) -> None:
    bloom = BloomFilter(100, 0.01)
    for key in keys:
        bloom.add(key)
    assert all(key in bloom for key in keys)
    assert all(bloom.add(key) for key in keys)  # present already: True, nothing changes
    assert all(bloom.contains_many(keys))
    assert bloom.count_items <= len(set(keys))


@settings(max_examples=60, deadline=None)
@given(st.lists(fingerprints, max_size=400), st.sampled_from([2, 4]))
def test_scalable_filter_has_no_false_negatives_across_slices(keys: list[bytes], growth_factor: int) -> None:
    sbf = ScalableBloomFilter(4, 0.01, growth_factor=growth_factor)
    for key in keys:
        sbf.add(key)
    assert all(key in sbf for key in keys)
    assert all(sbf.add_many(keys))
    assert all(sbf.contains_many(keys))
    assert sbf.count_items == sum(bloom.count_items for bloom in sbf.slices) <= len(set(keys))


def test_scalable_filter_grows_by_slices_of_capacity_c_s_i_and_tightening_rates() -> None:
    sbf = ScalableBloomFilter(10, 0.01, growth_factor=2, tightening_ratio=0.85)
    keys = random_fingerprints(1, 1000)
    sbf.add_many(keys)
    assert len(sbf.slices) >= 6
    first_extra_rate = 0.01 * (1 - 0.85)
    for index, bloom in enumerate(sbf.slices):
        assert bloom.capacity_items == 10 * 2**index
        expected = 0.01 if index == 0 else first_extra_rate * 0.85 ** (index - 1)
        assert bloom.false_positive_rate == pytest.approx(expected)
        assert (bloom.size_bits, bloom.hash_count) == bloom_size(10 * 2**index, bloom.false_positive_rate)
    assert all(bloom.count_items == bloom.capacity_items for bloom in sbf.slices[:-1])
    assert all(key in sbf for key in keys)


def test_add_reports_possibly_present_and_counts_new_items() -> None:
    bloom = BloomFilter(1000, 0.01)
    key = bytes(range(16))
    assert bloom.add(key) is False
    assert bloom.add(key) is True
    assert bloom.count_items == 1 and bloom.set_bits == bloom.hash_count


def test_add_many_and_contains_many_match_one_at_a_time() -> None:
    keys = random_fingerprints(2, 3000)
    probe = keys[::2] + random_fingerprints(3, 3000)
    one, many = BloomFilter(1000, 0.05), BloomFilter(1000, 0.05)  # overfilled on purpose: some True
    singles = [one.add(key) for key in keys]
    assert many.add_many(keys) == singles and any(singles)
    assert (many.count_items, many.set_bits) == (one.count_items, one.set_bits)
    assert bytes(many.to_bytes()) == bytes(one.to_bytes())
    assert many.contains_many(probe) == [key in one for key in probe]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 1500), st.integers(0, 600),
       st.sampled_from([64, 640, 64 * 1000]), st.integers(1, 12))
def test_adding_all_at_once_is_adding_one_at_a_time(seed: int, count: int, repeats: int, size_bits: int,
                                                     hash_count: int) -> None:
    """add_all (numpy from BATCH_MIN_KEYS keys on) sets the same bits and counts the same new keys
    as add, in order, however full the filter, whatever the keys repeat in one chunk."""
    keys = random_fingerprints(seed, count)
    keys += random.Random(seed).choices(keys, k=repeats) if keys else []
    one, all_at_once = (BloomFilter.from_size(size_bits, hash_count) for _ in range(2))
    for start in range(0, len(keys), 700):
        for key in keys[start:start + 700]:
            one.add(key)
        all_at_once.add_all(keys[start:start + 700])
    assert (all_at_once.count_items, all_at_once.set_bits) == (one.count_items, one.set_bits)
    assert all_at_once.to_bytes() == one.to_bytes()
    assert all_at_once.set_bits == all_at_once.recount_set_bits()


@pytest.mark.parametrize("high", [0, 1, 2**63, 2**64 - 1])
@pytest.mark.parametrize("low", [0, 1, 2**64 - 1, 64 * 997, 1024])
def test_double_hashing_probes_k_distinct_bits_even_for_degenerate_halves(high: int, low: int) -> None:
    bloom = BloomFilter.from_size(1024, 12)
    bloom.add(struct.pack(">QQ", high, low))
    assert bloom.set_bits == 12


@settings(max_examples=300)
@given(fingerprints, st.integers(min_value=1, max_value=4096).map(lambda words: words * 64),
       st.integers(min_value=1, max_value=30))
def test_probes_are_the_double_hashing_formula_on_the_64_bit_halves(fp: bytes, size_bits: int,
                                                                   hash_count: int) -> None:
    """Probe i is (h1 + i*(h2 | 1)) mod m, h1 and h2 the fingerprint's 64-bit halves, however the
    arithmetic is arranged for compiled code: snapshots written by any version stay valid."""
    h1, h2 = struct.unpack(">QQ", fp)
    expected = {(h1 + i * (h2 | 1)) % size_bits for i in range(hash_count)}
    bloom = BloomFilter.from_size(size_bits, hash_count)
    bloom.add(fp)
    set_bits = {index * 8 + bit for index, byte in enumerate(bloom.to_bytes()[40:-4]) for bit in range(8)
                if byte >> bit & 1}
    assert set_bits == expected


# --- false-positive rates and space --------------------------------------------------------------

def test_measured_false_positive_rate_is_within_20_percent_of_target_at_capacity() -> None:
    # 200k fresh keys at p = 1%: about 2000 expected false positives, standard deviation about 45, so
    # the +-20% band (+-400) is about 9 standard deviations wide; with a fixed seed it is deterministic.
    bloom = BloomFilter(200_000, 0.01)
    bloom.add_many(random_fingerprints(10, 200_000))
    rate = measured_false_positive_rate(bloom.contains_many(random_fingerprints(11, 200_000)))
    assert 0.008 <= rate <= 0.012
    assert bloom.estimated_false_positive_rate() == pytest.approx(0.01, rel=0.05)
    assert bloom.estimated_false_positive_rate() == pytest.approx(rate, rel=0.2)


def test_scalable_filter_stays_under_twice_its_target_after_growing_8x() -> None:
    sbf = ScalableBloomFilter(20_000, 0.01)
    sbf.add_many(random_fingerprints(20, 160_000))
    assert len(sbf.slices) == 4  # 20k + 40k + 80k full, 160k slice a eighth full
    rate = measured_false_positive_rate(sbf.contains_many(random_fingerprints(21, 200_000)))
    assert rate < 0.02
    assert sbf.estimated_false_positive_rate() < 0.02
    assert sbf.estimated_false_positive_rate() == pytest.approx(rate, rel=0.25)


def test_bits_per_item_at_one_percent_filled_to_capacity() -> None:
    bloom = BloomFilter(100_000, 0.01)
    bloom.add_many(random_fingerprints(30, 100_000))
    assert bloom.size_bytes / bloom.count_items <= 1.5
    assert bloom.size_bytes * 8 / bloom.capacity_items == pytest.approx(9.585, abs=0.01)
    # Past its capacity the scalable filter pays for headroom: later slices have tighter rates.
    sbf = ScalableBloomFilter(10_000, 0.01)
    rng = random.Random(31)
    while sbf.count_items < 150_000:  # 10k + 20k + 40k + 80k: four slices, each filled to capacity
        sbf.add(rng.randbytes(16))
    assert len(sbf.slices) == 4
    assert sbf.size_bytes / sbf.count_items <= 1.9  # about 14.3 bits/item for 4 slices


# --- popcount ------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.lists(fingerprints, max_size=200))
def test_running_popcount_and_fill_ratio_agree_with_a_full_recount(keys: list[bytes]) -> None:
    bloom = BloomFilter(50, 0.01)
    bloom.add_many(keys[: len(keys) // 2])
    for key in keys[len(keys) // 2:]:
        bloom.add(key)
    payload = bloom.to_bytes()[40:-4]
    assert bloom.set_bits == bloom.recount_set_bits() == popcount(payload)
    assert bloom.fill_ratio() == popcount(payload) / bloom.size_bits
    assert bloom.estimated_false_positive_rate() == bloom.fill_ratio() ** bloom.hash_count


def test_scalable_fill_ratios_and_estimate_follow_the_slices() -> None:
    sbf = ScalableBloomFilter(100, 0.01)
    sbf.add_many(random_fingerprints(40, 500))
    slices = sbf.slices
    assert sbf.fill_ratio() == slices[-1].fill_ratio()
    total_bits = sum(b.size_bits for b in slices)
    assert sbf.overall_fill_ratio() == sum(b.recount_set_bits() for b in slices) / total_bits
    expected = 1 - math.prod(1 - b.fill_ratio() ** b.hash_count for b in slices)
    assert sbf.estimated_false_positive_rate() == pytest.approx(expected)
    assert sbf.size_bytes == sum(b.size_bytes for b in slices)


# --- serialization -------------------------------------------------------------------------------

def test_bloom_filter_round_trips_through_bytes() -> None:
    bloom = BloomFilter(5000, 0.01)
    keys = random_fingerprints(50, 3000)
    bloom.add_many(keys)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert copy.to_bytes() == bloom.to_bytes()
    assert (copy.size_bits, copy.hash_count, copy.count_items, copy.set_bits, copy.capacity_items,
            copy.false_positive_rate) == (bloom.size_bits, bloom.hash_count, bloom.count_items,
                                          bloom.set_bits, bloom.capacity_items, bloom.false_positive_rate)
    assert all(copy.contains_many(keys))
    more = random_fingerprints(51, 100)
    assert copy.add_many(more) == bloom.add_many(more)


def test_scalable_filter_round_trips_through_bytes() -> None:
    sbf = ScalableBloomFilter(100, 0.02, growth_factor=4, tightening_ratio=0.8)
    keys = random_fingerprints(52, 3000)
    sbf.add_many(keys)
    copy = ScalableBloomFilter.from_bytes(sbf.to_bytes())
    assert copy.to_bytes() == sbf.to_bytes()
    assert (copy.growth_factor, copy.tightening_ratio, copy.count_items, len(copy.slices)) == (
        4, 0.8, sbf.count_items, len(sbf.slices))
    assert all(copy.contains_many(keys))
    more = random_fingerprints(53, 3000)  # goes on growing the same way
    assert copy.add_many(more) == sbf.add_many(more)
    assert copy.to_bytes() == sbf.to_bytes()


def test_bloom_format_error_is_a_state_error() -> None:
    assert issubclass(BloomFormatError, StateError)


@pytest.mark.parametrize("kind", ["bloom", "scalable"])
def test_every_truncation_raises_bloom_format_error(kind: str) -> None:
    load: Callable[[bytes], object]
    if kind == "bloom":
        bloom = BloomFilter(200, 0.01)
        bloom.add_many(random_fingerprints(60, 150))
        data, load = bloom.to_bytes(), BloomFilter.from_bytes
    else:
        sbf = ScalableBloomFilter(20, 0.01)
        sbf.add_many(random_fingerprints(61, 150))
        data, load = sbf.to_bytes(), ScalableBloomFilter.from_bytes
    for length in range(len(data)):
        with pytest.raises(BloomFormatError):
            load(data[:length])
    with pytest.raises(BloomFormatError):
        load(data + b"\x00")


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_flipped_bit_raises_bloom_format_error(data: st.DataObject) -> None:
    sbf = ScalableBloomFilter(8, 0.01)
    sbf.add_many(random_fingerprints(62, 40))
    loaders: list[tuple[bytes, Callable[[bytes], object]]] = [
        (sbf.slices[0].to_bytes(), BloomFilter.from_bytes), (sbf.to_bytes(), ScalableBloomFilter.from_bytes)]
    for encoded, load in loaders:
        position = data.draw(st.integers(0, len(encoded) * 8 - 1))
        corrupted = bytearray(encoded)
        corrupted[position // 8] ^= 1 << (position % 8)
        with pytest.raises(BloomFormatError):
            load(bytes(corrupted))


def with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


def test_wrong_magic_version_or_header_raise_bloom_format_error() -> None:
    encoded = BloomFilter(100, 0.01).to_bytes()
    body = encoded[:-4]
    with pytest.raises(BloomFormatError, match="magic"):
        BloomFilter.from_bytes(with_crc(b"XXXX" + body[4:]))
    with pytest.raises(BloomFormatError, match="version"):
        BloomFilter.from_bytes(with_crc(body[:4] + struct.pack(">H", 99) + body[6:]))
    with pytest.raises(BloomFormatError, match="magic"):
        ScalableBloomFilter.from_bytes(encoded)  # a plain filter is not a scalable one
    with pytest.raises(BloomFormatError, match="header invalid"):  # k = 0, CRC recomputed
        BloomFilter.from_bytes(with_crc(body[:6] + struct.pack(">H", 0) + body[8:]))
    sbf_body = ScalableBloomFilter(10, 0.01).to_bytes()[:-4]
    with pytest.raises(BloomFormatError, match="header invalid"):  # growth factor 1
        ScalableBloomFilter.from_bytes(with_crc(sbf_body[:6] + struct.pack(">H", 1) + sbf_body[8:]))
    with pytest.raises(BloomFormatError, match="does not match"):  # initial capacity 11 != slice's 10
        ScalableBloomFilter.from_bytes(with_crc(sbf_body[:12] + struct.pack(">Q", 11) + sbf_body[20:]))


def test_recount_spans_chunks_and_survives_a_round_trip() -> None:
    bloom = BloomFilter.from_size(8 * (1 << 20) + 4096, 3)  # just over the 1 MiB recount chunk
    bloom.add_many(random_fingerprints(70, 5000) + [b"\xff" * 8 + b"\x01" * 8])
    encoded = bloom.to_bytes()
    assert bloom.set_bits == bloom.recount_set_bits() == int.from_bytes(encoded[40:-4], "big").bit_count()
    assert BloomFilter.from_bytes(memoryview(encoded)).set_bits == bloom.set_bits


def test_scalable_filter_at_its_capacity_is_a_plain_filter_at_the_target() -> None:
    sbf = ScalableBloomFilter(100_000, 0.01)
    sbf.add_many(random_fingerprints(40, 100_000))
    assert len(sbf.slices) == 1
    assert sbf.size_bytes / sbf.count_items <= 1.5
    rate = measured_false_positive_rate(sbf.contains_many(random_fingerprints(41, 200_000)))
    assert 0.008 <= rate <= 0.012
