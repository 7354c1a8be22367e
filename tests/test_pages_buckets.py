"""Block-table buckets: encoding, the probe rule (earlier only) and the insert rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.pages import buckets
from streams.pages.buckets import Entry, Match


def entry(order: int, simhash: int, url: str, digest: bytes = b"d" * 16) -> Entry:
    return Entry(buckets.order_key(order, 0, 0), simhash, digest, url)


entries = st.builds(
    Entry,
    order=st.binary(min_size=16, max_size=16),
    simhash=st.integers(min_value=0, max_value=2**64 - 1),
    text_digest=st.binary(min_size=16, max_size=16),
    url=st.text(max_size=200),
)


@given(st.lists(entries, max_size=20))
def test_bucket_encoding_round_trips(bucket: list[Entry]) -> None:
    assert buckets.decode_bucket(buckets.encode_bucket(bucket)) == bucket


def test_missing_bucket_is_empty() -> None:
    assert buckets.decode_bucket(None) == []
    assert buckets.decode_bucket(b"") == []


def test_order_key_sorts_by_time_then_partition_then_offset() -> None:
    keys = [buckets.order_key(5, 0, 9), buckets.order_key(5, 1, 0), buckets.order_key(6, 0, 0),
            buckets.order_key(4, 9, 99)]
    assert sorted(keys) == [keys[3], keys[0], keys[1], keys[2]]
    assert len(keys[0]) == buckets.ORDER_BYTES


PAGE = entry(10, 0b1111, "https://b.example/x", b"p" * 16)


@pytest.mark.parametrize(("bucket", "expected"), [
    ([], None),
    # later entries are never the original of an earlier page
    ([entry(11, 0b1111, "https://a.example/")], None),
    # an unchanged refetch of the same URL is a copy of its earlier fetch
    ([entry(1, 0b1111, "https://b.example/x")], Match(buckets.order_key(1, 0, 0), "https://b.example/x", 0,
                                                      False)),
    # over the threshold (4 bits)
    ([entry(1, 0b1111 ^ 0b1111 << 8, "https://a.example/")], None),
    # within the threshold
    ([entry(1, 0b1110, "https://a.example/")], Match(buckets.order_key(1, 0, 0), "https://a.example/", 1,
                                                    False)),
    # exact copy beats a nearer-in-time near copy; nearest beats earliest
    ([entry(1, 0b1100, "https://n.example/"), entry(2, 0b1111, "https://e.example/", b"p" * 16)],
     Match(buckets.order_key(2, 0, 0), "https://e.example/", 0, True)),
    ([entry(1, 0b1100, "https://far.example/"), entry(2, 0b1110, "https://near.example/")],
     Match(buckets.order_key(2, 0, 0), "https://near.example/", 1, False)),
    ([entry(2, 0b1110, "https://late.example/"), entry(1, 0b1101, "https://early.example/")],
     Match(buckets.order_key(1, 0, 0), "https://early.example/", 1, False)),
])
def test_best_match(bucket: list[Entry], expected: Match | None) -> None:
    assert buckets.best_match(bucket, PAGE, hamming_threshold=3) == expected


def test_insert_keeps_order_and_skips_replays_and_exact_copies() -> None:
    first = entry(5, 1, "https://a.example/", b"a" * 16)
    bucket = buckets.with_entry([], first, max_entries=4)
    assert bucket == [first]
    assert buckets.with_entry(bucket, first, max_entries=4) is None            # replayed probe
    copy = entry(6, 1, "https://mirror.example/", b"a" * 16)
    assert buckets.with_entry(bucket, copy, max_entries=4) is None             # exact copy of an earlier
    earlier = entry(1, 1, "https://z.example/", b"z" * 16)
    assert buckets.with_entry(bucket, earlier, max_entries=4) == [earlier, first]


def test_full_bucket_keeps_its_earliest_entries() -> None:
    bucket = [entry(order, order, f"https://{order}.example/", bytes([order]) * 16) for order in range(4)]
    late = entry(9, 9, "https://late.example/", b"l" * 16)
    assert buckets.with_entry(bucket, late, max_entries=4) is None
    early = entry(0, 7, "https://early.example/", b"e" * 16)
    grown = buckets.with_entry(bucket[1:], early, max_entries=3)
    assert grown is not None and grown[0] == early and len(grown) == 3


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 100), st.integers(1, 100),
       st.booleans())
def test_racing_near_copies_never_both_lose(simhash_a: int, flip: int, time_a: int, gap: int,
                                            b_probes_first: bool) -> None:
    """Whichever order two copies reach a bucket in, the earlier one is never called a duplicate."""
    a = entry(time_a, simhash_a, "https://a.example/")
    b = entry(time_a + gap, simhash_a ^ (flip & 0b111), "https://b.example/")
    first, second = (b, a) if b_probes_first else (a, b)
    bucket: list[Entry] = []
    verdicts = {}
    for page in (first, second):
        verdicts[page.url] = buckets.best_match(bucket, page, hamming_threshold=3)
        bucket = buckets.with_entry(bucket, page, max_entries=8) or bucket
    assert verdicts["https://a.example/"] is None
