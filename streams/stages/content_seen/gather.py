"""The gather shard of a page: its head, its replies and notices, and the queue it waits in.

State keys of a gather shard (besides the block tables, :mod:`streams.stages.content_seen.buckets`):

- ``p`` + order: the waiting page's head (:mod:`streams.stages.content_seen.waiting`);
- ``w`` + order: a queued page's replies so far and expected, and the best earlier page met in its
  replies and notices; ``a`` + order: the same for a page decided on its replies alone (offline,
  or a page of a topic that is not one of the stage's route topics, which no horizon covers);
- ``q`` + number: the page queued under that number: its order key, then its own input partition
  and offset + 1 (``o``) or, once taken, its horizon (``h``);
- ``meta:gather``: the shard's :class:`~streams.stages.content_seen.horizon.GatherView` (each
  shard's progress, the log ends); ``meta:queue``: the queue's bounds (:class:`Queue`).

Through Kafka a page is decided when the front of the queue reaches it and its horizon is covered
(:mod:`streams.stages.content_seen.horizon`), by a *decide* record of its own that the gather shard
sends itself: one page's outputs per shard record, so a page whose output its topic refuses becomes
a dead letter alone (:mod:`streams.runtime.outputs`). Offline, and for a page of a topic that is not
one of the stage's route topics (an ``a`` key), a page is decided when its last reply is in.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any

from streams.errors import RecordRejected
from streams.runtime.batch import BatchState
from streams.stages.content_seen.buckets import ORDER_BYTES, Match
from streams.stages.content_seen.horizon import (
    GatherView,
    InputId,
    RoutingView,
    covered,
    decode_horizon,
    encode_horizon,
)
from streams.stages.content_seen.waiting import (
    better,
    decode_head,
    decode_match,
    decode_progress,
    encode_progress,
)

log = logging.getLogger(__name__)

GATHER_KEY = b"meta:gather"
QUEUE_KEY = b"meta:queue"
_NUMBER = struct.Struct(">Q")
_OWN, _TAKEN = b"o", b"h"  # a queue entry holds the page's own offset, or its horizon


@dataclass(slots=True)
class Queue:
    """The waiting pages, numbered in arrival order from ``head`` (the front) to ``tail`` (the next
    number); ``draining``: a record asking to go on deciding is on its way. Apart from the view, so
    that a page's arrival reads and writes 17 bytes."""

    head: int = 0
    tail: int = 0
    draining: bool = False

    _FORMAT = struct.Struct(">QQ?")

    def encode(self) -> bytes:
        return self._FORMAT.pack(self.head, self.tail, self.draining)

    @classmethod
    def decode(cls, raw: bytes | None) -> Queue:
        return cls(*cls._FORMAT.unpack(raw)) if raw else cls()


@dataclass(frozen=True, slots=True)
class Ready:
    """A page whose verdict can be given now: its head and its best match."""

    head: dict[str, Any]
    best: Match | None


def queue_key(number: int) -> bytes:
    return b"q" + _NUMBER.pack(number)


def arrive(state: BatchState, order: bytes, stored_head: bytes, tables: int,
           place: InputId | None, offset: int) -> None:
    """A page arrives to wait for its replies: its head as state, and (through Kafka, ``place`` is
    its input partition) its place at the back of the queue."""
    state.set(b"p" + order, stored_head)
    if place is None:
        state.set(b"a" + order, encode_progress(0, tables, None))
        return
    queue = Queue.decode(state.get(QUEUE_KEY))
    number, queue.tail = queue.tail, queue.tail + 1
    state.set(queue_key(number), order + _OWN + encode_horizon({place: offset + 1}))
    state.set(b"w" + order, encode_progress(0, tables, None))
    state.set(QUEUE_KEY, queue.encode())


