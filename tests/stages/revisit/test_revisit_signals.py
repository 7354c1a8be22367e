"""Change signals: one case per signal, in the order of evidence of streams.stages.revisit.signals."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.stages.revisit.history import FetchHistory
from streams.stages.revisit.signals import (
    ChangeDecision,
    Fetch,
    detect_change,
    etags_match_weakly,
    http_date_s,
)

DAY = 86_400.0
A, B = b"a" * 16, b"b" * 16
TEXT_A, TEXT_B = b"t" * 16, b"u" * 16
WORDS_A, WORDS_B = b"w" * 16, b"x" * 16
MONDAY = "Mon, 06 May 2024 08:00:00 GMT"
TUESDAY = "Tue, 07 May 2024 08:00:00 GMT"

STORED = FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=DAY, status=200, etag='"v1"',
                      last_modified=MONDAY, content_length=1000, body_digest=A, text_digest=TEXT_A,
                      simhash=0b1111)
HEADERS_ONLY = dataclasses.replace(STORED, body_digest=None, text_digest=None, simhash=None)
WORDED = dataclasses.replace(STORED, wording_digest=WORDS_A)   # stored with wording digests
NUMBERS_A = bytes(range(64))                                   # buckets 0..31 all filled
NUMBERS_B = NUMBERS_A[:2] + b"\xff\xff" + NUMBERS_A[4:]        # bucket 1 moved
NUMBERED = dataclasses.replace(WORDED, number_buckets=NUMBERS_A)   # and number buckets


def fetch(**fields: object) -> Fetch:
    values: dict[str, object] = {"fetched_at_s": DAY, "status": 200, "etag": '"v1"', "last_modified": MONDAY,
                                 "content_length": 1000, "body_digest": A, "text_digest": TEXT_A,
                                 "simhash": 0b1111}
    values.update(fields)
    return Fetch(**values)  # type: ignore[arg-type]


def no_body(**fields: object) -> Fetch:
    return fetch(body_digest=None, text_digest=None, simhash=None, **fields)


CASES = [
    ("first fetch", None, fetch(), ChangeDecision(None, "first_fetch")),
    ("no response", STORED, fetch(status=None), ChangeDecision(None, "fetch_error")),
    ("server error", STORED, fetch(status=503), ChangeDecision(None, "fetch_error")),
    ("throttled", STORED, fetch(status=429), ChangeDecision(None, "fetch_error")),
    ("304, digest unchanged", STORED, no_body(status=304), ChangeDecision(False, "not_modified")),
    ("page became a 404", STORED, no_body(status=404), ChangeDecision(True, "status")),
    ("still a 404", dataclasses.replace(HEADERS_ONLY, status=404), no_body(status=404),
     ChangeDecision(False, "status")),
    ("same bytes, new ETag (load balancer)", STORED, fetch(etag='"v2"', last_modified=TUESDAY),
     ChangeDecision(False, "digest")),
    ("counter in the footer only", STORED, fetch(body_digest=B), ChangeDecision(False, "text_digest", 0)),
    ("only numbers moved, a bucket the page has not placed yet", NUMBERED,
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_A, simhash=0b1110,
           number_buckets=NUMBERS_B),
     ChangeDecision(None, "numbers_unlearned", 1)),
    ("only numbers moved, in a bucket that churns", dataclasses.replace(NUMBERED, numbers_churn=0b10),
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_A, number_buckets=NUMBERS_B),
     ChangeDecision(False, "number_churn", 0)),
    ("only numbers moved, in a bucket that holds content", dataclasses.replace(NUMBERED, numbers_steady=0b10),
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_A, number_buckets=NUMBERS_B),
     ChangeDecision(True, "number_edit", 0)),
    ("words differ, stored before month names were masked: undecided once",
     dataclasses.replace(WORDED, legacy_wording=True),
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_B),
     ChangeDecision(None, "features_upgraded", 0)),
    ("only numbers moved, stored before number buckets: undecided once", WORDED,
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_A, number_buckets=NUMBERS_B),
     ChangeDecision(None, "features_upgraded", 0)),
    ("one word edited, SimHash unmoved", WORDED,
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_B), ChangeDecision(True, "wording", 0)),
    ("a paragraph rewritten", WORDED,
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_B, simhash=0b1111 << 20),
     ChangeDecision(True, "wording", 8)),
    ("stored before wording digests: undecided once", STORED,
     fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_B),
     ChangeDecision(None, "features_upgraded", 0)),
    ("stored before wording digests, same text", STORED, fetch(body_digest=B, wording_digest=WORDS_B),
     ChangeDecision(False, "text_digest", 0)),
    ("no wording digests: SimHash over the threshold", STORED,
     fetch(body_digest=B, text_digest=TEXT_B, simhash=0b1111 << 20), ChangeDecision(True, "simhash", 8)),
    ("text changed, no SimHash", dataclasses.replace(STORED, simhash=None),
     fetch(body_digest=B, text_digest=TEXT_B, simhash=None), ChangeDecision(True, "text_digest")),
    ("binary body changed", dataclasses.replace(STORED, text_digest=None, simhash=None),
     fetch(body_digest=B, text_digest=None, simhash=None), ChangeDecision(True, "digest")),
    ("ETag change, headers only", HEADERS_ONLY, no_body(etag='"v2"'), ChangeDecision(True, "etag")),
    ("ETag equal, weak against strong", HEADERS_ONLY, no_body(etag='W/"v1"'), ChangeDecision(False, "etag")),
    ("Last-Modified only, unchanged", dataclasses.replace(HEADERS_ONLY, etag=None), no_body(etag=None),
     ChangeDecision(False, "last_modified")),
    ("Last-Modified only, newer", dataclasses.replace(HEADERS_ONLY, etag=None),
     no_body(etag=None, last_modified=TUESDAY), ChangeDecision(True, "last_modified")),
    ("Content-Length changed", dataclasses.replace(HEADERS_ONLY, etag=None, last_modified=None),
     no_body(etag=None, last_modified=None, content_length=999), ChangeDecision(True, "content_length")),
    ("equal Content-Length proves nothing", dataclasses.replace(HEADERS_ONLY, etag=None, last_modified=None),
     no_body(etag=None, last_modified=None), ChangeDecision(None, "no_signal")),
    ("missing headers", dataclasses.replace(HEADERS_ONLY, etag=None, last_modified=None, content_length=None),
     no_body(etag=None, last_modified=None, content_length=None), ChangeDecision(None, "no_signal")),
    ("unreadable Last-Modified is ignored", dataclasses.replace(HEADERS_ONLY, etag=None, content_length=None),
     no_body(etag=None, last_modified="yesterday", content_length=None), ChangeDecision(None, "no_signal")),
]


@pytest.mark.parametrize(("previous", "current", "expected"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_signal(previous: FetchHistory | None, current: Fetch, expected: ChangeDecision) -> None:
    assert detect_change(previous, current, simhash_threshold=-1) == expected


@pytest.mark.parametrize("stored", [STORED, WORDED], ids=["without wording digests", "with"])
def test_threshold_is_inclusive(stored: FetchHistory) -> None:
    three_bits = fetch(body_digest=B, text_digest=TEXT_B, simhash=0b1111 ^ 0b111 << 10,
                       wording_digest=None if stored is STORED else WORDS_B)
    changed = "simhash" if stored is STORED else "wording"
    assert detect_change(stored, three_bits, 3) == ChangeDecision(False, "simhash_trivial", 3)
    assert detect_change(stored, three_bits, 2) == ChangeDecision(True, changed, 3)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-1, 63))
def test_changed_words_are_a_change_unless_within_the_threshold(before: int, after: int,
                                                                threshold: int) -> None:
    """The default threshold (-1) counts every change of the words, whatever its SimHash distance;
    the distance is reported either way."""
    stored = dataclasses.replace(WORDED, simhash=before)
    decision = detect_change(stored, fetch(body_digest=B, text_digest=TEXT_B, wording_digest=WORDS_B,
                                           simhash=after), threshold)
    distance = (before ^ after).bit_count()
    assert decision.distance == distance
    assert decision.changed is (distance > threshold)


@pytest.mark.parametrize(("a", "b", "weak"), [('"x"', '"x"', True), ('W/"x"', '"x"', True),
                                              ('W/"x"', 'W/"x"', True), ('"x"', '"y"', False),
                                              (' "x" ', '"x"', True)])
def test_weak_etag_comparison(a: str, b: str, weak: bool) -> None:
    assert etags_match_weakly(a, b) is weak


@pytest.mark.parametrize("text", ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                                  "Sun Nov  6 08:49:37 1994"])
def test_http_date_forms(text: str) -> None:
    assert http_date_s(text) == 784111777.0


@pytest.mark.parametrize("text", [None, "", "garbage", "Sun, 31 Feb 1994 08:49:37 GMT"])
def test_http_date_unreadable(text: str | None) -> None:
    assert http_date_s(text) is None


@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16),
       st.integers(0, 2**64 - 1), st.sampled_from([200, 304]), st.integers(0, 63))
def test_an_identical_fetch_is_never_a_change(body: bytes, text: bytes, simhash: int, status: int,
                                              threshold: int) -> None:
    stored = dataclasses.replace(STORED, body_digest=body, text_digest=text, simhash=simhash,
                                 wording_digest=text)
    same = fetch(status=status, body_digest=body, text_digest=text, simhash=simhash, wording_digest=text)
    decision = detect_change(stored, same, threshold)
    assert decision.changed is False
