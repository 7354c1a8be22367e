"""What the revisit stage compares between two fetches of a page: digests and SimHash of its change text.

:func:`change_features` is :func:`streams.pages.analyze.analyze_page`'s counterpart for change
rather than copies. It decides whether a page is compared at all by the same rules (the same
:class:`~streams.pages.decode.Skipped` reasons), decodes it the same way, and fingerprints the same
kind of features, but of :func:`streams.pages.extract.change_text` (the main text, with a fallback
that leaves the site's boilerplate out), and it adds the *wording digest*: BLAKE2b-128 of that text
with every number masked (:func:`mask_numbers`).

Why a second digest: the text digest tells "not one character of the text moved"; a page whose text
moved by a view counter, a "3 minutes ago" or a date inside the article (numbers) may not have
changed for a reader or an index, while a one-word edit of a long page has, though it may move a
64-bit SimHash by no bit at all (a word of a 1,500-word page is two of its ~3,000 shingles). Month
and weekday names count as numbers (English ones, capitalised: "Tuesday, 3 December" is a date, and
a clock written so moves them at every fetch). So equal wording digests mean "only numbers moved",
and different ones mean the words changed, however little; the SimHash distance then grades the
change instead of deciding it. The page stage leaves numbers out of its features for a like reason
(:mod:`streams.pages.features`, version 2). The content-seen stage never calls this module.

Which numbers are content, the wording digest cannot say: a version or a price edited in the
article is a change, a view counter or a clock in it is not. So the numbers are also kept, in
:func:`number_buckets`: each number goes to one of :data:`NUMBER_BUCKETS` buckets by its context (the
word before it and the word after), and each bucket holds a 16-bit hash of its
numbers in order. Two fetches' buckets tell *where* the numbers moved; a counter in the template
moves the same bucket at every fetch, page after page of the site, and the revisit stage learns
from that which moves are churn (:mod:`streams.stages.revisit.numbers`); the page's clock, the
date and time of the response, is left out (:mod:`streams.pages.clock`). Hashing the context, not
the position, keeps a bucket's identity when text is inserted before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import mmh3

from streams import records
from streams.pages.analyze import PageSettings, digest, skip_reason
from streams.pages.clock import clock_numbers
from streams.pages.decode import Skipped, decode_page
from streams.pages.extract import change_text
from streams.pages.features import text_tokens, tokens_features
from streams.pages.simhash import simhash64

CHANGE_FEATURES_VERSION: Final = 1
"""Bumped whenever the change text, the masking or the features could change for some page."""

# A run of digits with its separators (1,234,567 and 12:03:44 and 1.2.3 are one number each), or an
# English month or weekday name, capitalised, in full or abbreviated: a date in words is a number too.
_CALENDAR_WORDS: Final = (
    "Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    "|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?"
    "|Thu(?:r(?:s(?:day)?)?)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?")
_NUMBER: Final = re.compile(rf"\d+(?:[.,:'\u00a0\u202f ]\d+)*|\b(?:{_CALENDAR_WORDS})\b")
NUMBER_BUCKETS: Final = 32
"""Buckets of :func:`number_buckets` (a page's numbers by context; 64 bytes a page, and a 4-byte mask)."""
_CLOCK_MASK_AT: Final = 2 * NUMBER_BUCKETS


@dataclass(frozen=True, slots=True)
class ChangeFeatures:
    """``text_digest``: BLAKE2b-128 of the change text; ``wording_digest``: of it with numbers
    masked; ``simhash``: 64-bit SimHash of its features; ``text_chars``: its length;
    ``number_buckets``: :func:`number_buckets` of it (``None`` without numbers)."""

    text_digest: bytes
    wording_digest: bytes
    simhash: int
    text_chars: int
    number_buckets: bytes | None = None


def mask_numbers(text: str) -> str:
    """Every number replaced by ``0``: ``"read 1,041 times at 12:03"`` -> ``"read 0 times at 0"``, and
    so is a month or weekday name: ``"Tuesday, 3 May"`` -> ``"0, 0 0"``."""
    return "0".join(_split_numbers(text)[0])


def _split_numbers(text: str) -> tuple[list[str], list[str]]:
    """(the text between the numbers, the numbers), in one pass: ``between[i]`` comes before
    ``numbers[i]``, and there is one more piece between than numbers."""
    between, numbers, start = [], [], 0
    for found in _NUMBER.finditer(text):
        between.append(text[start:found.start()])
        numbers.append(found.group())
        start = found.end()
    between.append(text[start:])
    return between, numbers


def number_buckets(text: str, fetched_at_s: float | None = None) -> bytes | None:
    """The text's numbers by context: :data:`NUMBER_BUCKETS` big-endian 16-bit values (module
    docstring), then the 32-bit mask of the buckets the clock was taken out of (:func:`clock_mask`).

    A number's context is the word before it and the word after, read between the numbers (so a
    neighbouring number stands for nothing: ``"12:03 on 5 May"`` puts ``5`` under ``"on|May"``), and
    an insertion elsewhere in the text moves no number to another bucket;
    its bucket is the context's MurmurHash3 modulo the bucket count, and the bucket's value the
    hash of its numbers chained in order, never 0 (0 is an empty bucket). ``None`` for a text
    without numbers. With the fetch time, the numbers that are the response's own date and time
    are left out (:mod:`streams.pages.clock`), and their buckets are marked in the mask.
    """
    return _buckets(*_split_numbers(text), fetched_at_s)


def clock_mask(buckets: bytes) -> int:
    """The buckets whose numbers included the fetch's clock, left out (0 for buckets kept before
    the mask was, 64 bytes long).

    Why keep it: one fetch cannot tell a clock from a content date of the same day. A post dated
    "Thursday, November 7" and fetched on the 7th or the 8th looks like the response's date, so it
    is left out; fetched on the 10th, it is back in its bucket, and that bucket moved without an
    edit. A real clock is taken out of both fetches compared, a content date out of one only, so
    :func:`streams.stages.revisit.numbers.moved_buckets` does not compare a bucket the clock was
    taken out of on one side only: a page whose clock stopped matching (a cached copy served
    days later) is no edit either, and an edit in such a bucket at that one fetch is missed.
    """
    return int.from_bytes(buckets[_CLOCK_MASK_AT:_CLOCK_MASK_AT + 4], "big")


def _buckets(between: list[str], numbers: list[str], fetched_at_s: float | None) -> bytes | None:
    if not numbers:
        return None
    clock = clock_numbers(numbers, between, fetched_at_s) if fetched_at_s is not None else set()
    values = [0] * NUMBER_BUCKETS
    clocked = 0
    for index, number in enumerate(numbers):
        before = between[index].split()[-1:]
        after = between[index + 1].split()[:1]
        bucket = mmh3.hash(" ".join(before) + "|" + " ".join(after), signed=False) % NUMBER_BUCKETS
        if index in clock:
            clocked |= 1 << bucket
            continue
        values[bucket] = (mmh3.hash(number, values[bucket], signed=False) & 0xFFFF) or 1
    return b"".join(value.to_bytes(2, "big") for value in values) + clocked.to_bytes(4, "big")


def change_features(record: Mapping[str, Any], settings: PageSettings, body: bytes | str | None = None,
                    fetched_at_s: float | None = None) -> ChangeFeatures | Skipped:
    """The change features of a fetched page, or why it is not compared (as ``analyze_page``);
    ``fetched_at_s`` tells the page's clock from its numbers (:func:`number_buckets`)."""
    skipped = skip_reason(record)
    if skipped is not None:
        return Skipped(skipped)
    body = records.body_bytes(record) if body is None else body
    decoded = decode_page(body, record.get("content_type"), record.get("headers") or {})
    if isinstance(decoded, Skipped):
        return decoded
    text = change_text(decoded, min_main_chars=settings.min_main_chars)
    tokens, numbers = text_tokens(text, cjk_ngram_chars=settings.cjk_ngram_chars)
    hashes, weights = tokens_features(tokens, numbers, shingle_words=settings.shingle_words,
                                      weighting=settings.weighting)
    if hashes.size == 0:
        return Skipped("no_text")
    between, figures = _split_numbers(text)
    return ChangeFeatures(text_digest=digest(text.encode("utf-8")),
                          wording_digest=digest("0".join(between).encode("utf-8")),
                          simhash=simhash64(hashes, weights), text_chars=len(text),
                          number_buckets=_buckets(between, figures, fetched_at_s))
