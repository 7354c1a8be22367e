"""Fetch history: the versioned encoding round-trips, refuses what it cannot read; updates per fetch."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import StateError
from streams.stages.revisit.history import (
    FORMAT_VERSION,
    FetchHistory,
    Observation,
    decode_history,
    encode_history,
)
from streams.stages.revisit.schedule import updated_history
from streams.stages.revisit.signals import ChangeDecision, Fetch

DAY = 86_400.0
finite = st.floats(-1e12, 1e12, allow_nan=False)
float32_exact = st.integers(1, 2**23).map(float)          # observations are stored as float32
validator = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)

observations = st.builds(Observation, interval_s=float32_exact, changed=st.booleans(),
                         modified_age_s=st.none() | float32_exact)
histories = st.builds(
    FetchHistory, first_fetch_s=finite, last_fetch_s=finite, interval_s=st.floats(1.0, 1e9),
    status=st.none() | st.integers(100, 599), etag=st.none() | validator,
    last_modified=st.none() | validator, content_type=st.none() | validator,
    content_length=st.none() | st.integers(0, 2**62), body_digest=st.none() | st.binary(max_size=64),
    text_digest=st.none() | st.binary(max_size=64), simhash=st.none() | st.integers(0, 2**64 - 1),
    rate_per_s=st.none() | st.floats(0.0, 1.0), fetches=st.integers(0, 2**32 - 1),
    changes=st.integers(0, 2**32 - 1), lm_agreements=st.integers(0, 0xFFFF),
    lm_disagreements=st.integers(0, 0xFFFF), rate_bin=st.integers(-2, 79),
    observations=st.lists(observations, max_size=64).map(tuple),
    wording_digest=st.none() | st.binary(max_size=64))
mask = st.integers(0, 2**32 - 1)
numbered = st.builds(dataclasses.replace, histories, number_buckets=st.binary(min_size=64, max_size=64),
                     number_tallies=st.none() | st.binary(min_size=32, max_size=32), numbers_steady=mask,
                     numbers_churn=mask, numbers_probing=st.booleans())


@given(histories | numbered)
def test_encoding_round_trips(history: FetchHistory) -> None:
    assert decode_history(encode_history(history)) == history


@given(histories)
def test_histories_of_format_1_are_read(history: FetchHistory) -> None:
    """Format 1 is format 3 without the wording digest and the number buckets at the end: read with
    both absent."""
    legacy = dataclasses.replace(history, wording_digest=None)
    encoded = encode_history(legacy)
    assert decode_history(bytes([1]) + encoded[1:-2]) == legacy


@given(histories)
def test_histories_of_format_2_are_read(history: FetchHistory) -> None:
    """Format 2 is format 3 without the number buckets (and what was learned of them) at the end;
    its wording digest, masking digits only, is marked to be compared once without it."""
    encoded = encode_history(history)
    read = decode_history(bytes([2]) + encoded[1:-1])
    assert read == dataclasses.replace(history, legacy_wording=history.wording_digest is not None)


def test_encoding_is_compact() -> None:
    history = FetchHistory(first_fetch_s=0.0, last_fetch_s=DAY, interval_s=DAY, status=200, etag='"abc"',
                           last_modified="Mon, 06 May 2024 08:00:00 GMT", content_type="text/html",
                           content_length=1234, body_digest=b"a" * 16, text_digest=b"b" * 16, simhash=7,
                           observations=tuple(Observation(DAY, False) for _ in range(32)))
    assert len(encode_history(history)) < 450
    assert len(encode_history(dataclasses.replace(history, wording_digest=b"c" * 16))) < 470


@pytest.mark.parametrize("raw", [b"", bytes([FORMAT_VERSION + 1]) + b"\0" * 80,
                                 bytes([FORMAT_VERSION]) + b"\0"])
def test_unreadable_state_is_refused(raw: bytes) -> None:
    with pytest.raises(StateError):
        decode_history(raw)


def test_oversized_validator_is_refused_not_truncated() -> None:
    history = FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=DAY, etag="x" * 70_000)
    with pytest.raises(ValueError):
        encode_history(history)


@pytest.mark.parametrize(("agreements", "disagreements", "trusted"),
                         [(0, 0, False), (1, 0, False), (2, 0, True), (10, 1, True), (10, 2, False)])
def test_last_modified_trust(agreements: int, disagreements: int, trusted: bool) -> None:
    history = FetchHistory(first_fetch_s=0.0, last_fetch_s=0.0, interval_s=DAY, lm_agreements=agreements,
                           lm_disagreements=disagreements)
    assert history.last_modified_trusted is trusted


MONDAY = "Mon, 06 May 2024 08:00:00 GMT"
TUESDAY = "Tue, 07 May 2024 08:00:00 GMT"
MONDAY_S = 1714982400.0


def first(**fields: object) -> FetchHistory:
    fetch = Fetch(fetched_at_s=MONDAY_S, etag='"v1"', last_modified=MONDAY, body_digest=b"a" * 16, **fields)  # type: ignore[arg-type]
    return updated_history(None, fetch, ChangeDecision(None, "first_fetch"), window=4)


def test_first_fetch_stores_the_copy_and_no_observation() -> None:
    history = first(content_length=10)
    assert (history.etag, history.last_modified, history.content_length) == ('"v1"', MONDAY, 10)
    assert history.observations == () and history.fetches == 1


def test_304_keeps_the_stored_copy() -> None:
    stored = first(content_length=10)
    fetch = Fetch(fetched_at_s=MONDAY_S + DAY, status=304, etag=None)
    after = updated_history(stored, fetch, ChangeDecision(False, "not_modified"), window=4)
    assert (after.etag, after.body_digest, after.content_length) == ('"v1"', b"a" * 16, 10)
    assert after.observations == (Observation(DAY, False),)
    assert after.last_fetch_s == MONDAY_S + DAY


def test_change_records_the_last_modified_age_and_a_vote() -> None:
    stored = first()
    fetch = Fetch(fetched_at_s=MONDAY_S + 1.5 * DAY, etag='"v2"', last_modified=TUESDAY,
                  body_digest=b"b" * 16)
    after = updated_history(stored, fetch, ChangeDecision(True, "digest"), window=4)
    assert after.observations == (Observation(1.5 * DAY, True, 0.5 * DAY),)
    assert (after.changes, after.lm_agreements, after.lm_disagreements) == (1, 1, 0)


def test_last_modified_of_the_response_time_is_not_an_age() -> None:
    stored = first()
    now = MONDAY_S + DAY
    fetch = Fetch(fetched_at_s=now, last_modified=TUESDAY, body_digest=b"b" * 16)
    after = updated_history(stored, fetch, ChangeDecision(True, "digest"), window=4)
    assert after.observations[0].modified_age_s is None
    assert after.lm_disagreements == 1


def test_window_keeps_the_most_recent_observations() -> None:
    history = first()
    for day in range(1, 7):
        fetch = Fetch(fetched_at_s=MONDAY_S + day * DAY, status=304)
        history = updated_history(history, fetch, ChangeDecision(day % 2 == 0, "x"), window=4)
    assert [o.changed for o in history.observations] == [False, True, False, True]
    assert history.fetches == 7


def test_undecided_fetch_moves_the_clock_without_an_observation() -> None:
    stored = first()
    fetch = Fetch(fetched_at_s=MONDAY_S + DAY, etag=None, last_modified=None)
    after = updated_history(stored, fetch, ChangeDecision(None, "no_signal"), window=4)
    assert after.observations == () and after.last_fetch_s == MONDAY_S + DAY
    assert dataclasses.replace(after, last_fetch_s=0.0).fetches == 2
    assert not math.isnan(after.first_fetch_s)
