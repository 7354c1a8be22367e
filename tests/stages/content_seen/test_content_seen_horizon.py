"""Horizons (streams/stages/content_seen/horizon.py) and the gather shard's queue
(streams/stages/content_seen/gather.py): progress only grows, a page is decided once its horizon is
covered, the queue is decided from its front."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import RecordRejected
from streams.runtime.batch import BatchState
from streams.runtime.store import MemoryStore
from streams.stages.content_seen import gather, waiting
from streams.stages.content_seen.buckets import Match, order_key
from streams.stages.content_seen.horizon import (
    GatherView,
    RoutingView,
    covered,
    decode_horizon,
    encode_horizon,
)
from streams.stages.content_seen.payloads import Capture
from streams.stages.content_seen.shard_records import PageWaits
from streams.stages.content_seen.waiting import Replies

places = st.tuples(st.integers(0, 3), st.integers(0, 40))
offset_maps = st.dictionaries(places, st.integers(0, 2**40), max_size=8)
views = st.builds(RoutingView, st.dictionaries(st.integers(0, 3), st.integers(1, 41), max_size=3),
                  offset_maps, offset_maps)


@given(views)
def test_views_round_trip(view: RoutingView) -> None:
    assert RoutingView.decode(view.encode()) == view
    assert decode_horizon(encode_horizon(view.routed)) == view.routed


@given(views, views)
def test_merging_only_raises_offsets_and_is_idempotent(first: RoutingView, second: RoutingView) -> None:
    merged = RoutingView.decode(first.encode())
    merged.merge(second)
    for place, offset in {**first.routed, **second.routed}.items():
        highest = max(first.routed.get(place, -1), second.routed.get(place, -1))
        assert merged.routed[place] == highest >= offset
    assert merged.merge(second) is False  # nothing new the second time
    assert merged.merge(first) is False


def _view(routed: dict[tuple[int, int], int], ends: dict[tuple[int, int], int] | None = None) -> RoutingView:
    return RoutingView({0: 2}, routed, ends or routed)


def test_coverage_waits_for_every_shard_and_every_partition() -> None:
    view = GatherView()
    assert view.coverage(2) is None
    view.merge(0, _view({(0, 0): 5, (0, 1): 9}))
    assert view.coverage(2) is None  # shard 1 has not reported
    view.merge(1, _view({(0, 0): 7}))
    assert view.coverage(2) is None  # shard 1 knows nothing of partition 1
    view.merge(1, _view({(0, 1): 3}))
    assert view.coverage(2) == {(0, 0): 5, (0, 1): 3}  # the least of the shards'


def test_a_horizon_is_the_log_ends_known_and_at_least_the_page_itself() -> None:
    view = GatherView()
    view.merge(0, _view({(0, 0): 5, (0, 1): 9}, {(0, 0): 50, (0, 1): 9}))
    assert view.horizon({(0, 1): 12}) == {(0, 0): 50, (0, 1): 12}
    assert covered({(0, 0): 50}, {(0, 0): 50, (0, 1): 0})
    assert not covered({(0, 0): 50, (0, 2): 1}, {(0, 0): 60})


# -- the queue ----------------------------------------------------------------------------------------

PLACE = (0, 0)


def _arrive(store: MemoryStore, when: int, offset: int, tables: int = 2, seed: int | None = None) -> bytes:
    """A page arriving; ``seed``: the log end of ``PLACE`` its router reported last."""
    order = order_key(when, 0, offset)
    state = BatchState(store)
    told = b"" if seed is None else encode_horizon({PLACE: seed})
    gather.arrive(state, order, b'{"url": "https://a.example/%d"}' % offset, tables, PLACE, offset, 1, told)
    store.apply(state.writes, None)
    return order


def _progress(store: MemoryStore, shard: int, routed: int, ends: int, limit: int = 10,
              ) -> tuple[list[waiting.Ready], bool]:
    """The pages a shard's progress makes ready, each then taken as its decide record takes it."""
    state = BatchState(store)
    view = RoutingView({0: 1}, {PLACE: routed}, {PLACE: ends})
    found, drain = gather.ready(state, 1, limit, [(shard, view)])
    ready = [waiting.take(state, order) for order in found]
    store.apply(state.writes, None)
    return ready, drain


def _reply(store: MemoryStore, order: bytes, match: Match | None = None) -> bool:
    state = BatchState(store)
    replied = waiting.reply(state, order, match)
    store.apply(state.writes, None)
    return replied


