"""The gather step: a page waits at its gather shard for its replies, notices and horizon.

:class:`Gatherer` is the processor of the :class:`PageWaits`, :class:`Reply`, :class:`Notice`,
:class:`Progress`, :class:`VouchedProgress` and :class:`Drain` records
(:mod:`streams.stages.content_seen.shard_records`); the functions below, and
:mod:`streams.stages.content_seen.waiting`'s for what a page has heard, are the state they keep.

State keys of a gather shard (besides the block tables, :mod:`streams.stages.content_seen.buckets`):

- ``p`` + order: the waiting page's head (:mod:`streams.stages.content_seen.waiting`);
- ``w`` + order: a queued page's :class:`~streams.stages.content_seen.waiting.Replies`: its replies
  so far and expected, the best earlier page met in its replies and notices, and its first
  capture, the earliest earlier capture of its payload met in its payload reply and notices
  (:mod:`streams.stages.content_seen.payloads`);
- ``v`` + order: the first capture of a page queued by an earlier version, whose ``w`` has no room
  for it (read and deleted at its verdict; none is written now);
- ``e`` + order: replies probed on this worker before their page's record arrived, taken into its
  ``w`` when it does (:func:`~streams.stages.content_seen.waiting.hear_early`);
- ``q`` + number: the page queued under that number: its order key, then its own input partition
  and offset + 1 (``o``) or, once taken, its horizon (``h``);
- ``meta:gather``: the shard's :class:`~streams.stages.content_seen.horizon.GatherView` (each
  shard's progress, the log ends); ``meta:queue``: the queue's bounds (:class:`Queue`);
  ``meta:horizons``: how far along the queue horizons are taken (:func:`_take_horizons`).

A page is decided when the front of the queue reaches it and its horizon is covered
(:mod:`streams.stages.content_seen.horizon`), by the processor of the progress or drain record that
covered it, in the same transaction (:meth:`Decider.decide_covered
<streams.stages.content_seen.decide.Decider.decide_covered>`): a page whose output its topic refuses
becomes a dead letter alone, the others decided with it keep theirs. (Until 2026-11-28 a gather shard
sent itself a :class:`Decide` record per page, a commit and a fetch more for every page decided this
way; such records still in a topic are decided as before.) The same holds offline, where the one
shard's progress follows each input line.
"""

from __future__ import annotations

import functools
import struct
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from streams.errors import RecordRejected
from streams.runtime.api import BatchState, Emit, InternalStream, Message, On, Table
from streams.runtime.extras import OwnedShards, starts_afresh
from streams.stages.content_seen.buckets import ORDER_BYTES
from streams.stages.content_seen.horizon import (
    GatherView,
    InputId,
    Offsets,
    RoutingView,
    covered,
    decode_horizon,
    encode_horizon,
)
from streams.stages.content_seen.local import Ownership
from streams.stages.content_seen.shard_records import (
    Drain,
    Notice,
    PageWaits,
    PayloadNotice,
    PayloadReply,
    Progress,
    Reply,
    VouchedProgress,
)
from streams.stages.content_seen.waiting import (
    DRAIN_FIRST,
    PageCache,
    decode_head,
    hear,
    hear_early,
    heard_on_arrival,
    notice,
    replies,
    reply,
    source_of,
)

GATHER_KEY: Final = b"meta:gather"
QUEUE_KEY: Final = b"meta:queue"
_QUEUE_FORMAT: Final = struct.Struct(">QQ?")  # a Queue: head, tail, draining
HORIZONS_KEY: Final = b"meta:horizons"  # the first queue entry whose horizon may not be taken yet
_NUMBER: Final = struct.Struct(">Q")
_OWN, _TAKEN = b"o", b"h"  # a queue entry holds the page's own offset, or its horizon
# The queue waits like its pages; the progress views and queue bounds describe the old shards.
TABLES: Final = {"queue": Table(b"q", DRAIN_FIRST), "gather progress": Table(GATHER_KEY, starts_afresh),
                 "queue bounds": Table(QUEUE_KEY, starts_afresh),
                 "horizons": Table(HORIZONS_KEY, starts_afresh)}
DECISIONS_PER_RECORD: Final = 1000  # pages a progress or drain record takes off the queue (the rest: a drain)


@dataclass(slots=True)
class Queue:
    """The waiting pages, numbered in arrival order from ``head`` (the front) to ``tail`` (the next
    number); ``draining``: a record asking to go on deciding is on its way. Apart from the view, so
    that a page's arrival reads and writes 17 bytes."""

    head: int = 0
    tail: int = 0
    draining: bool = False

    def __init__(self, head: int = 0, tail: int = 0, draining: bool = False) -> None:
        self.head = head
        self.tail = tail
        self.draining = draining

    def encode(self) -> bytes:
        return _QUEUE_FORMAT.pack(self.head, self.tail, self.draining)

    @classmethod
    def decode(cls, raw: bytes | None) -> Queue:
        return cls(*_QUEUE_FORMAT.unpack(raw)) if raw else cls()


