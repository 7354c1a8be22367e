"""Pages waiting for their verdict: what the gather shard keeps of one, and where its body is.

A page's verdict is decided on its gather shard once every block table has replied
(:mod:`streams.stages.content_seen.stage`). Until then the shard keeps the page's *head* (URL,
SimHash, digest, how many replies to expect) and its *source*, the input record's topic, partition
and offset; not the page itself. The body, 100 KB or more where the head is about 200 bytes, is
needed only if the page turns out unique, for ``unique-pages``, and it is already durable in the
input topic. Kept as state, each page would go through the shard topic, the changelog and RocksDB
(put, get, delete), a large part of a worker's time and of the broker's
(docs/decisions/0002-compiled-hot-path.md, Decision 2, has the measurements).

So the worker keeps the input values of pages in flight in memory (:class:`PageCache`): the router
puts a page there when it owns the page's gather shard (with one worker, always), and otherwise
sends the value along in the page's shard record, where the gather shard's owner takes it. A page
whose value is not there any more (the worker restarted or the shard moved before the verdict, or
the cache dropped it) is read back from the input topic by its source.

What a queued page has heard (its replies, the best earlier page they and its notices met, its
payload's first capture) is one value, :class:`Replies`, read and changed by :func:`hear` on each
reply and notice; replies probed on this worker before their page's record arrived wait for it in
a value of the same kind (:func:`hear_early`).

Encodings: a waiting page's head is JSON (``url``, ``simhash``, ``digest``, ``tables``, ``source``,
and ``payload`` when payloads are looked up);
a reply's match and a page's :class:`Replies` are packed.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from streams.errors import RecordRejected
from streams.pages.simhash import to_hex
from streams.runtime.api import BatchState, Table
from streams.runtime.extras import refused
from streams.stages.content_seen.buckets import Match
from streams.stages.content_seen.payloads import GATHER_PREFIX, Capture, earlier_of

log = logging.getLogger(__name__)

_REPLY_HEAD: Final = struct.Struct(">16sBBH")  # order, distance, exact, agreeing sketch bins
_PROGRESS: Final = struct.Struct(">HH")  # replies counted, replies expected (with the flag below)
_HOLDS_FIRST: Final = 0x8000  # set in the replies expected: the first capture follows, its length first
_CAPTURE_LENGTH: Final = struct.Struct(">I")
EARLY_PREFIX: Final = b"e"  # + order: replies heard before their page arrived (:func:`hear_early`)
# A waiting page's horizon waits on progress from every shard of the old count: drained, a state has none.
DRAIN_FIRST: Final = refused("pages are still waiting for their verdict in the old shards: run the stage's "
                             "workers with --drain until they exit, then reshard")
TABLES: Final = {"waiting pages": Table(b"p", DRAIN_FIRST), "replies": Table(b"w", DRAIN_FIRST),
                 "first captures": Table(GATHER_PREFIX, DRAIN_FIRST),
                 "early replies": Table(EARLY_PREFIX, DRAIN_FIRST)}


class Source(NamedTuple):
    """Where a page's input record is: the record's value can always be read back from there."""

    topic: str
    partition: int
    offset: int


def encode_head(url: str, simhash: int, digest: bytes, tables: int, source: Source,
                payload: bytes | None = None) -> bytes:
    """``payload``: the SHA-1 of the page's payload (:mod:`streams.stages.content_seen.payloads`),
    when the stage looks payloads up; a head without one is as earlier versions wrote it."""
    head = {"url": url, "simhash": to_hex(simhash), "digest": digest.hex(), "tables": tables,
            "source": list(source)}
    if payload is not None:
        head["payload"] = payload.hex()
    return orjson.dumps(head)


def decode_head(raw: bytes) -> dict[str, Any]:
    """A head (the first line of a page record, which may carry the input record after it)."""
    head: dict[str, Any] = orjson.loads(raw[:raw.index(b"\n")] if b"\n" in raw else raw)
    return head


def source_of(head: dict[str, Any]) -> Source:
    """The input record's position."""
    found = head["source"]
    return Source(found[0], found[1], found[2])


def encode_match(match: Match | None) -> bytes:
    if match is None:
        return b""
    return _REPLY_HEAD.pack(match.order, match.distance, match.exact, match.agreement) + match.url.encode(
        "utf-8", "surrogatepass")


def decode_match(raw: bytes) -> Match | None:
    if not raw:
        return None
    order, distance, exact, agreement = _REPLY_HEAD.unpack_from(raw)
    url = raw[_REPLY_HEAD.size:].decode("utf-8", "surrogatepass")
    return Match(order, url, distance, bool(exact), agreement)


def better(current: Match | None, found: Match | None) -> Match | None:
    if current is None:
        return found
    if found is None:
        return current
    return found if found.rank() < current.rank() else current