def test_a_queued_page_is_decided_once_its_horizon_is_covered_with_its_best_match() -> None:
    store = MemoryStore()
    page = _arrive(store, 10, offset=0)
    assert _reply(store, page) is False
    earlier = Match(order_key(1, 0, 5), "https://earlier.example/", 2, False, 200)
    assert _reply(store, page, earlier) is True  # all replies in: it now waits for its horizon only
    assert _progress(store, 0, routed=1, ends=6) == ([], False)  # own offset covered: horizon 6 taken
    state = BatchState(store)
    first = Match(order_key(0, 0, 4), "https://first.example/", 2, False, 200)
    assert waiting.notice(state, page, first)
    store.apply(state.writes, None)
    found, drain = _progress(store, 0, routed=6, ends=6)
    assert [ready.best.url for ready in found if ready.best] == ["https://first.example/"] and not drain
    state = BatchState(store)
    assert not waiting.notice(state, page, earlier)  # too late: decided
    assert store.get(b"p" + page) is None and store.get(b"w" + page) is None


def test_the_queue_is_decided_from_its_front_and_drains_past_its_limit() -> None:
    store = MemoryStore()
    pages = [_arrive(store, 10 + n, offset=n, tables=1) for n in range(5)]
    for page in pages:
        _reply(store, page)
    found, drain = _progress(store, 0, routed=5, ends=5, limit=2)
    assert [ready.head["url"] for ready in found] == ["https://a.example/0", "https://a.example/1"]
    assert drain  # a drain record is to go on
    found, drain = _progress(store, 0, routed=5, ends=5, limit=2)
    assert len(found) == 2 and not drain  # a drain record is on its way already
    state = BatchState(store)
    found, drain = gather.ready(state, 1, 2, [], drained=True)  # the drain record
    assert [waiting.take(state, order).head["url"] for order in found] == ["https://a.example/4"]
    assert not drain


def test_each_page_takes_its_horizon_once_answered_not_once_at_the_front() -> None:
    """A page behind the front takes its horizon when its own probes are answered, from the log
    ends known then: it is decided with the front, not a horizon later (the input moved on)."""
    store = MemoryStore()
    pages = [_arrive(store, 10 + n, offset=n, tables=1) for n in range(2)]
    for page in pages:
        _reply(store, page)
    assert _progress(store, 0, routed=2, ends=5) == ([], False)  # both horizons taken: 5
    assert store.get(gather.HORIZONS_KEY) == (2).to_bytes(8, "big")
    assert _progress(store, 0, routed=3, ends=9) == ([], False)  # more input: horizons stay
    found, _ = _progress(store, 0, routed=5, ends=9)
    assert [ready.head["url"] for ready in found] == ["https://a.example/0", "https://a.example/1"]


def test_horizons_are_taken_in_queue_order_and_past_ones_taken_already() -> None:
    """Not past a page whose own probes are not answered (horizons grow along the queue); an
    entry taken already (by a version that took them at the front only) is passed over."""
    store = MemoryStore()
    pages = [_arrive(store, 10 + n, offset=n, tables=1) for n in (3, 0, 1)]
    for page in pages:
        _reply(store, page)
    assert _progress(store, 0, routed=2, ends=2) == ([], False)  # the front (offset 3) not answered
    assert all(entry[len(pages[0])] == ord("o") for entry in _entries(store))
    state = BatchState(store)
    entry = store.get(gather.queue_key(1)) or b""
    state.set(gather.queue_key(1), entry[:len(pages[1])] + b"h" + encode_horizon({PLACE: 4}))
    store.apply(state.writes, None)
    found, _ = _progress(store, 0, routed=4, ends=4)
    assert [ready.head["url"] for ready in found] == [f"https://a.example/{n}" for n in (3, 0, 1)]


def test_a_page_whose_router_reported_its_log_ends_takes_its_horizon_on_arrival() -> None:
    """Its router's last log ends, raised to its own offset: not the log ends known once its
    replies are in, which include input routed after it (two workers: a hop or two more)."""
    store = MemoryStore()
    first = _arrive(store, 10, offset=0, tables=1, seed=3)
    assert _entries(store)[0][len(first)] == ord("o")  # no shard has reported yet: taken later
    _reply(store, first)
    assert _progress(store, 0, routed=1, ends=3) == ([], False)  # taken now: 3
    second = _arrive(store, 11, offset=3, tables=1, seed=4)
    assert decode_horizon(_entries(store)[1][len(second) + 1:]) == {PLACE: 4}
    _reply(store, second)
    found, _ = _progress(store, 0, routed=4, ends=9)  # input routed after the second page: not waited for
    assert [ready.head["url"] for ready in found] == ["https://a.example/0", "https://a.example/3"]


