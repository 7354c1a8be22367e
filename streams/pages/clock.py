"""Which numbers of a page's text are its clock: the date and time of the response itself.

A page that prints when it was rendered ("Page generated 2024-05-02 12:03:44 UTC", "Served Tuesday,
3 December 2024 at 12:03") changes its text at every fetch, and not all of it at once: the seconds
move at every response, the day once a day, the month once a month. The parts that move slowly
look like content to a learner that watches which numbers stand still (they stand still for weeks,
then move, as a release date does), so the revisit stage's number learning
(:mod:`streams.stages.revisit.numbers`) cannot tell them apart from a page's history alone. What
tells them apart is the fetch time: a date and time that equal the moment of the response are the
response's, not the page's. :func:`clock_numbers` finds them among the text's numbers (as
:mod:`streams.pages.changes` splits them) so that they are left out of the number buckets.

The rule, on runs of adjacent numbers (separated by at most :data:`MAX_GAP_CHARS` characters
without letters, as in ``2024-05-02`` or ``Tuesday, 3 December 2024``): a run holding a time whose
minutes (and seconds) are those of the fetch, within :data:`TIME_SLACK_S` (hours are left free: the
page may print another time zone), is a clock; so is a run of two numbers or more that are all the
parts of one date within a day of the fetch (year, month as number or name, day, weekday name)
and hold its day or its weekday. A release dated the day it was fetched is left out too, which is
rare and costs that one date.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

MAX_GAP_CHARS: Final = 3
TIME_SLACK_S: Final = 120
_TIME: Final = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_LETTER: Final = re.compile(r"[^\W\d_]")


def clock_numbers(numbers: Sequence[str], between: Sequence[str], fetched_at_s: float) -> set[int]:
    """Indexes of ``numbers`` that are the fetch's own date and time (module docstring);
    ``between[i]`` is the text before ``numbers[i]`` (``re.split``'s pieces)."""
    fetched = datetime.fromtimestamp(fetched_at_s, UTC)
    dates = [_date_parts(fetched + timedelta(days=shift)) for shift in (-1, 0, 1)]
    clock: set[int] = set()
    for run in _runs(numbers, between):
        parts = [numbers[i] for i in run]
        if any(_is_fetch_time(part, fetched) for part in parts) or any(
                _is_date(parts, whole, day) for whole, day in dates):
            clock.update(run)
    return clock


def _runs(numbers: Sequence[str], between: Sequence[str]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index in range(len(numbers)):
        gap = between[index]
        if runs and len(gap) <= MAX_GAP_CHARS and not _LETTER.search(gap):
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def _is_fetch_time(number: str, fetched: datetime) -> bool:
    for found in _TIME.finditer(number):
        minute, second = int(found.group(2)), found.group(3)
        printed_s = minute * 60 + (int(second) if second is not None else fetched.second)
        actual_s = fetched.minute * 60 + fetched.second
        if min(abs(printed_s - actual_s), 3600 - abs(printed_s - actual_s)) <= TIME_SLACK_S:
            return True
    return False


def _date_parts(day: datetime) -> tuple[frozenset[str], frozenset[str]]:
    """(every way a part of ``day`` is written, the ways its day of month or weekday is)."""
    month, weekday = day.strftime("%B"), day.strftime("%A")
    days = {str(day.day), f"{day.day:02d}", weekday, weekday[:3], weekday[:4]}
    whole = {str(day.year), str(day.month), f"{day.month:02d}", month, month[:3], month[:4], *days}
    return frozenset(whole), frozenset(days)


def _is_date(parts: Sequence[str], whole: frozenset[str], days: frozenset[str]) -> bool:
    pieces = [piece for part in parts for piece in part.split()]
    return (len(pieces) >= 2 and all(piece in whole for piece in pieces)
            and any(piece in days for piece in pieces))
