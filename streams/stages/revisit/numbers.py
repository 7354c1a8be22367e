"""Which of a page's numbers are its content and which move at every fetch, learned from its fetches.

Numbers are the content of many pages a crawler revisits most (release tables, prices, scores,
schedules, the dates of news), and the churn of many others (a view counter, "rendered at", a
clock, "5 minutes ago"). A fixed rule cannot tell them apart; what the page did on earlier fetches
can. The change features keep a page's numbers in buckets by their context
(:func:`streams.pages.changes.number_buckets`), so two fetches tell which buckets moved, and the
history keeps two masks of buckets:

* *steady* buckets stood still on a probe (below), or stood still in at least two comparisons and
  in a quarter or more of those in which they were seen (each bucket keeps the two counts, four
  bits each). Churn moves at every response, so a steady bucket holds content, and when it moves
  the page changed (``number_edit``). Two still comparisons alone are not enough: a small random
  number ("rendered in 45 ms") or an "updated 3 hours ago" repeats by chance; and a steady bucket
  that has come to move in more than four of five comparisons is steady no longer (it is a suspect
  again, and a probe decides).
* *churn* buckets moved again when the page was fetched a second time soon after (below). When only
  churn buckets moved, the page did not change (``number_churn``).

A bucket that moved and is neither is a *suspect*: the history cannot place it yet. The stage
then says it cannot tell (``numbers_unlearned``, ``changed`` null) and brings the next fetch forward
to the page's shortest interval, a probe: whatever moves again within it is churn, whatever stays
is content (a number a person edits is unlikely to change twice within an hour; a counter always
does). It is the old way of finding a page's dynamic parts, fetching it twice and seeing what
differs, done only where the history cannot decide, and once per bucket.

What a page learns is also what its host's template does: the host keeps, per bucket, how many of
its pages' probes found it churning and how many of its pages found it steady after the host had
called it churn (:class:`HostNumbers`; each page votes once per bucket). A bucket is churn for the
whole host when at least :data:`HOST_MIN_PAGES` pages found it so and the pages that disagree are
at most :data:`HOST_MAX_DISSENT` of them; a new page of that host then needs no probe for it, and
a page on which it stays still is content there whatever the host says (steady wins).

Learning uses every comparison of two full responses, whatever decided the change: a fetch whose
words changed still shows which buckets stayed. A 304 shows no numbers and teaches nothing: a
server whose validators follow the content answers a probe 304 whether the numbers that moved
before it were an edit or a counter, so a probe is asked for without conditional headers. A history
stored before the buckets were kept has none; its first comparison with numbers that moved is
``features_upgraded`` (null), as when the wording digests were added.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from streams.errors import StateError
from streams.pages.changes import NUMBER_BUCKETS, clock_mask

HOST_NUMBERS_PREFIX: Final = b"n"
DAY_S: Final = 86_400.0
SAME_MINUTE_S: Final = 60.0
HOST_MIN_PAGES: Final = 2
HOST_MAX_DISSENT: Final = 0.25
_VOTE_MAX: Final = 255
_TALLY_MAX: Final = 15
NO_TALLIES: Final = bytes(NUMBER_BUCKETS)
_VERSION: Final = 1
_STATE: Final = struct.Struct(f">B{NUMBER_BUCKETS}B{NUMBER_BUCKETS}B")


def moved_buckets(before: bytes, after: bytes) -> int:
    """A mask of the buckets whose numbers differ between two fetches' buckets, but for those the
    clock was taken out of in one fetch only (:func:`streams.pages.changes.clock_mask`: a content
    date of the day of one fetch)."""
    mask = 0
    for bucket in range(NUMBER_BUCKETS):
        if before[2 * bucket: 2 * bucket + 2] != after[2 * bucket: 2 * bucket + 2]:
            mask |= 1 << bucket
    return mask & ~(clock_mask(before) ^ clock_mask(after))


def filled_buckets(buckets: bytes) -> int:
    """A mask of the buckets holding numbers."""
    mask = 0
    for bucket in range(NUMBER_BUCKETS):
        if buckets[2 * bucket: 2 * bucket + 2] != b"\0\0":
            mask |= 1 << bucket
    return mask


@dataclass(frozen=True, slots=True)
class NumberVerdict:
    """What moved numbers say: ``changed`` (``None``: cannot tell yet) and the signal."""

    changed: bool | None
    signal: str


def judge(moved: int, steady: int, churn: int, probing: bool, host_churn: int) -> NumberVerdict:
    """The verdict on a fetch whose words equal the stored ones and whose numbers ``moved``.

    ``steady`` and ``churn`` are the page's masks, ``probing`` whether this fetch is the probe
    that a suspect asked for, ``host_churn`` the host's churn mask (:meth:`HostNumbers.churn_mask`).
    No bucket moved when only the page's clock did (:mod:`streams.pages.clock` leaves it out of the
    buckets): churn.
    """
    if moved & steady:
        return NumberVerdict(True, "number_edit")
    suspects = moved & ~(churn | host_churn)
    if suspects == 0 or probing:
        return NumberVerdict(False, "number_churn")
    return NumberVerdict(None, "numbers_unlearned")


@dataclass(frozen=True, slots=True)
class Learned:
    """The page's masks after a comparison, and the host votes it casts."""

    tallies: bytes                # per bucket: comparisons it stood still (high nibble) and moved (low)
    steady: int
    churn: int
    host_churn_votes: int = 0     # buckets this page's probe found churning
    host_steady_votes: int = 0    # buckets the host calls churn that this page found steady