def queue_key(number: int) -> bytes:
    return b"q" + _NUMBER.pack(number)


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a page's arrival found: ``all_in``, its replies all came before it; ``first``, it is the
    only page queued, so its arrival may have put a covered horizon at the queue's front."""

    all_in: bool
    first: bool


def arrive(state: BatchState, order: bytes, stored_head: bytes, tables: int, place: InputId,
           offset: int, shard_count: int, seed: bytes = b"") -> Arrival:
    """A page arrives to wait for its replies: its head as state, and its place at the back of the
    queue with its own input partition (``place``) and offset, or at once its horizon
    (:func:`_horizon_at_arrival`) when its router reported its log ends (``seed``). It takes in the
    replies that came before it (:func:`~streams.stages.content_seen.waiting.hear_early`: probes of
    another worker's, or through the topic of a shard not settled here)."""
    state.set(b"p" + order, stored_head)
    queue = Queue.decode(state.get(QUEUE_KEY))
    number, queue.tail = queue.tail, queue.tail + 1
    own = {place: offset + 1}
    known = decode_horizon(seed) if seed else None
    horizon = None if known is None else _horizon_at_arrival(state, queue, number, own, known, shard_count)
    entry = _OWN + encode_horizon(own) if horizon is None else _TAKEN + encode_horizon(horizon)
    state.set(queue_key(number), order + entry)
    heard = heard_on_arrival(state, order, tables)
    state.set(b"w" + order, heard.encode())
    state.set(QUEUE_KEY, queue.encode())
    return Arrival(heard.count >= tables, number == queue.head)


def _horizon_at_arrival(state: BatchState, queue: Queue, number: int, own: dict[InputId, int],
                        seed: Mapping[InputId, int], shard_count: int) -> dict[InputId, int] | None:
    """The horizon of a page arriving as entry ``number``, taken now: the log ends known here, raised
    to the ones its router reported last (``seed``, kept as known from now on) and to its own offset.

    Its router's last marks name every input record of its own partitions that was in the topic when
    it routed the page (a batch's worth at most excepted, as for other workers' partitions), so the
    page need not wait for its replies first and then for the log ends known by then, which had
    moved on with every worker's input (with two workers, a hop or two more for most pages). Taken
    only when every earlier entry's horizon is (so horizons still grow along the queue) and every
    shard has reported on every input partition (so the log ends of a backlog are known); else
    None, and it is taken as before (:func:`_take_horizons`)."""
    raw = state.get(GATHER_KEY)
    view, coverage = _known(raw, shard_count)
    if any(end > view.ends.get(place, -1) for place, end in seed.items()):
        view = GatherView.decode(raw)  # the cached one is shared: never changed
        view.learn_ends(seed)
        state.set(GATHER_KEY, view.encode())
    taken_through = max(queue.head, _NUMBER.unpack(state.get(HORIZONS_KEY) or _NUMBER.pack(0))[0])
    if taken_through != number or coverage is None:
        return None
    state.set(HORIZONS_KEY, _NUMBER.pack(number + 1))
    return view.horizon(own, seed)


@functools.lru_cache(maxsize=32)
def _known(raw: bytes | None, shard_count: int) -> tuple[GatherView, Offsets | None]:
    """A gather shard's view and coverage, decoded once for as long as its state holds them: a
    backlog's pages arrive hundreds a batch, and decoding each time cost about a tenth of the
    worker's time (profiled). Read only: a changed view is decoded afresh."""
    view = GatherView.decode(raw)
    return view, view.coverage(shard_count)


def waiting_head(state: BatchState, order: bytes) -> dict[str, Any]:
    """The head of a page waiting here (``{}`` when none is)."""
    return decode_head(state.get(b"p" + order) or b"{}")


def ready(state: BatchState, shard_count: int, limit: int, progress: Sequence[tuple[int, RoutingView]],
          drained: bool = False) -> tuple[list[bytes], bool]:
    """Take the shards' ``progress`` (each shard's number and view; none when ``drained``: a drain
    record asking to go on), then take off the front of the queue the pages whose horizons are
    covered, at most ``limit``: their order keys (each is then decided on its own, :func:`take`:
    by a record, or at once on the local path); and whether to send a drain record (more may be
    ready, and none is on its way)."""
    raw = state.get(GATHER_KEY)
    if progress:
        view = GatherView.decode(raw)
        for shard, routing in progress:
            view.merge(shard, routing)
        state.set(GATHER_KEY, view.encode())
        coverage = view.coverage(shard_count)
    else:  # a drain, or a page arriving first: the view as it was (read only)
        view, coverage = _known(raw, shard_count)
    queue = Queue.decode(state.get(QUEUE_KEY))
    changed = drained and queue.draining
    if changed:
        queue.draining = False  # this was the drain record on its way
    found: list[bytes] = []
    if coverage is not None:
        _take_horizons(state, queue, view, coverage)
    while coverage is not None and queue.head < queue.tail and len(found) < limit:
        key = queue_key(queue.head)
        entry = state.get(key)
        if entry is None:
            raise RecordRejected("invalid_shard_record", f"queue entry {queue.head} missing")
        order, taken = entry[:ORDER_BYTES], entry[ORDER_BYTES:ORDER_BYTES + 1]
        if taken == _OWN or not covered(decode_horizon(entry[ORDER_BYTES + 1:]), coverage):
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