@dataclass(slots=True)
class Replies:
    """What a queued page has heard: ``count`` of its ``tables`` replies, the best earlier page met
    in them and in its notices, and the first capture of its payload met in its payload reply and
    notices (:mod:`streams.stages.content_seen.payloads`).

    ``holds_first``: the first capture is kept here, as this version writes every page's. A value
    an earlier version wrote has no room for it: that page's first capture is under a key of its
    own (``v`` + order, :mod:`streams.stages.content_seen.gather`), and stays there until its
    verdict. Kept apart, it cost every page a store read at its verdict and a page with a first
    capture two changelog records more (a write and a tombstone); kept here, it rides on the
    value each reply rewrites anyway. Its ``__init__`` is written out as
    :class:`~streams.stages.content_seen.buckets.Page` says why."""

    count: int
    tables: int
    best: Match | None = None
    first: Capture | None = None
    holds_first: bool = True

    def __init__(self, count: int, tables: int, best: Match | None = None, first: Capture | None = None,
                 holds_first: bool = True) -> None:
        self.count = count
        self.tables = tables
        self.best = best
        self.first = first
        self.holds_first = holds_first

    def encode(self) -> bytes:
        if not self.holds_first:
            return _PROGRESS.pack(self.count, self.tables) + encode_match(self.best)
        first = b"" if self.first is None else self.first.encode()
        return (_PROGRESS.pack(self.count, self.tables | _HOLDS_FIRST) + _CAPTURE_LENGTH.pack(len(first))
                + first + encode_match(self.best))

    @classmethod
    def decode(cls, raw: bytes) -> Replies:
        count, tables = _PROGRESS.unpack_from(raw)
        if not tables & _HOLDS_FIRST:
            return cls(count, tables, decode_match(raw[_PROGRESS.size:]), None, False)
        (length,) = _CAPTURE_LENGTH.unpack_from(raw, _PROGRESS.size)
        start = _PROGRESS.size + _CAPTURE_LENGTH.size
        return cls(count, tables & ~_HOLDS_FIRST, decode_match(raw[start + length:]),
                   Capture.decode(raw[start:start + length]))


def replies(state: BatchState, order: bytes) -> Replies | None:
    """What the page of ``order`` has heard, or None when it does not wait here (decided already)."""
    raw = state.get(b"w" + order)
    return None if raw is None else Replies.decode(raw)


def hear(state: BatchState, order: bytes, heard: Replies, found: Match | None, first: Capture | None,
         replied: bool) -> bool:
    """What a queued page heard (``heard``, read from its state) with a reply counted when
    ``replied``, ``found`` kept as its best match when better, and ``first`` as its first capture
    when earlier; written back when it changed. Whether all its replies are in now."""
    changed = replied
    heard.count += int(replied)
    best = better(heard.best, found)
    if best is not heard.best:
        heard.best, changed = best, True
    if first is not None and not heard.holds_first:  # queued by an earlier version: kept apart
        key = GATHER_PREFIX + order
        current = Capture.decode(state.get(key))
        if earlier_of(current, first) is not current:
            state.set(key, first.encode())
    elif first is not None and earlier_of(heard.first, first) is not heard.first:
        heard.first, changed = first, True
    if changed:
        state.set(b"w" + order, heard.encode())
    return replied and heard.count == heard.tables


def hear_early(state: BatchState, order: bytes, found: Match | None, first: Capture | None) -> None:
    """A reply to a page whose gather shard is owned here, probed here before the page's own record
    (from the worker that routed it) arrived: kept under ``e`` + order until it does
    (:func:`heard_on_arrival`).

    The probe record and the page record travel in two partitions, with no order between them, so
    with two workers this is common. Sent to the gather shard as a record, the reply would come
    after its page's record, as the horizon argument needs; but a record this worker sends a gather
    shard it owns taints its token (:meth:`~streams.stages.content_seen.local.Ownership.taint`),
    and until a newer record of this worker is processed there, every page of that shard waits for
    progress sent as records: a commit and a fetch more. Kept here, the reply is in the gather
    shard's state before any progress that counts its probe, which is all the argument asks
    (:mod:`streams.stages.content_seen.local`, (3)); it commits, aborts and moves with the shard
    like the ``w`` it becomes."""
    raw = state.get(EARLY_PREFIX + order)
    heard = Replies(0, 0) if raw is None else Replies.decode(raw)
    heard.count += 1
    heard.best = better(heard.best, found)
    heard.first = earlier_of(heard.first, first)
    state.set(EARLY_PREFIX + order, heard.encode())


