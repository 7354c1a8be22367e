"""What one block-table key holds, as bytes, and the rules applied to it: probe and insert.

A near-duplicate lookup (Manku, Jain and Das Sarma, WWW 2007, section 3) looks a fingerprint's key
up in every table of the block design (:mod:`streams.pages.blocks`); each table key names a
*bucket* of the fingerprints stored under it. Here a bucket is one value in the shard's store, so
a probe is one point read, changelogged like any other state when it inserts.

State layout 3 (:data:`LAYOUT`). A bucket holds *slots*: the distinct SimHashes stored under its
key, 8 bytes each, which is all a probe needs to rule a stored page out (over the decision's
radius), as it nearly always does. The pages themselves are in the shard's *record* of their
SimHash, read only for a slot within the radius: ``order (16) | text_digest (16) | sketch (36) |
url_length (2) | url`` per page, earliest first. Pages with one SimHash share its record, so every
table reaching it in the shard reads the same one, and an exact copy (same text, so same SimHash)
is found there. A page within the radius is a near copy when :func:`streams.pages.sketch.is_near_duplicate`
says so: the SimHash tables find the candidates, the word-pair sketch each entry keeps decides
(Henzinger, SIGIR 2006). A slot holds the SimHash alone, not the page's order, digest and URL, so
that the tables, read 10 times per page, stay small enough at 10^7 pages to be read from memory
rather than from disk (docs/content-seen.md, "State", has the earlier layouts and what they cost;
docs/decisions/0003-plaintable-for-block-tables.md, "Store size and opening, measured", the slot
sizes).

Pages carry an ``order`` key (16 bytes: fetch time in ms, then the input partition and offset,
all big-endian) so that "earlier" means the same thing on every partition. A probe reports the
best *earlier* page to its own page, and the probing page to every *later* page it meets (a page
probed before an earlier one: the later page waits for such news, :mod:`streams.stages.content_seen.horizon`).
Only the later page of a pair is ever called the other's copy, so the earliest page of a cluster
always stays unique and no cluster loses all its members.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from streams.errors import StateError
from streams.pages.sketch import (
    DEFAULT_RULE,
    SKETCH_BYTES,
    SLOTS,
    NearDuplicateRule,
    SketchBits,
    agreement,
    sketch_bits,
)

LAYOUT: Final = b"3"  # recorded per shard: a shard in another layout is refused, never misread
ORDER_BYTES: Final = 16
DIGEST_BYTES: Final = 16
SLOT_BYTES: Final = 8
_PAGE_HEAD: Final = struct.Struct(f">16s16s{SKETCH_BYTES}sH")  # order, text digest, sketch, URL length
MAX_URL_BYTES: Final = 0xFFFF

Record = list["Page"]
RecordReader = Callable[[int], Record]  # SimHash -> its record's pages ([] when there is none)


@dataclass(slots=True, unsafe_hash=True)
class Page:
    """One stored page, or the page a probe looks up; ``sketch`` is :meth:`Sketch.encode`'s bytes.

    Its ``__init__`` is written out, and it is not frozen: compiled, the dataclass's own
    ``__init__`` stays interpreted and is several times slower (docs/decisions/0002, "Records
    built on the hot path, measured"); every record a probe reads is decoded into these. Never changed
    once built, as the other records written so."""

    order: bytes
    simhash: int
    text_digest: bytes
    url: str
    sketch: bytes

    def __init__(self, order: bytes, simhash: int, text_digest: bytes, url: str, sketch: bytes) -> None:
        self.order = order
        self.simhash = simhash
        self.text_digest = text_digest
        self.url = url
        self.sketch = sketch

    def encode(self) -> bytes:
        """The page as its SimHash's record stores it (the SimHash is the record's key)."""
        url = self.url.encode("utf-8", "surrogatepass")[:MAX_URL_BYTES]
        return _PAGE_HEAD.pack(self.order, self.text_digest, self.sketch, len(url)) + url


@dataclass(slots=True, unsafe_hash=True)
class Match:
    """An earlier page met: exact copies first, then the most agreeing sketch bins, then the nearest
    SimHash, then the earliest (:func:`streams.pages.sketch.match_rank`). Built as :class:`Page` is."""

    order: bytes
    url: str
    distance: int
    exact: bool
    agreement: int  # sketch bins that agree, of 256 (all of them for an exact copy)

    def __init__(self, order: bytes, url: str, distance: int, exact: bool, agreement: int) -> None:
        self.order = order
        self.url = url
        self.distance = distance
        self.exact = exact
        self.agreement = agreement

    def rank(self) -> tuple[bool, int, int, bytes]:
        return (not self.exact, -self.agreement, self.distance, self.order)


def order_key(timestamp_ms: int, partition: int, offset: int) -> bytes:
    """The global "earlier" order of pages: fetch time, then input partition and offset (tie-breaks)."""
    return struct.pack(">QH", max(0, timestamp_ms), partition & 0xFFFF) + max(0, offset).to_bytes(6, "big")


def record_key(simhash: int) -> bytes:
    """The state key of a SimHash's record (the stage's ``s`` prefix)."""
    return b"s" + simhash.to_bytes(SLOT_BYTES, "big")


def decode_bucket(raw: bytes | None) -> list[int]:
    """The SimHashes of a stored bucket (none for a missing key)."""
    if not raw:
        return []
    if len(raw) % SLOT_BYTES:
        raise StateError(f"a bucket of {len(raw)} bytes is not made of {SLOT_BYTES}-byte slots")
    return list(struct.unpack(f">{len(raw) // SLOT_BYTES}Q", raw))


def encode_bucket(bucket: list[int]) -> bytes:
    return struct.pack(f">{len(bucket)}Q", *bucket)


def decode_record(raw: bytes | None, simhash: int) -> Record:
    """The pages of a stored record (none for a missing key), earliest first."""
    pages: Record = []
    if not raw:
        return pages
    view, position = memoryview(raw), 0
    while position < len(raw):
        order, digest, sketch, url_length = _PAGE_HEAD.unpack_from(view, position)
        position += _PAGE_HEAD.size
        url = bytes(view[position:position + url_length]).decode("utf-8", "surrogatepass")
        position += url_length
        pages.append(Page(order, simhash, digest, url, sketch))
    return pages


def encode_record(pages: Record) -> bytes:
    return b"".join(page.encode() for page in pages)


@dataclass(slots=True)
class Meeting:
    """What a probe met in a bucket: the best earlier page for the probing page, and the later pages
    it must tell about itself (each with the probing page as their match). Built as :class:`Page` is."""

    best: Match | None
    later: list[tuple[bytes, Match]]

    def __init__(self, best: Match | None, later: list[tuple[bytes, Match]]) -> None:
        self.best = best
        self.later = later


def meet(bucket: list[int], page: Page, read: RecordReader,
         rule: NearDuplicateRule = DEFAULT_RULE) -> Meeting:
    """The stored pages that are copies of ``page`` or it of them: the best earlier one, and every
    later one (a page probed before ``page`` although ``page`` is earlier).

    A copy is exact (the same text digest) or near: within ``rule.radius`` bits and judged so by
    the pages' sketches (:func:`streams.pages.sketch.is_near_duplicate`, symmetric, so either page
    of a pair decides alike whichever is probed first). Only the records of slots within the radius
    are read. An earlier fetch of the same URL counts like any other page: an unchanged refetch is
    reported as a copy of its own earlier fetch, so its content is not passed on as new a second
    time.
    """
    best: Match | None = None
    later: list[tuple[bytes, Match]] = []
    mine: SketchBits | None = None
    for simhash in bucket:
        distance = (simhash ^ page.simhash).bit_count()
        if distance > rule.radius:
            continue
        stored = read(simhash)
        if not stored:
            raise StateError(f"slot {simhash:016x} has no record")
        for other in stored:
            if other.order == page.order:
                continue
            exact = other.text_digest == page.text_digest
            agreeing = SLOTS  # the same text: the same sketch
            if not exact:
                mine = mine or sketch_bits(page.sketch)
                near = agreement(mine, sketch_bits(other.sketch), distance, rule)
                if near is None:
                    continue
                agreeing = near
            if other.order > page.order:
                later.append((other.order, Match(page.order, page.url, distance, exact, agreeing)))
            else:
                found = Match(other.order, other.url, distance, exact, agreeing)
                if best is None or found.rank() < best.rank():
                    best = found
    return Meeting(best, later)


def with_page(record: Record, page: Page, max_entries: int) -> Record | None:
    """``page``'s SimHash record with ``page`` in it, or None when it need not change.

    Not inserted: a page already there (a replayed probe, or another table's probe in this shard),
    and an exact copy of an earlier page (same text digest: that page already stands for it, so
    mass-copied pages do not fill records). Exact copies of ``page`` stored before it although
    later (they arrived first) are settled the same way: ``page`` stands for them from now on, so
    the record ends as it would have had the pages arrived in order. A record over ``max_entries``
    keeps its earliest pages: those are the originals later pages should find.
    """
    for other in record:
        if other.order == page.order:
            return None
        if other.order < page.order and other.text_digest == page.text_digest:
            return None
    grown = sorted([*record, page], key=lambda other: other.order)[:max_entries]
    return grown if page in grown else None


def with_slot(bucket: list[int], simhash: int, max_entries: int, read: RecordReader) -> list[int] | None:
    """The bucket with ``simhash`` in it, or None when it need not change.

    A full bucket (``max_entries`` slots) keeps the slots whose earliest pages are earliest, read
    from their records (only then: buckets hold about 0.3 slots at the design's expected pages).
    """
    if simhash in bucket:
        return None
    if len(bucket) < max_entries:
        return sorted([*bucket, simhash])

    def earliest(slot: int) -> bytes:
        stored = read(slot)
        if not stored:
            raise StateError(f"slot {slot:016x} has no record")
        return stored[0].order

    kept = sorted([*bucket, simhash], key=lambda slot: (earliest(slot), slot))[:max_entries]
    return sorted(kept) if simhash in kept else None
