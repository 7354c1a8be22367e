"""Block-table buckets and SimHash records: encodings, the probe rule (the best earlier page, and the later
pages to tell), the insert rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import StateError
from streams.pages.sketch import SKETCH_BYTES, SLOTS, NearDuplicateRule, sketch_shingles
from streams.stages.content_seen import buckets
from streams.stages.content_seen.buckets import Match, Page, Record

RULE = NearDuplicateRule(radius=3)  # the tables' own k: the tests below are about distances
SAME = sketch_shingles(np.arange(1, 400, dtype=np.uint64)).encode()  # one text's word pairs
OTHER = sketch_shingles(np.arange(10_000, 10_400, dtype=np.uint64)).encode()  # another text's


def page(order: int, simhash: int, url: str, digest: bytes = b"d" * 16, sketch: bytes = SAME) -> Page:
    return Page(buckets.order_key(order, 0, 0), simhash, digest, url, sketch)


def match(order: int, url: str, distance: int, exact: bool) -> Match:
    """A match between pages with the same sketch: every bin agrees."""
    return Match(buckets.order_key(order, 0, 0), url, distance, exact, SLOTS)


def reader(*pages: Page) -> buckets.RecordReader:
    """Records as a shard would hold them: the pages of each SimHash, earliest first."""
    records: dict[int, Record] = {}
    for stored in sorted(pages, key=lambda p: p.order):
        records.setdefault(stored.simhash, []).append(stored)
    return lambda simhash: records.get(simhash, [])


def probe(stored: list[Page], query: Page) -> Match | None:
    bucket = sorted({p.simhash for p in stored})
    return buckets.meet(bucket, query, reader(*stored), RULE).best


simhashes = st.integers(min_value=0, max_value=2**64 - 1)
pages = st.builds(Page, order=st.binary(min_size=16, max_size=16), simhash=st.just(7),
                  text_digest=st.binary(min_size=16, max_size=16), url=st.text(max_size=200),
                  sketch=st.binary(min_size=SKETCH_BYTES, max_size=SKETCH_BYTES))


@given(st.lists(simhashes, max_size=20))
def test_bucket_encoding_round_trips(bucket: list[int]) -> None:
    encoded = buckets.encode_bucket(bucket)
    assert len(encoded) == buckets.SLOT_BYTES * len(bucket)
    assert buckets.decode_bucket(encoded) == bucket


@given(st.lists(pages, max_size=20))
def test_record_encoding_round_trips(record: Record) -> None:
    assert buckets.decode_record(buckets.encode_record(record), 7) == record


def test_missing_bucket_and_record_are_empty() -> None:
    assert buckets.decode_bucket(None) == [] and buckets.decode_bucket(b"") == []
    assert buckets.decode_record(None, 1) == []


def test_a_bucket_of_another_layout_is_refused() -> None:
    layout_1_entry = bytes(16) + bytes(8) + bytes(16) + (3).to_bytes(2, "big") + b"url"  # 45 bytes
    with pytest.raises(StateError, match="slots"):
        buckets.decode_bucket(layout_1_entry)


def test_order_key_sorts_by_time_then_partition_then_offset() -> None:
    keys = [buckets.order_key(5, 0, 9), buckets.order_key(5, 1, 0), buckets.order_key(6, 0, 0),
            buckets.order_key(4, 9, 99)]
    assert sorted(keys) == [keys[3], keys[0], keys[1], keys[2]]
    assert len(keys[0]) == buckets.ORDER_BYTES


PAGE = page(10, 0b1111, "https://b.example/x", b"p" * 16)


@pytest.mark.parametrize(("stored", "expected"), [
    ([], None),
    # later pages are never the original of an earlier page
    ([page(11, 0b1111, "https://a.example/")], None),
    # an unchanged refetch of the same URL is a copy of its earlier fetch
    ([page(1, 0b1111, "https://b.example/x")], match(1, "https://b.example/x", 0, False)),
    # over the threshold (4 bits)
    ([page(1, 0b1111 ^ 0b1111 << 8, "https://a.example/")], None),
    # within the threshold
    ([page(1, 0b1110, "https://a.example/")], match(1, "https://a.example/", 1, False)),
    # within the threshold, but another text (the sketches disagree)
    ([page(1, 0b1110, "https://other.example/", sketch=OTHER)], None),
    # exact copy beats a nearer-in-time near copy; nearest beats earliest
    ([page(1, 0b1100, "https://n.example/"), page(2, 0b1111, "https://e.example/", b"p" * 16)],
     match(2, "https://e.example/", 0, True)),
    ([page(1, 0b1100, "https://far.example/"), page(2, 0b1110, "https://near.example/")],
     match(2, "https://near.example/", 1, False)),
    ([page(2, 0b1110, "https://late.example/"), page(1, 0b1101, "https://early.example/")],
     match(1, "https://early.example/", 1, False)),
    # two pages of one SimHash: the exact one first, and only earlier ones
    ([page(1, 0b1111, "https://near.example/"), page(3, 0b1111, "https://exact.example/", b"p" * 16),
      page(12, 0b1111, "https://later.example/", b"p" * 16)],
     match(3, "https://exact.example/", 0, True)),
])
def test_best_match(stored: list[Page], expected: Match | None) -> None:
    assert probe(stored, PAGE) == expected


def test_only_records_of_slots_within_the_threshold_are_read() -> None:
    read: list[int] = []
    stored = reader(page(1, 0b1110, "https://a.example/"))

    def tracking(simhash: int) -> Record:
        read.append(simhash)
        return stored(simhash)

    buckets.meet([0b1110, 0b1111 ^ 0xFFFF << 16], PAGE, tracking, RULE)
    assert read == [0b1110]


def test_a_slot_without_its_record_is_an_error() -> None:
    with pytest.raises(StateError, match="no record"):
        buckets.meet([0b1111], PAGE, reader(), RULE)


def test_later_pages_met_are_told_with_the_probing_page_as_their_match() -> None:
    near_later = page(20, 0b1110, "https://near-later.example/")
    exact_later = page(30, 0b1111, "https://exact-later.example/", PAGE.text_digest)
    far_later = page(40, 0b1111 ^ 0xFFFF << 16, "https://far-later.example/")
    earlier = page(1, 0b1111, "https://earlier.example/")
    stored = [near_later, exact_later, far_later, earlier]
    met = buckets.meet(sorted({p.simhash for p in stored}), PAGE, reader(*stored), RULE)
    assert met.best == match(1, earlier.url, 0, False)
    assert sorted(met.later) == sorted([
        (near_later.order, match(10, PAGE.url, 1, False)),
        (exact_later.order, match(10, PAGE.url, 0, True))])


def test_the_rule_takes_candidates_beyond_the_tables_threshold_when_their_sketches_agree() -> None:
    """Within the rule's radius (10 bits), a page of the same word pairs is a near copy; a page of
    other word pairs is not, even at 1 bit; the most agreeing sketch ranks before the nearest SimHash."""
    eight_bits = page(1, 0b1111 ^ 0xFF << 20, "https://eight.example/")
    other_text = page(2, 0b1110, "https://other.example/", sketch=OTHER)
    met = buckets.meet(sorted({eight_bits.simhash, other_text.simhash}), PAGE, reader(eight_bits, other_text))
    assert met.best == match(1, eight_bits.url, 8, False)
    assert buckets.meet([eight_bits.simhash], PAGE, reader(eight_bits), RULE).best is None  # radius 3


def test_later_exact_copies_stored_first_stay_to_be_told_of_earlier_pages() -> None:
    """A copy that arrived before its original stays in the record beside it: a page earlier than
    both, arriving later still, must find the copy to tell it (it may still be waiting)."""
    copy = page(7, 1, "https://copy.example/", b"a" * 16)
    original = page(2, 1, "https://original.example/", b"a" * 16)
    assert buckets.with_page([copy], original, max_entries=4) == [original, copy]


def test_record_insert_keeps_order_and_skips_replays_and_exact_copies() -> None:
    first = page(5, 1, "https://a.example/", b"a" * 16)
    record = buckets.with_page([], first, max_entries=4)
    assert record == [first]
    assert buckets.with_page(record, first, max_entries=4) is None          # replayed probe
    copy = page(6, 1, "https://mirror.example/", b"a" * 16)
    assert buckets.with_page(record, copy, max_entries=4) is None           # exact copy of an earlier
    earlier = page(1, 1, "https://z.example/", b"z" * 16)
    assert buckets.with_page(record, earlier, max_entries=4) == [earlier, first]


def test_full_record_keeps_its_earliest_pages() -> None:
    record = [page(order, 1, f"https://{order}.example/", bytes([order]) * 16) for order in range(4)]
    assert buckets.with_page(record, page(9, 1, "https://late.example/", b"l" * 16), max_entries=4) is None
    early = page(0, 1, "https://early.example/", b"e" * 16)
    grown = buckets.with_page(record[1:], early, max_entries=3)
    assert grown is not None and grown[0] == early and len(grown) == 3


def test_slot_insert_is_sorted_and_once() -> None:
    assert buckets.with_slot([], 5, max_entries=4, read=reader()) == [5]
    assert buckets.with_slot([5], 5, max_entries=4, read=reader()) is None
    assert buckets.with_slot([5, 9], 7, max_entries=4, read=reader()) == [5, 7, 9]


def test_full_bucket_keeps_the_slots_of_its_earliest_pages() -> None:
    stored = [page(order, 100 + order, f"https://{order}.example/") for order in range(1, 5)]
    bucket = [p.simhash for p in stored]
    late = page(9, 999, "https://late.example/")
    assert buckets.with_slot(bucket, late.simhash, 4, reader(*stored, late)) is None
    early = page(0, 7, "https://early.example/")
    assert buckets.with_slot(bucket, early.simhash, 4, reader(*stored, early)) == [7, 101, 102, 103]


@given(simhashes, st.integers(0, 2**64 - 1), st.integers(0, 100), st.integers(1, 100), st.booleans(),
       st.booleans())
def test_racing_near_copies_meet_whichever_probes_first(simhash_a: int, flip: int, time_a: int, gap: int,
                                                        b_probes_first: bool, same_text: bool) -> None:
    """Whichever order two copies reach a bucket in, the earlier one is never called a duplicate, and
    the later one learns of the earlier: from its own probe, or told by the earlier one's."""
    digest_b = b"a" * 16 if same_text else b"b" * 16
    a = page(time_a, simhash_a, "https://a.example/", b"a" * 16)
    b = page(time_a + gap, simhash_a ^ (flip & 0b111) if not same_text else simhash_a, "https://b.example/",
             digest_b)
    first, second = (b, a) if b_probes_first else (a, b)
    bucket: list[int] = []
    records: dict[int, Record] = {}
    found: dict[str, list[Match]] = {"https://a.example/": [], "https://b.example/": []}
    urls = {a.order: a.url, b.order: b.url}
    for probing in (first, second):
        def read(simhash: int) -> Record:
            return records.get(simhash, [])
        met = buckets.meet(bucket, probing, read, RULE)
        found[probing.url] += [met.best] if met.best is not None else []
        for later, match in met.later:
            found[urls[later]].append(match)
        grown = buckets.with_page(read(probing.simhash), probing, 8)
        if grown is not None:
            records[probing.simhash] = grown
        bucket = buckets.with_slot(bucket, probing.simhash, 8, read) or bucket
    assert found["https://a.example/"] == []
    assert [match.url for match in found["https://b.example/"]] == ["https://a.example/"]
