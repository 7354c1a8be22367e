"""What one block-table key holds, as bytes, and the two rules applied to it: probe and insert.

A near-duplicate lookup (Manku, Jain and Das Sarma, WWW 2007, section 3) looks a fingerprint's key
up in every table of the block design (:mod:`streams.pages.blocks`); each table key names a
*bucket* of the pages stored under it. Here a bucket is one value in the shard's store, so a probe
is one point read and an insert one write, both changelogged like any other state.

Entries carry an ``order`` key (16 bytes: fetch time in ms, then the input partition and offset,
all big-endian) so that "earlier" means the same thing on every partition. A probe only reports
*earlier* entries; when two near-duplicates race through different partitions, each may see the
other in some bucket, but only the later one can call the other its original, so the earliest
page of a cluster always stays unique (issue 4: never drop every member of a cluster).

Entry layout: ``order (16) | simhash (8) | text_digest (16) | url_length (2) | url (UTF-8)``;
a bucket is its entries concatenated, earliest first.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ORDER_BYTES = 16
DIGEST_BYTES = 16
_HEAD = struct.Struct(">16sQ16sH")
MAX_URL_BYTES = 0xFFFF


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored page under one table key."""

    order: bytes
    simhash: int
    text_digest: bytes
    url: str

    def encode(self) -> bytes:
        url = self.url.encode("utf-8", "surrogatepass")[:MAX_URL_BYTES]
        return _HEAD.pack(self.order, self.simhash, self.text_digest, len(url)) + url


@dataclass(frozen=True, slots=True)
class Match:
    """The best earlier page a probe found: exact copies first, then the nearest, then the earliest."""

    order: bytes
    url: str
    distance: int
    exact: bool

    def rank(self) -> tuple[bool, int, bytes]:
        return (not self.exact, self.distance, self.order)


def order_key(timestamp_ms: int, partition: int, offset: int) -> bytes:
    """The global "earlier" order of pages: fetch time, then input partition and offset (tie-breaks)."""
    return struct.pack(">QH", max(0, timestamp_ms), partition & 0xFFFF) + max(0, offset).to_bytes(6, "big")


def decode_bucket(raw: bytes | None) -> list[Entry]:
    """The entries of a stored bucket (none for a missing key)."""
    entries: list[Entry] = []
    if not raw:
        return entries
    view, position = memoryview(raw), 0
    while position < len(raw):
        order, simhash, digest, url_length = _HEAD.unpack_from(view, position)
        position += _HEAD.size
        url = bytes(view[position:position + url_length]).decode("utf-8", "surrogatepass")
        position += url_length
        entries.append(Entry(order, simhash, digest, url))
    return entries


def encode_bucket(entries: list[Entry]) -> bytes:
    return b"".join(entry.encode() for entry in entries)


def best_match(bucket: list[Entry], page: Entry, hamming_threshold: int) -> Match | None:
    """The best *earlier* entry within ``hamming_threshold`` bits of ``page``, if any.

    An earlier fetch of the same URL counts like any other page: an unchanged refetch is reported
    as a copy of its own earlier fetch, so its content is not passed on as new a second time.
    """
    best: Match | None = None
    for entry in bucket:
        if entry.order >= page.order:
            continue
        distance = (entry.simhash ^ page.simhash).bit_count()
        if distance > hamming_threshold:
            continue
        found = Match(entry.order, entry.url, distance, entry.text_digest == page.text_digest)
        if best is None or found.rank() < best.rank():
            best = found
    return best


def with_entry(bucket: list[Entry], page: Entry, max_entries: int) -> list[Entry] | None:
    """The bucket with ``page`` inserted, or None when it need not change.

    Not inserted: a page already there (a replayed probe), and an exact copy of an earlier entry
    (that entry already stands for it, so mass-copied pages do not fill buckets). A bucket over
    ``max_entries`` keeps its earliest entries: those are the originals later pages should find.
    """
    for entry in bucket:
        if entry.order == page.order:
            return None
        if entry.order < page.order and entry.text_digest == page.text_digest:
            return None
    grown = sorted([*bucket, page], key=lambda entry: entry.order)[:max_entries]
    return grown if page in grown else None
