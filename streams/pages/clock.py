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
without letters, as in ``2024-05-02 12:03:44`` or ``Tuesday, 3 December 2024``): a run whose numbers
include two or more parts of one date within a day of the fetch (year, month as number or name,
day, weekday name), its day or weekday among them and its year or its weekday among them, and
nothing else but a time of day, is the page's clock, the time with it. The year or the weekday,
not any name: ``[1] [2]`` (footnotes on the second of January) is not a date, and neither is a
content date without its year, "March 12" in a post's changelog, which a fetch on the 11th to the
13th of March would otherwise take for the clock, leaving it out of its bucket for that one fetch,
an edit and its undoing (the two long posts of the real histories' Rust blog that carry such
dates were called changed by their churn-only fetches around them). A time printed alone is not
judged: its minutes move at every fetch, which the number learning sees as churn (except across
whole days: :func:`streams.stages.revisit.numbers.whole_days_apart`), while a content time
("patched at 15:00") would match the fetch's minutes now and then and flip its bucket. A post
dated with its weekday or year and fetched within a day of it is left out too (new posts are
fetched so, first); the buckets keep a mask of where the clock was taken out, and a bucket it was
taken out of in one of two fetches is not compared (:func:`streams.pages.changes.clock_mask`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

MAX_GAP_CHARS: Final = 3
_TIME: Final = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?")
_LETTER: Final = re.compile(r"[^\W\d_]")


def clock_numbers(numbers: Sequence[str], between: Sequence[str], fetched_at_s: float) -> set[int]:
    """Indexes of ``numbers`` that are the fetch's own date and time (module docstring);
    ``between[i]`` is the text before ``numbers[i]`` (``re.split``'s pieces)."""
    fetched = datetime.fromtimestamp(fetched_at_s, UTC)
    dates = [_date_parts(fetched + timedelta(days=shift)) for shift in (-1, 0, 1)]
    clock: set[int] = set()
    for run in _runs(numbers, between):
        parts = [numbers[i] for i in run]
        if any(_is_date(parts, date) for date in dates):
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


def _date_parts(day: datetime) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(every way a part of ``day`` is written, the ways its day of month or weekday is, the ways
    its year or its weekday is)."""
    month, weekday = day.strftime("%B"), day.strftime("%A")
    weekdays = {weekday, weekday[:3], weekday[:4]}
    days = {str(day.day), f"{day.day:02d}", *weekdays}
    whole = {str(day.year), str(day.month), f"{day.month:02d}", month, month[:3], month[:4], *days}
    return frozenset(whole), frozenset(days), frozenset({str(day.year), *weekdays})


def _is_date(parts: Sequence[str], date: tuple[frozenset[str], frozenset[str], frozenset[str]]) -> bool:
    whole, days, strong = date
    pieces = [piece for part in parts for piece in part.split() if not _TIME.fullmatch(piece)]
    return (len(pieces) >= 2 and all(piece in whole for piece in pieces)
            and any(piece in days for piece in pieces) and any(piece in strong for piece in pieces))
