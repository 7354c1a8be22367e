"""The page's clock: the numbers that are the response's own date and time, left out of the buckets."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.pages.changes import _NUMBER, clock_mask, number_buckets
from streams.pages.clock import clock_numbers
from streams.stages.revisit.numbers import moved_buckets

FETCHED = datetime(2024, 5, 2, 12, 3, 44, tzinfo=UTC).timestamp()


def clock_of(text: str, fetched_at_s: float = FETCHED) -> list[str]:
    numbers = _NUMBER.findall(text)
    found = clock_numbers(numbers, _NUMBER.split(text), fetched_at_s)
    return [number for index, number in enumerate(numbers) if index in found]


@pytest.mark.parametrize(("text", "clock"), [
    ("Page generated 2024-05-02 12:03:44 UTC in 45 ms.", ["2024", "05", "02 12:03:44"]),
    ("Served Thursday, 2 May 2024 at 12:03 UTC, 37 readers.", ["Thursday", "2", "May", "2024"]),
    ("Rendered at 12:03 in Berlin.", []),                            # a time alone: learned as churn
    ("Updated May 1, 2024.", ["May", "1", "2024"]),                  # a day before: a server's time zone
    ("Viewed 1,234 times.", []),                                     # a counter: learned, not a clock
    ("Release 3.12.7, supported until 2028-10-31.", []),
    ("Released 2024-04-10 at 09:15.", []),                           # another day, another minute
    ("Open 2 to 5 on weekdays.", []),                                # not a date: no run of its parts
    ("See notes [2] [5] and [1].", []),                              # day and month, no year nor name
    ("Fixed on May 2 in the changelog.", []),                        # the fetch's day, no year: content
    ("Served Thursday, 2 May at 12:03.", ["Thursday", "2", "May"]),   # no year, its weekday
], ids=["numeric clock", "clock in words", "a time alone", "yesterday", "counter", "content", "old date",
        "small numbers", "footnotes", "a date without its year", "weekday without year"])
def test_clock_numbers(text: str, clock: list[str]) -> None:
    assert clock_of(text) == clock


def test_a_clock_moves_no_bucket_between_fetches_and_content_still_does() -> None:
    later = FETCHED + 40 * 86_400 + 3_725
    def text(at: float, version: str) -> str:
        stamp = datetime.fromtimestamp(at, UTC)
        return f"Release {version}. Page generated {stamp:%Y-%m-%d %H:%M:%S} UTC."

    before, same, edited = (number_buckets(text(FETCHED, "3.12.7"), FETCHED),
                            number_buckets(text(later, "3.12.7"), later),
                            number_buckets(text(later, "3.12.8"), later))
    assert before is not None and same is not None and edited is not None
    assert moved_buckets(before, same) == 0
    assert moved_buckets(before, edited).bit_count() == 1


def test_a_post_dated_the_day_it_was_first_fetched_moves_no_bucket_later() -> None:
    text = "Posted Thursday, November 7 by the release team: version 1.83 is out."
    first = datetime(2024, 11, 8, 9, 0, tzinfo=UTC).timestamp()
    later = first + 5 * 86_400
    on_its_day, days_later = number_buckets(text, first), number_buckets(text, later)
    assert on_its_day is not None and days_later is not None
    assert clock_mask(on_its_day) != 0 and clock_mask(days_later) == 0
    assert on_its_day[:64] != days_later[:64]
    assert moved_buckets(on_its_day, days_later) == 0
    edited = number_buckets(text.replace("1.83", "1.84"), later)
    assert edited is not None and moved_buckets(on_its_day, edited).bit_count() == 1


def test_buckets_kept_before_the_clock_mask_compare_as_before() -> None:
    before, after = number_buckets("Release 3.12.7.", FETCHED), number_buckets("Release 3.12.8.", FETCHED)
    assert before is not None and after is not None and len(before) == 68
    moved = moved_buckets(before, after)
    assert moved.bit_count() == 1
    assert moved_buckets(before[:64], after) == moved_buckets(before, after[:64]) == moved