def test_a_page_takes_its_horizon_on_arrival_only_behind_pages_that_took_theirs() -> None:
    store = MemoryStore()
    _progress(store, 0, routed=0, ends=2)
    waiting = _arrive(store, 10, offset=2, tables=1)  # from a router that reported nothing yet
    _arrive(store, 11, offset=3, tables=1, seed=5)
    assert [entry[len(waiting)] for entry in _entries(store)] == [ord("o"), ord("o")]
    assert gather.GatherView.decode(store.get(gather.GATHER_KEY)).ends == {PLACE: 5}  # known from now on


@given(st.binary(max_size=64), st.binary(max_size=64), offset_maps)
def test_page_records_round_trip_with_and_without_a_seed(head: bytes, carried: bytes,
                                                        seed: dict[tuple[int, int], int]) -> None:
    head = b"{" + head.replace(b"\n", b"")
    record = PageWaits(head, carried, encode_horizon(seed))
    assert PageWaits.decode(record.encode()) == record
    assert PageWaits.decode(head + b"\n" + carried) == PageWaits(head, carried)  # a version before seeds


def _entries(store: MemoryStore) -> list[bytes]:
    queue = gather.Queue.decode(store.get(gather.QUEUE_KEY))
    return [store.get(gather.queue_key(number)) or b"" for number in range(queue.head, queue.tail)]


def test_a_reply_for_a_page_that_is_not_waiting_is_refused() -> None:
    state = BatchState(MemoryStore())
    with pytest.raises(RecordRejected, match="no waiting page"):
        waiting.reply(state, order_key(1, 0, 0), None)


def test_a_notice_for_a_page_that_is_not_queued_changes_nothing() -> None:
    store = MemoryStore()
    state = BatchState(store)
    match = Match(order_key(0, 0, 0), "https://a.example/", 1, False, 256)
    assert not waiting.notice(state, order_key(1, 0, 0), match)
    assert state.writes == {}


# -- what a queued page has heard ---------------------------------------------------------------------

_EARLIER = Match(order_key(1, 0, 5), "https://earlier.example/", 2, False, 200)
_CAPTURE = Capture(order_key(1, 0, 5), "https://earlier.example/", "2026-11-29T07:00:00Z", None)
_FIRST = Capture(order_key(0, 0, 1), "https://first.example/", None, "<urn:uuid:1>")


@pytest.mark.parametrize("heard", [
    Replies(0, 10),
    Replies(3, 10, _EARLIER),
    Replies(10, 10, _EARLIER, _CAPTURE),
    Replies(1, 1, None, _FIRST),
    Replies(2, 10, _EARLIER, None, holds_first=False),  # as an earlier version wrote it
])
def test_what_a_page_heard_reads_back_as_written(heard: Replies) -> None:
    assert Replies.decode(heard.encode()) == heard


def test_a_page_keeps_its_first_capture_with_its_replies_and_no_key_apart() -> None:
    store = MemoryStore()
    page = _arrive(store, 10, offset=0, tables=1)
    state = BatchState(store)
    assert waiting.notice(state, page, first=_CAPTURE)
    assert waiting.reply(state, page, None, _FIRST)  # a payload reply with an earlier capture
    assert waiting.notice(state, page, first=_CAPTURE)  # a later one changes nothing
    assert set(state.writes) == {b"w" + page}
    store.apply(state.writes, None)
    state = BatchState(store)
    ready = waiting.take(state, page)
    assert ready.first == _FIRST and b"v" + page not in state.writes


def test_a_page_an_earlier_version_queued_keeps_its_first_capture_apart() -> None:
    """Its replies were written without room for a first capture: that stays under ``v`` + order,
    is kept earliest there, and is read and deleted at the verdict."""
    store = MemoryStore()
    page = _arrive(store, 10, offset=0, tables=2)
    earlier = struct.pack(">HH", 1, 2) + waiting.encode_match(_EARLIER)  # an earlier version's value
    store.apply({b"w" + page: earlier, b"v" + page: _CAPTURE.encode()}, None)
    state = BatchState(store)
    assert waiting.reply(state, page, None, _FIRST)
    assert Capture.decode(state.writes[b"v" + page]) == _FIRST
    assert Replies.decode(state.writes[b"w" + page]) == Replies(2, 2, _EARLIER, None, holds_first=False)
    store.apply(state.writes, None)
    state = BatchState(store)
    ready = waiting.take(state, page)
    assert (ready.best, ready.first) == (_EARLIER, _FIRST)
    assert state.writes[b"v" + page] is None