def reply(state: BatchState, order: bytes, body: bytes) -> Ready | bool:
    """Count a reply. A queued page waits for its horizon: whether all its replies are in now. A page
    decided on its replies alone (offline, or of a topic no horizon covers): the page when that was
    its last reply, else False."""
    queued = state.get(b"w" + order)
    if queued is not None:
        count, tables, best = decode_progress(queued)
        state.set(b"w" + order, encode_progress(count + 1, tables, better(best, decode_match(body))))
        return count + 1 == tables
    progress = state.get(b"a" + order)
    stored = state.get(b"p" + order) if progress is not None else None
    if progress is None or stored is None:
        raise RecordRejected("orphan_reply", f"no waiting page for order key {order.hex()}")
    count, tables, best = decode_progress(progress)
    count, best = count + 1, better(best, decode_match(body))
    if count < tables:
        state.set(b"a" + order, encode_progress(count, tables, best))
        return False
    state.delete(b"p" + order)
    state.delete(b"a" + order)
    return Ready(decode_head(stored), best)


def waiting_head(state: BatchState, order: bytes) -> dict[str, Any]:
    """The head of a page waiting here (``{}`` when none is)."""
    return decode_head(state.get(b"p" + order) or b"{}")


def notice(state: BatchState, order: bytes, body: bytes) -> bool:
    """An earlier page met this queued one in a bucket: kept as its best match if better. False when
    the page was decided already (the notice came after its horizon: it stays as decided)."""
    progress = state.get(b"w" + order)
    if progress is None:
        return False
    count, tables, best = decode_progress(progress)
    found = decode_match(body)
    if better(best, found) is not best:
        state.set(b"w" + order, encode_progress(count, tables, found))
    return True


def ready(state: BatchState, shard_count: int, limit: int,
          progress: tuple[int, RoutingView] | None) -> tuple[list[bytes], bool]:
    """Take a shard's ``progress`` (None: a drain record asking to go on), then take off the front of
    the queue the pages whose horizons are covered, at most ``limit``: their order keys (each is
    then decided by a record of its own, :func:`take`); and whether to send a drain record (more
    may be ready, and none is on its way)."""
    view = GatherView.decode(state.get(GATHER_KEY))
    if progress is not None:
        view.merge(*progress)
        state.set(GATHER_KEY, view.encode())
    queue = Queue.decode(state.get(QUEUE_KEY))
    changed = progress is None and queue.draining
    if changed:
        queue.draining = False  # this was the drain record on its way
    found: list[bytes] = []
    coverage = view.coverage(shard_count)
    while coverage is not None and queue.head < queue.tail and len(found) < limit:
        key = queue_key(queue.head)
        entry = state.get(key)
        if entry is None:
            raise RecordRejected("invalid_shard_record", f"queue entry {queue.head} missing")
        order, taken = entry[:ORDER_BYTES], entry[ORDER_BYTES:ORDER_BYTES + 1]
        wanted = decode_horizon(entry[ORDER_BYTES + 1:])
        if not covered(wanted, coverage):
            break
        if taken == _OWN:  # its own probes are answered: now its horizon can be taken, once
            wanted = view.horizon(wanted)
            state.set(key, order + _TAKEN + encode_horizon(wanted))
            if not covered(wanted, coverage):
                break
        found.append(order)
        state.delete(key)
        queue.head += 1
        changed = True
    drain = queue.head < queue.tail and len(found) >= limit and not queue.draining
    queue.draining = queue.draining or drain
    if changed:
        state.set(QUEUE_KEY, queue.encode())
    return found, drain


def take(state: BatchState, order: bytes) -> Ready:
    """A page off the queue, to be decided now: its head and best match (removed from the state)."""
    stored, progress = state.get(b"p" + order), state.get(b"w" + order)
    if stored is None or progress is None:
        raise RecordRejected("invalid_shard_record", f"queued page {order.hex()} has no head")
    count, tables, best = decode_progress(progress)
    if count < tables:  # every reply precedes the progress that covers the page: a lost probe
        log.warning("page %s decided with %d of %d replies", order.hex(), count, tables)
    state.delete(b"p" + order)
    state.delete(b"w" + order)
    return Ready(decode_head(stored), best)
