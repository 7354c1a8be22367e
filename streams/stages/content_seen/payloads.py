"""First captures of byte-identical payloads: what a fetcher's WARC writer needs for a revisit record.

A web archive writes a page whose payload an earlier capture had as a WARC ``revisit`` record that
names that capture (docs/web-archives.md; WARC 1.1 section 6.7.2). The stage finds it here: each
compared page's *payload*, the SHA-1 of its body after transfer decoding as WARC writers digest it
(:mod:`streams.archives.payload`), is looked up among the captures stored under that digest, and the
earliest earlier one is the page's *first capture*: its URL, fetch time and, for a page replayed
from a WARC, its ``WARC-Record-ID``.

Where it is stored: ``y`` + SimHash (8 bytes) + SHA-1 (20), in the shard of the page's first block
table, and looked up by that table's probe (a :class:`PayloadProbe`, the
:class:`~streams.stages.content_seen.shard_records.Probe` of table 0 with the capture along). A
byte-identical body decodes to the same text, so it has the same SimHash and the same first table:
the two meet in one shard without a probe of their own (a body read under another charset label
may not, and then stays unmatched: a revisit missed, never a wrong one). Keyed by the SimHash too,
the entries move with the tables when the stage is resharded (:mod:`.move`).

Earlier means the pages' order key (:func:`streams.stages.content_seen.buckets.order_key`), and
copies race as :mod:`streams.stages.content_seen.horizon` describes: an entry keeps up to
``max_bucket_entries`` captures, earliest first, so that a capture probed after later copies of it
can tell each of them (a *payload notice*) that it is their first capture; the gather shard keeps
each waiting page's earliest (``v`` + order, :mod:`.gather`). A page replayed through its probe
meets itself and is neither matched nor stored twice. Pages stored before this version have no
entries: their copies find no first capture (state of the earlier layout reads on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from streams import records
from streams.archives import payload as warc_payload
from streams.stages.content_seen.buckets import SLOT_BYTES

PAYLOAD_PREFIX: Final = b"y"
GATHER_PREFIX: Final = b"v"


def payload_sha1(record: Mapping[str, Any]) -> bytes:
    """The SHA-1 of a fetched page's payload: its body after the transfer decoding its
    ``Transfer-Encoding`` header names. An analysis process computes it beside the page's analysis
    (the worker then only reads it); a page analysed in the worker is digested there."""
    transfer = (record.get("headers") or {}).get("transfer-encoding")
    raw = records.raw_body(records.body_bytes(record))
    return warc_payload.sha1_of(warc_payload.entity_body(raw, transfer))


@dataclass(slots=True, unsafe_hash=True)
class Capture:
    """A page as a first capture: order key, URL, ``fetched_at`` (RFC 3339, None when unknown) and
    WARC-Record-ID (None unless it came from a WARC). Built as
    :class:`~streams.stages.content_seen.buckets.Page` is."""

    order: bytes
    url: str
    fetched_at: str | None
    record_id: str | None

    def __init__(self, order: bytes, url: str, fetched_at: str | None, record_id: str | None) -> None:
        self.order = order
        self.url = url
        self.fetched_at = fetched_at
        self.record_id = record_id

    def fields(self) -> list[object]:
        return [self.order.hex(), self.url, self.fetched_at, self.record_id]

    @classmethod
    def of(cls, fields: list[object]) -> Capture:
        order, url, fetched_at, record_id = fields
        assert isinstance(order, str) and isinstance(url, str)
        assert fetched_at is None or isinstance(fetched_at, str)
        assert record_id is None or isinstance(record_id, str)
        return cls(bytes.fromhex(order), url, fetched_at, record_id)

    def encode(self) -> bytes:
        return orjson.dumps(self.fields())

    @classmethod
    def decode(cls, raw: bytes | None) -> Capture | None:
        return None if not raw else cls.of(orjson.loads(raw))


def payload_key(simhash: int, sha1: bytes) -> bytes:
    """The state key of a payload's captures (module docstring)."""
    return PAYLOAD_PREFIX + simhash.to_bytes(SLOT_BYTES, "big") + sha1


def decode_entry(raw: bytes | None) -> list[Capture]:
    """A payload's stored captures, earliest first (none for a missing key)."""
    return [] if not raw else [Capture.of(fields) for fields in orjson.loads(raw)]


def encode_entry(captures: list[Capture]) -> bytes:
    return orjson.dumps([capture.fields() for capture in captures])


@dataclass(slots=True)
class PayloadMeeting:
    """What a capture met under its payload: its first capture (the earliest earlier one), the later
    captures to notify (each of which has this capture as an earlier one), and the entry with this
    capture in it (None when it need not change). Built as :class:`Capture` is."""

    first: Capture | None
    later: list[Capture]
    grown: list[Capture] | None

    def __init__(self, first: Capture | None, later: list[Capture], grown: list[Capture] | None) -> None:
        self.first = first
        self.later = later
        self.grown = grown


def meet_payload(stored: list[Capture], capture: Capture, max_entries: int) -> PayloadMeeting:
    """``capture`` looked up among ``stored`` and inserted (module docstring)."""
    earlier = [other for other in stored if other.order < capture.order]
    later = [other for other in stored if other.order > capture.order]
    if len(earlier) + len(later) < len(stored):  # itself: a probe replayed
        return PayloadMeeting(earlier[0] if earlier else None, [], None)
    grown = sorted([*stored, capture], key=lambda each: each.order)[:max_entries]
    return PayloadMeeting(earlier[0] if earlier else None, later, grown if capture in grown else None)


def earlier_of(current: Capture | None, found: Capture | None) -> Capture | None:
    """The earlier of two first captures (either may be None)."""
    if current is None or (found is not None and found.order < current.order):
        return found
    return current