def _take_horizons(state: BatchState, queue: Queue, view: GatherView,
                   coverage: Mapping[InputId, int]) -> None:
    """Take the horizon of each queued page whose own probes are answered (its own offset covered),
    in queue order from the first page without one, up to the first page whose own probes are not.

    Not only the front's: a page whose horizon was taken only once it reached the front took the
    log ends known then, which had moved on with the input while the pages before it waited, so
    each page waited for the coverage to catch up with a newer horizon than the last, a hop or two
    each, and at a steady input the queue grew (two workers: seconds). Taken in queue order, from
    log ends that only grow, horizons still grow along the queue, so the covered pages are still
    the first ones (module docstring of :mod:`streams.stages.content_seen.horizon`). Where the
    walk stopped is kept (``meta:horizons``), so each entry is read here once or twice; an entry
    found taken already (by a version that took them at the front only) is passed over."""
    number = max(queue.head, _NUMBER.unpack(state.get(HORIZONS_KEY) or _NUMBER.pack(0))[0])
    start = number
    while number < queue.tail:
        key = queue_key(number)
        entry = state.get(key)
        if entry is None:
            raise RecordRejected("invalid_shard_record", f"queue entry {number} missing")
        if entry[ORDER_BYTES:ORDER_BYTES + 1] == _OWN:
            own = decode_horizon(entry[ORDER_BYTES + 1:])
            if not covered(own, coverage):
                break
            state.set(key, entry[:ORDER_BYTES] + _TAKEN + encode_horizon(view.horizon(own)))
        number += 1
    if number != start:
        state.set(HORIZONS_KEY, _NUMBER.pack(number))