def learn(before: bytes, after: bytes, masks: Learned, probing: bool, host_churn: int,
          whole_days: bool = False) -> Learned:
    """The page's masks after comparing two full responses' buckets (module docstring).

    Only buckets filled on both sides teach anything. Each is counted still or moved; on a probe, a
    still one is steady at once and a moved one that is not steady becomes churn. The page votes
    for its host the first time it finds a bucket churning (on a probe) or steady where the host
    says churn. When the two fetches are a whole number of days apart (``whole_days``:
    :func:`whole_days_apart`), standing still proves nothing and only what moved is counted: a clock
    printed as a time of day ("at 07:57 UTC", left in the buckets, :mod:`streams.pages.clock`) shows
    the same time at every fetch a day or a month apart, as a crawler whose intervals are whole
    days (or pinned at a longest interval of 30 days) fetches, and was learned as content.
    """
    both = filled_buckets(before) & filled_buckets(after)
    moved = moved_buckets(before, after) & both
    still = both & ~moved if not whole_days else 0
    tallies = _counted(masks.tallies, still, moved)
    steady = (masks.steady | _mostly_still(tallies)) & ~_mostly_moving(tallies)
    if probing:
        steady |= still
    confirmed = moved & ~steady if probing else 0
    churn = (masks.churn | confirmed) & ~steady
    return Learned(tallies, steady, churn, host_churn_votes=confirmed & ~masks.churn,
                   host_steady_votes=steady & ~masks.steady & host_churn)


def whole_days_apart(interval_s: float) -> bool:
    """Whether two fetches ``interval_s`` apart fall at the same time of day, to the minute a clock
    prints (within :data:`SAME_MINUTE_S`), a day or more apart."""
    days = round(interval_s / DAY_S)
    return days >= 1 and abs(interval_s - days * DAY_S) <= SAME_MINUTE_S


def _counted(tallies: bytes, still: int, moved: int) -> bytes:
    """The tallies with one more still or moved comparison for the buckets in those masks; a count
    at its top halves both counts of its bucket, so their ratio is kept and later comparisons count."""
    counted = bytearray(tallies)
    for bucket in range(NUMBER_BUCKETS):
        stood, went = counted[bucket] >> 4, counted[bucket] & 0xF
        stood += still >> bucket & 1
        went += moved >> bucket & 1
        if stood > _TALLY_MAX or went > _TALLY_MAX:
            stood, went = (stood + 1) // 2, (went + 1) // 2
        counted[bucket] = stood << 4 | went
    return bytes(counted)


def _mostly_still(tallies: bytes) -> int:
    """Buckets still in two comparisons or more and in at least a quarter of them."""
    return _tallied(tallies, lambda stood, went: stood >= 2 and 3 * stood >= went)


def _mostly_moving(tallies: bytes) -> int:
    """Buckets that moved in five comparisons or more and in more than four of five."""
    return _tallied(tallies, lambda stood, went: went >= 5 and 4 * stood < went)


def _tallied(tallies: bytes, test: Callable[[int, int], bool]) -> int:
    """A mask of the buckets whose (still, moved) counts pass ``test``."""
    mask = 0
    for bucket, tally in enumerate(tallies):
        if test(tally >> 4, tally & 0xF):
            mask |= 1 << bucket
    return mask


@dataclass
class HostNumbers:
    """Per bucket, how many of a host's pages found it churning, and how many found it steady
    where the host called it churn (module docstring)."""

    churning: list[int] = field(default_factory=lambda: [0] * NUMBER_BUCKETS)
    steady: list[int] = field(default_factory=lambda: [0] * NUMBER_BUCKETS)

    def churn_mask(self) -> int:
        mask = 0
        for bucket, (churning, steady) in enumerate(zip(self.churning, self.steady, strict=True)):
            if churning >= HOST_MIN_PAGES and steady <= HOST_MAX_DISSENT * (churning + steady):
                mask |= 1 << bucket
        return mask

    def vote(self, learned: Learned) -> None:
        for bucket in range(NUMBER_BUCKETS):
            if learned.host_churn_votes >> bucket & 1:
                self._add(self.churning, bucket)
            if learned.host_steady_votes >> bucket & 1:
                self._add(self.steady, bucket)

    def _add(self, votes: list[int], bucket: int) -> None:
        """One vote; at the cap both counts of the bucket halve, so the share is kept and later
        pages still count."""
        if votes[bucket] >= _VOTE_MAX:
            self.churning[bucket] //= 2
            self.steady[bucket] //= 2
        votes[bucket] += 1

    def encode(self) -> bytes:
        return _STATE.pack(_VERSION, *self.churning, *self.steady)

    @classmethod
    def decode(cls, raw: bytes | None) -> HostNumbers:
        if raw is None:
            return cls()
        if len(raw) != _STATE.size or raw[0] != _VERSION:
            raise StateError(f"revisit host numbers of format {raw[0] if raw else 'empty'}, {len(raw)} bytes")
        values = _STATE.unpack(raw)[1:]
        return cls(list(values[:NUMBER_BUCKETS]), list(values[NUMBER_BUCKETS:]))


def merge_host_numbers(states: list[HostNumbers]) -> HostNumbers:
    """One host's votes from several shards, added (a reshard: the votes are pages' evidence about
    the host's template, not a share of its pages, so every new shard gets them all)."""
    merged = HostNumbers()
    for state in states:
        for bucket in range(NUMBER_BUCKETS):
            merged.churning[bucket] = min(_VOTE_MAX, merged.churning[bucket] + state.churning[bucket])
            merged.steady[bucket] = min(_VOTE_MAX, merged.steady[bucket] + state.steady[bucket])
    return merged


def host_numbers_key(host: str) -> bytes:
    """The state key of a host's number votes."""
    return HOST_NUMBERS_PREFIX + host.encode("utf-8", "surrogatepass")
