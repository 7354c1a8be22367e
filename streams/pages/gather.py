"""The gather shard of a page: its head, its replies and notices, and the queue it waits in.

State keys of a gather shard (besides the block tables, :mod:`streams.pages.buckets`):

- ``p`` + order: the waiting page's head (:mod:`streams.pages.waiting`);
- ``w`` + order: a queued page's replies so far and expected, and the best earlier page met in its
  replies and notices; ``a`` + order: the same for a page decided on its replies alone (offline,
  or one that arrived before the queue existed);
- ``q`` + number: the page queued under that number: its order key, then its own input partition
  and offset + 1 (``o``) or, once taken, its horizon (``h``);
- ``meta:gather``: the shard's :class:`~streams.pages.horizon.GatherView` (each shard's progress,
  the log ends, the queue's bounds).

Through Kafka a page is decided when the front of the queue reaches it and its horizon is covered
(:mod:`streams.pages.horizon`); offline, and for pages that arrived before this protocol (an ``a``
key), when its last reply is in, as before.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any

from streams.errors import RecordRejected
from streams.pages.buckets import ORDER_BYTES, Match
from streams.pages.horizon import GatherView, InputId, RoutingView, covered, decode_horizon, encode_horizon
from streams.pages.waiting import better, decode_head, decode_match, decode_progress, encode_progress
from streams.runtime.batch import BatchState

log = logging.getLogger(__name__)

GATHER_KEY = b"meta:gather"
_NUMBER = struct.Struct(">Q")
_OWN, _TAKEN = b"o", b"h"  # a queue entry holds the page's own offset, or its horizon


@dataclass(frozen=True, slots=True)
class Ready:
    """A page whose verdict can be given now: its head (decoded, and as stored) and its best match."""

    head: dict[str, Any]
    stored: bytes
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
    view = GatherView.decode(state.get(GATHER_KEY))
    number, view.tail = view.tail, view.tail + 1
    state.set(queue_key(number), order + _OWN + encode_horizon({place: offset + 1}))
    state.set(b"w" + order, encode_progress(0, tables, None))
    state.set(GATHER_KEY, view.encode())


def reply(state: BatchState, order: bytes, body: bytes) -> Ready | bool:
    """Count a reply. A queued page waits for its horizon: whether all its replies are in now. A page
    decided on its replies alone (offline, or one that arrived before the queue): the page when
    that was its last reply, else False."""
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
    return Ready(decode_head(stored), stored, best)


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
          progress: tuple[int, RoutingView] | None) -> tuple[list[Ready], bool]:
    """Take a shard's ``progress`` (None: a drain record asking to go on), then the pages at the
    front of the queue whose horizons are covered, at most ``limit`` (removed from the state); and
    whether to send a drain record (more may be ready, and none is on its way)."""
    view = GatherView.decode(state.get(GATHER_KEY))
    changed = progress is not None or view.draining
    if progress is not None:
        view.merge(*progress)
    else:
        view.draining = False  # this was the drain record on its way
    found: list[Ready] = []
    coverage = view.coverage(shard_count)
    while coverage is not None and view.head < view.tail and len(found) < limit:
        key = queue_key(view.head)
        entry = state.get(key)
        if entry is None:
            raise RecordRejected("invalid_shard_record", f"queue entry {view.head} missing")
        order, taken = entry[:ORDER_BYTES], entry[ORDER_BYTES:ORDER_BYTES + 1]
        wanted = decode_horizon(entry[ORDER_BYTES + 1:])
        if not covered(wanted, coverage):
            break
        if taken == _OWN:  # its own probes are answered: now its horizon can be taken, once
            wanted = view.horizon(wanted)
            state.set(key, order + _TAKEN + encode_horizon(wanted))
            if not covered(wanted, coverage):
                break
        found.append(_take(state, order))
        state.delete(key)
        view.head += 1
        changed = True
    drain = view.head < view.tail and len(found) >= limit and not view.draining
    view.draining = view.draining or drain
    if changed:
        state.set(GATHER_KEY, view.encode())
    return found, drain


def _take(state: BatchState, order: bytes) -> Ready:
    stored, progress = state.get(b"p" + order), state.get(b"w" + order)
    if stored is None or progress is None:
        raise RecordRejected("invalid_shard_record", f"queued page {order.hex()} has no head")
    count, tables, best = decode_progress(progress)
    if count < tables:  # every reply precedes the progress that covers the page: a lost probe
        log.warning("page %s decided with %d of %d replies", order.hex(), count, tables)
    state.delete(b"p" + order)
    state.delete(b"w" + order)
    return Ready(decode_head(stored), stored, best)