class Gatherer:
    """The processor of the records a page's gather shard takes but a :class:`Decide` (module
    docstring), and where a reply or notice goes (:meth:`tell`, the stage's local path:
    :mod:`streams.stages.content_seen.local`)."""

    def __init__(self, shards: InternalStream, owned: OwnedShards, ownership: Ownership, pages: PageCache,
                 topic_index: Mapping[str, int], races: Counter[str],
                 decide: Callable[[BatchState, bytes], list[Emit]]) -> None:
        """``topic_index``: each input topic's number among the stage's; ``races``: earlier pages met
        in time, or late (a page decided already), counted; ``decide``: a page whose horizon is
        covered, decided (:meth:`streams.stages.content_seen.decide.Decider.decide_covered`)."""
        self._decide = decide
        self._shards = shards
        self._owned = owned
        self._ownership = ownership
        self._pages = pages
        self._topic_index = topic_index
        self.races = races

    def processors(self) -> list[On[Any]]:
        return [On(PageWaits, self.page), On(Reply, self.reply), On(Notice, self.notice),
                On(PayloadReply, self.payload_reply), On(PayloadNotice, self.payload_notice),
                On(Progress, self.progress), On(VouchedProgress, self.vouched_progress),
                On(Drain, self.drain)]

    def page(self, record: PageWaits, message: Message, state: BatchState) -> list[Emit]:
        """A page waits for its replies (and its horizon): its head as state, the input record sent
        along kept in memory (a page decided at once, on the runtime's local path, sends none: its
        router kept it). Before any of its probes, it precedes the replies sent as records; the ones
        probed before it came (a probe record of another partition) are taken in.

        The queue is looked at again when the page is its only one (a page covered already is
        decided now): the progress that covers it may have been given here directly before it
        arrived (:mod:`.relay`, by a worker none of whose shards it was probed in, so no reply of
        them followed it as a record), and then no other record would come to decide it, a
        draining stage's last page above all. Behind other pages it waits for them: every record
        that can cover the queue's front looks at the queue (progress, drain, and this), so a front
        left waiting is not covered (or a drain record is on its way to it), and an arrival behind
        it changes neither it nor the coverage. (Looking at the queue at every arrival cost about a
        tenth of the stage's pages per second, a decode of the shard's view each: ``bench.content_ab``.)"""
        head = record.fields()
        source = source_of(head)
        topic = self._topic_index.get(source.topic)
        if topic is None:
            raise RecordRejected("invalid_shard_record", f"a page of {source.topic}, not an input topic")
        if record.carried:
            self._pages.put(source, record.carried)
        place = (topic, source.partition)
        arrival = arrive(state, message.key() or b"", record.head, head["tables"], place, source.offset,
                         self._shards.shards, record.seed)
        if arrival.all_in:
            self._pages.park(source)  # its replies came before it
        return self._take(message.partition() or 0, [], False, state) if arrival.first else []

    def tell(self, order: bytes, told: Reply | Notice | PayloadReply | PayloadNotice) -> list[Emit]:
        """A reply or notice for the page of ``order``: applied at once when its gather shard is owned
        here and the page waits there (the local path); a reply for a page not there yet (its record
        is on its way: a reply cannot follow its page's verdict) is kept there for it
        (:func:`~streams.stages.content_seen.waiting.hear_early`); anything else is sent as a
        record, which reaches the gather shard after the page's own record. A record to a gather
        shard owned here (a notice for a page not there: on its way, or decided) taints this
        worker's token (:meth:`Ownership.taint`): giving progress there directly waits until it
        has been processed. A worker alone drops such a notice: its page was decided."""
        shards = self._shards
        gather = shards.shard_of(order)
        state = self._owned.state(gather)
        if state is not None:
            heard = replies(state, order)
            if heard is not None:
                if isinstance(told, Reply):
                    self._all_in(state, order, hear(state, order, heard, told.best, None, True))
                elif isinstance(told, PayloadReply):
                    self._all_in(state, order, hear(state, order, heard, told.best, told.first, True))
                elif isinstance(told, PayloadNotice):
                    hear(state, order, heard, None, told.first, False)
                else:
                    hear(state, order, heard, told.match, None, False)
                    self.races["in_time"] += 1
                return []
            if isinstance(told, Reply | PayloadReply):
                hear_early(state, order, told.best, told.first if isinstance(told, PayloadReply) else None)
                return []
            if self._ownership.alone():
                self.races["late"] += isinstance(told, Notice)
                return []
            self._ownership.taint()
        return [shards.send(told, order, gather)]

    def reply(self, record: Reply, message: Message, state: BatchState) -> list[Emit]:
        order = message.key() or b""
        self._all_in(state, order, reply(state, order, record.best))
        return []

    def _all_in(self, state: BatchState, order: bytes, done: bool) -> None:
        """A reply counted; once all are in (``done``), the page waits for its horizon only: its
        record may leave memory first."""
        if done:
            self._pages.park(source_of(waiting_head(state, order)))

    def payload_reply(self, record: PayloadReply, message: Message, state: BatchState) -> list[Emit]:
        order = message.key() or b""
        self._all_in(state, order, reply(state, order, record.best, record.first))
        return []

    def payload_notice(self, record: PayloadNotice, message: Message, state: BatchState) -> list[Emit]:
        """Not counted among the races: its page's text notice is (a byte-identical copy is an exact one)."""
        notice(state, message.key() or b"", first=record.first)
        return []

    def notice(self, record: Notice, message: Message, state: BatchState) -> list[Emit]:
        self.races["in_time" if notice(state, message.key() or b"", record.match) else "late"] += 1
        return []

    def progress(self, record: Progress, message: Message, state: BatchState) -> list[Emit]:
        partition = message.partition() or 0
        self._ownership.vouch(partition, record.token, state)
        return self._take(partition, [(record.shard, record.view)], False, state)

    def vouched_progress(self, record: VouchedProgress, message: Message, state: BatchState) -> list[Emit]:
        """Progress this shard vouched for (:mod:`streams.stages.content_seen.local`, (3)): taken as a
        progress record's, with no token to keep (it is decided at once on the runtime's local path,
        so it vouches for nothing newer than the record that vouched for it)."""
        return self._take(message.partition() or 0, record.told, False, state)

    def drain(self, record: Drain, message: Message, state: BatchState) -> list[Emit]:
        return self._take(message.partition() or 0, [], True, state)

    def _take(self, shard: int, progress: Sequence[tuple[int, RoutingView]], drained: bool,
              state: BatchState) -> list[Emit]:
        """Take the front of the queue off as far as its horizons are covered, each page decided at
        once, and ask for more with a drain record past the limit.

        At once, not by a decide record to this same shard (as before): a covered horizon means
        every reply and notice that could change the page's verdict is in this shard's state, so the
        verdict is the same either way, and a record to itself cost every page decided through
        progress records (any page of a worker that is not alone) one more commit and fetch."""
        found, more = ready(state, self._shards.shards, DECISIONS_PER_RECORD, progress, drained)
        emits = [emit for order in found for emit in self._decide(state, order)]
        shards = self._shards
        if more:
            emits.append(shards.send(Drain(), b"drain", shard))
        return emits
