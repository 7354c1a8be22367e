"""Each URL's last verdict, kept by URL so ``crawl-dedup status`` can ask for it.

The page stage's state is kept by block-table key and a page is decided at its gather shard (by its
order key), so nothing in it is found by URL. So every verdict also goes to the shard of its URL's
key (the fingerprint of the URL canonicalized by the default rules, as the revisit stage keys its
histories): a :class:`LastVerdict` record, or, when this worker owns that shard, a write there in the
same transaction. The shard keeps the verdict of the latest page by order key (fetch time, then
input position) under ``u`` + the URL key: the last verdict, whatever order they were decided in.
It is state like the rest (changelogged, moved by a reshard by its URL key), about 40 bytes plus the
``duplicate_of`` URL per URL fetched.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Self

from streams import records
from streams.errors import RecordRejected
from streams.runtime.api import BatchState, Emit, InternalStream, Message, Table
from streams.runtime.extras import OwnedShards
from streams.urls import canonical

PREFIX: Final = b"u"
TABLES: Final = {"last verdicts": Table(PREFIX)}  # moved by URL key, the key its records route by
VERDICTS: Final = ("unique", "exact", "near", "skipped")  # a verdict, or the kind of a duplicate
NO_DISTANCE: Final = 0xFF
_HEAD: Final = struct.Struct(">16sBB")  # order, verdict, distance; then duplicate_of
_ORDER_MS: Final = struct.Struct(">Q")  # an order key begins with the fetch time in ms


def url_key(url: str) -> bytes | None:
    """The key a URL's verdict is kept under: the fingerprint of its canonical form (default rules);
    None for a URL those rules refuse."""
    try:
        return canonical.fingerprint(canonical.canonicalize(url))
    except RecordRejected:
        return None


@dataclass(slots=True, unsafe_hash=True)
class LastVerdict:
    """A page's verdict, to the shard of its URL's key (the record's key). Built as
    :class:`~streams.stages.content_seen.buckets.Page` is."""

    order: bytes
    verdict: str
    distance: int | None = None
    duplicate_of: str = ""

    def __init__(self, order: bytes, verdict: str, distance: int | None = None,
                 duplicate_of: str = "") -> None:
        self.order = order
        self.verdict = verdict
        self.distance = distance
        self.duplicate_of = duplicate_of

    def encode(self) -> bytes:
        distance = NO_DISTANCE if self.distance is None else min(self.distance, NO_DISTANCE - 1)
        return (_HEAD.pack(self.order, VERDICTS.index(self.verdict), distance)
                + self.duplicate_of.encode("utf-8", "surrogatepass"))

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        order, verdict, distance = _HEAD.unpack_from(raw)
        return cls(order, VERDICTS[verdict], None if distance == NO_DISTANCE else distance,
                   raw[_HEAD.size:].decode("utf-8", "surrogatepass"))

    def describe(self) -> dict[str, Any]:
        """As ``crawl-dedup status`` shows it."""
        duplicate = self.verdict in ("exact", "near")
        return {"verdict": "duplicate" if duplicate else self.verdict,
                "kind": self.verdict if duplicate else None,
                "duplicate_of": self.duplicate_of or None, "distance": self.distance,
                "fetched_at": records.rfc3339(datetime.fromtimestamp(
                    _ORDER_MS.unpack_from(self.order)[0] / 1000, UTC))}


class LastVerdicts:
    """Where a verdict is noted, and the processor of :class:`LastVerdict` records."""

    def __init__(self, shards: InternalStream, owned: OwnedShards) -> None:
        self._shards = shards
        self._owned = owned

    def note(self, url: str, record: LastVerdict) -> list[Emit]:
        """``record``, the verdict of ``url``'s page, to its URL's shard: kept there now when it is
        owned here, else a record to send."""
        key = url_key(url)
        if key is None:
            return []
        shard = self._shards.shard_of(key)
        state = self._owned.state(shard)
        if state is not None:
            keep(state, key, record)
            return []
        return [self._shards.send(record, key, shard)]

    def process(self, record: LastVerdict, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if key is None or len(key) != 16:
            raise RecordRejected("invalid_shard_record", "a last verdict without a 16-byte URL key")
        keep(state, key, record)
        return []


def keep(state: BatchState, key: bytes, record: LastVerdict) -> None:
    """Keep ``record`` unless the shard holds the verdict of a later page of the URL."""
    stored = state.get(PREFIX + key)
    if stored is None or stored[:16] <= record.order:
        state.set(PREFIX + key, record.encode())


def status(value: bytes | None) -> dict[str, Any] | None:
    """What a shard's ``u`` entry says (None: no page of the URL was decided)."""
    return None if value is None else LastVerdict.decode(value).describe()