def heard_on_arrival(state: BatchState, order: bytes, tables: int) -> Replies:
    """What a page arriving at its gather shard by its record has heard already: the replies kept
    for it (:func:`hear_early`), taken off the state, or none."""
    raw = state.get(EARLY_PREFIX + order)
    if raw is None:
        return Replies(0, tables)
    state.delete(EARLY_PREFIX + order)
    early = Replies.decode(raw)
    return Replies(early.count, tables, early.best, early.first)


def reply(state: BatchState, order: bytes, found: Match | None, first: Capture | None = None) -> bool:
    """Count a reply (``found``: the best earlier page it met; ``first``: the page's first capture, a
    payload reply's); whether all the page's are in now."""
    heard = replies(state, order)
    if heard is None:
        raise RecordRejected("orphan_reply", f"no waiting page for order key {order.hex()}")
    return hear(state, order, heard, found, first, True)


def notice(state: BatchState, order: bytes, found: Match | None = None, first: Capture | None = None) -> bool:
    """An earlier page met this queued one in a bucket (``found``), or an earlier capture of its
    payload (``first``, a payload notice's): kept if better. False when the page was decided
    already (the notice came after its horizon: it stays as decided)."""
    heard = replies(state, order)
    if heard is None:
        return False
    hear(state, order, heard, found, first, False)
    return True


@dataclass(slots=True)
class Ready:
    """A page whose verdict can be given now: its head and its best match. Its ``__init__`` and
    the gather queue's are written out as :class:`~streams.stages.content_seen.buckets.Page` says why."""

    head: dict[str, Any]
    best: Match | None
    first: Capture | None = None

    def __init__(self, head: dict[str, Any], best: Match | None, first: Capture | None = None) -> None:
        self.head = head
        self.best = best
        self.first = first


def take(state: BatchState, order: bytes) -> Ready:
    """A page off the queue, to be decided now: its head and best match (removed from the state)."""
    stored, heard = state.get(b"p" + order), replies(state, order)
    if stored is None or heard is None:
        raise RecordRejected("invalid_shard_record", f"queued page {order.hex()} has no head")
    if heard.count < heard.tables:  # every reply precedes the progress that covers the page: a lost probe
        log.warning("page %s decided with %d of %d replies", order.hex(), heard.count, heard.tables)
    state.delete(b"p" + order)
    state.delete(b"w" + order)
    first = heard.first
    if not heard.holds_first:  # queued by an earlier version
        first = Capture.decode(state.get(GATHER_PREFIX + order))
        if first is not None:
            state.delete(GATHER_PREFIX + order)
    return Ready(decode_head(stored), heard.best, first)


class PageCache:
    """Input values of pages in flight, by source, at most ``max_bytes`` of them.

    A cache, never the only copy: what it lacks is read back from the input topic. Values are the
    records' own bytes, shared with nothing else, so a page costs its size once.

    A page whose replies are all in only waits for its horizon, and that wait ends only once more
    input has been routed (:mod:`streams.stages.content_seen.horizon`). Its value is *parked*: not
    counted as in flight, so the worker's intake (:mod:`streams.stages.content_seen.intake`, which
    pauses on what is in flight) never waits for it, and the first to go when the cache is full,
    newest first: the queue decides the oldest first, so those are read soonest.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._values: dict[Source, bytes] = {}  # in flight, oldest first
        self._parked: dict[Source, bytes] = {}  # waiting for their horizon, oldest first
        self._bytes = 0
        self._parked_bytes = 0

    def __len__(self) -> int:
        """Pages in flight (parked ones not counted)."""
        return len(self._values)

    @property
    def size_bytes(self) -> int:
        """Bytes of the pages in flight (parked ones not counted)."""
        return self._bytes

    @property
    def parked_bytes(self) -> int:
        return self._parked_bytes

    def put(self, source: Source, value: bytes) -> None:
        if source in self._values or source in self._parked:
            return
        self._values[source] = value
        self._bytes += len(value)
        self._evict()

    def park(self, source: Source) -> None:
        value = self._values.pop(source, None)
        if value is not None:
            self._bytes -= len(value)
            self._parked[source] = value
            self._parked_bytes += len(value)
            self._evict()

    def _evict(self) -> None:
        while self._bytes + self._parked_bytes > self.max_bytes and self._parked:
            self._parked_bytes -= len(self._parked.pop(next(reversed(self._parked))))
        while self._bytes > self.max_bytes and self._values:
            self._bytes -= len(self._values.pop(next(iter(self._values))))

    def clear(self) -> None:
        self._values.clear()
        self._parked.clear()
        self._bytes = self._parked_bytes = 0

    def pop(self, source: Source) -> bytes | None:
        value = self._values.pop(source, None)
        if value is not None:
            self._bytes -= len(value)
            return value
        value = self._parked.pop(source, None)
        if value is not None:
            self._parked_bytes -= len(value)
        return value
