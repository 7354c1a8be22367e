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

Encodings: a waiting page's head is JSON (``url``, ``simhash``, ``digest``, ``tables``, ``source``,
and ``payload`` when payloads are looked up);
a reply's match and the replies' progress are packed.
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

import orjson

from streams.pages.simhash import to_hex
from streams.stages.content_seen.buckets import Match

_REPLY_HEAD: Final = struct.Struct(">16sBBH")  # order, distance, exact, agreeing sketch bins
_PROGRESS: Final = struct.Struct(">HH")


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


def encode_progress(count: int, tables: int, best: Match | None) -> bytes:
    return _PROGRESS.pack(count, tables) + encode_match(best)


def decode_progress(raw: bytes) -> tuple[int, int, Match | None]:
    count, tables = _PROGRESS.unpack_from(raw)
    return count, tables, decode_match(raw[_PROGRESS.size:])


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
