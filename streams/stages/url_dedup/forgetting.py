"""Forgetting at a shard: the control records ``crawl-dedup forget`` writes, applied by the owner.

``forget`` (:mod:`streams.stages.url_dedup.forget`) writes one control record, keyed
:data:`CONTROL_KEY`, to every partition of the stage's shard topic, in one transaction. Each shard's
owner processes its record as it processes the shard's URLs, in a transaction of the runtime's: the
marks the selection names are deleted (tombstones in the changelog), and a reply with their count
goes to the ``url-dedup-replies`` topic, in the same transaction as the record's offset. So a forget
is applied once per shard whatever is killed when (a transaction that does not commit is applied
again by whoever owns the shard next), and the command, reading the replies with read_committed,
learns the count once every shard has applied it.

Ordering. The record sits in the shard's partition among the URLs routed to it: a sighting routed
after the forget was written is decided after it, so a URL the forget lets go is new again to every
sighting the shard decides after its record, including the sightings its owner decides at once
(those follow the record in the owner's own order). Each worker's memory of URLs it routed
(:mod:`streams.stages.url_dedup.routing_memory`) is cleared when it processes a forget of one of
its shards: every shard has an owner that applies its record, and every sighting a worker
remembers afterwards was routed after the record, so it was decided after it (the stage also
clears the memory on every change of assignment and keeps none while it owns no shard).

A selection by host, prefix or time is a scan of the shard's marks, done in parts of at most
``part_entries`` marks, one part per transaction, so no transaction runs long however large the
shard: each part deletes what it selects, and sends the next part's record (:data:`CONTROL_KEY`,
``continue``) to its own partition in the same transaction. Meanwhile the forget is state
(:data:`FORGETTING_KEY`: its selection, the time it started, where its scan is): a lookup of a
mark it selects that the scan has not reached yet finds no mark (:func:`forgotten_meanwhile`), so
between its first part and its last the shard answers as if every selected mark were gone, and a
URL seen again meanwhile is marked afresh (its mark is newer than the forget, which then leaves it).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from streams import records
from streams.errors import RecordRejected, ReshardRefused
from streams.records import RecordKind
from streams.runtime.api import BatchState, Emit, Message, partition_for
from streams.runtime.extras import KeyedMove, Placed
from streams.stages.url_dedup.marks import Selection, scoped_url, seen_at_ms
from streams.stages.url_dedup.routing_memory import RoutingMemory
from streams.urls import canonical

CONTROL_KEY: Final = b"url-dedup:control"
FORGETTING_KEY: Final = b"meta:forgetting"
PART_ENTRIES: Final = 200_000
KEY_BYTES: Final = 16


@dataclass(frozen=True)
class Control:
    """A control record: ``forget`` (from the command) or ``continue`` (a forget's next part)."""

    op: str
    request: str
    selection: Selection | None = None
    recrawl: bool = False  # each URL let go goes back to the frontier too

    def encode(self) -> bytes:
        found: dict[str, Any] = {"op": self.op, "request": self.request}
        if self.selection is not None:
            found["selection"] = self.selection.to_json()
        if self.recrawl:
            found["recrawl"] = True
        return orjson.dumps(found)

    @classmethod
    def decode(cls, raw: bytes) -> Control:
        try:
            found = orjson.loads(raw)
            op, request = found["op"], str(found["request"])
            selection = Selection.from_json(found["selection"]) if op == "forget" else None
            recrawl = bool(found.get("recrawl"))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise RecordRejected("invalid_shard_record", f"an unreadable control record: {error}") from error
        if op not in ("forget", "continue") or not request:
            raise RecordRejected("invalid_shard_record", f"a control record of no known kind: {op!r}")
        return cls(op, request, selection, recrawl)


@dataclass(frozen=True)
class Pending:
    """A forget under way in one shard: what it selects, when it started (ms), how far its scan got
    (the last fingerprint scanned, empty before the first part) and how many marks it let go."""

    selection: Selection
    since_ms: int
    after: bytes = b""
    forgotten: int = 0
    recrawl: bool = False

    def selects(self, key: bytes, value: bytes) -> bool:
        """A mark this forget lets go: selected, and older than the forget (a URL seen again since
        is marked afresh, and stays); a format-1 mark has no time and is older than any forget."""
        if not self.selection.matches(key, value):
            return False
        at = seen_at_ms(value)
        return at is None or at < self.since_ms


def pending(state: BatchState) -> dict[str, Pending]:
    """The forgets under way in ``state``'s shard, by request."""
    raw = state.get(FORGETTING_KEY)
    return decode_pending(raw) if raw else {}


def decode_pending(raw: bytes) -> dict[str, Pending]:
    found = orjson.loads(raw)
    return {request: Pending(Selection.from_json(each["selection"]), int(each["since_ms"]),
                             bytes.fromhex(each["after"]), int(each["forgotten"]), bool(each.get("recrawl")))
            for request, each in found.items()}


def _encode_pending(forgets: dict[str, Pending]) -> bytes:
    return orjson.dumps({request: {"selection": each.selection.to_json(), "since_ms": each.since_ms,
                                   "after": each.after.hex(), "forgotten": each.forgotten,
                                   "recrawl": each.recrawl}
                         for request, each in forgets.items()})


def forgotten_meanwhile(state: BatchState, key: bytes, value: bytes) -> bool:
    """Whether a forget under way in the shard lets the mark ``value`` of ``key`` go (its scan has not
    reached it yet); if so, that forget counts it, as its scan would have."""
    raw = state.get(FORGETTING_KEY)
    if not raw:
        return False
    forgets = decode_pending(raw)
    for request, each in forgets.items():
        if each.selects(key, value):
            forgets[request] = dataclasses.replace(each, forgotten=each.forgotten + 1)
            state.set(FORGETTING_KEY, _encode_pending(forgets))
            return True
    return False


class Forgetter:
    """The processor of control records at a shard (see the module docstring)."""

    def __init__(self, shards_topic: str, replies_topic: str, frontier_topic: str, memory: RoutingMemory,
                 events: Counter[str], clock_ms: Callable[[], int], keeps_urls: bool,
                 shard_count: Callable[[], int], part_entries: int = PART_ENTRIES) -> None:
        """``keeps_urls``: the seen-set keeps marks (exact mode), which a Bloom filter alone does not;
        ``shard_count``: the stage's shard count when a record is processed; ``frontier_topic``: where
        a forget with ``recrawl`` sends each URL it lets go."""
        self._shards_topic = shards_topic
        self._replies = replies_topic
        self._frontier = frontier_topic
        self._memory = memory
        self._events = events
        self._clock_ms = clock_ms
        self._keeps_urls = keeps_urls
        self._shard_count = shard_count
        self._part_entries = part_entries

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        control = Control.decode(message.value() or b"")
        shard = message.partition() or 0
        forgets = pending(state)
        if control.op == "forget":
            assert control.selection is not None  # decode requires one
            self._memory.clear()
            if not self._keeps_urls:
                return [self._reply(control.request, shard, 0, "this seen-set is a Bloom filter alone "
                                    "(seen_set = bloom): it cannot let URLs go")]
            forgets[control.request] = Pending(control.selection, self._clock_ms(), recrawl=control.recrawl)
        current = forgets.get(control.request)
        if current is None:
            return []  # a part of a forget that has finished (a record left behind: none is)
        return self._part(control.request, current, forgets, shard, state)

    def _part(self, request: str, current: Pending, forgets: dict[str, Pending], shard: int,
              state: BatchState) -> list[Emit]:
        """One part of the forget ``request`` in ``shard``: its reply when it is done, else the record
        of its next part."""
        gone: list[bytes] = []  # the marks let go
        after: bytes | None = None
        if current.selection.by_keys:
            self._named(current.selection, shard, state, gone)
        else:
            after = self._scan(current, state, gone)
        self._events["forgotten"] += len(gone)
        forgotten = current.forgotten + len(gone)
        if after is None:
            del forgets[request]
        else:
            forgets[request] = dataclasses.replace(current, after=after, forgotten=forgotten)
        if forgets:
            state.set(FORGETTING_KEY, _encode_pending(forgets))
        elif state.get(FORGETTING_KEY) is not None:
            state.delete(FORGETTING_KEY)
        emits = [self._recrawl(mark) for mark in gone] if current.recrawl else []
        if after is not None:
            then = Control("continue", request).encode()
            return [*emits, Emit(self._shards_topic, then, CONTROL_KEY, shard)]
        return [*emits, self._reply(request, shard, forgotten, None)]

    def _named(self, selection: Selection, shard: int, state: BatchState, gone: list[bytes]) -> None:
        shards = self._shard_count()
        for key in selection.keys:
            value = state.get(key) if partition_for(key, shards) == shard else None
            if value is not None:
                state.delete(key)
                gone.append(value)

    def _scan(self, current: Pending, state: BatchState, gone: list[bytes]) -> bytes | None:
        """Delete the marks the forget selects among the next ``part_entries`` of the shard, and those
        written in the open transaction (into ``gone``); the last fingerprint scanned when more
        remain, else None."""
        writes, store = state.writes, state.store
        for key, value in list(writes.items()):  # marks of this transaction, not yet in the store
            if (len(key) == KEY_BYTES and value is not None and store.get(key) is None
                    and current.selects(key, value)):
                state.delete(key)
                gone.append(value)
        previous = current.after
        for scanned, (key, value) in enumerate(_stored_marks(state, current.after)):
            if scanned == self._part_entries:
                return previous
            previous = key
            now = writes.get(key, value)
            if now is not None and current.selects(key, now):
                state.delete(key)
                gone.append(now)
        return None

    def _recrawl(self, mark: bytes) -> Emit:
        """A URL let go, back to the frontier: its next sighting, now (``forget --recrawl``)."""
        crawl, url = canonical.unscoped(scoped_url(mark) or "")
        record = {"url": url, "crawl": crawl or None,
                  "discovered_at": records.rfc3339(datetime.fromtimestamp(self._clock_ms() / 1000, UTC))}
        value = records.encode(RecordKind.FRONTIER_URL, record)
        return Emit(self._frontier, value, canonical.host_of(url).encode())

    def _reply(self, request: str, shard: int, forgotten: int, error: str | None) -> Emit:
        value = orjson.dumps({"request": request, "shard": shard, "forgotten": forgotten, "error": error})
        return Emit(self._replies, value, request.encode())


def _stored_marks(state: BatchState, after: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The shard's committed marks in key order, those after ``after``."""
    for key, value in state.store.items():
        if len(key) == KEY_BYTES and key > after:
            yield key, value


class UrlDedupMove(KeyedMove):
    """Marks move by fingerprint (:class:`KeyedMove`); a forget under way cannot move: its scan
    position and the records of its next parts are the old shards'."""

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        if key == FORGETTING_KEY:
            raise ReshardRefused("a forget is still under way in the old shards: run the stage's workers "
                                 "(with --drain) until it is done, then reshard")
        return super().place(old_shard, key, value)
