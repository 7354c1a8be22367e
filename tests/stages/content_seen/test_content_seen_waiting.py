"""Waiting pages (streams/stages/content_seen/waiting.py): the page stage keeps a page's head as
state and its input record in memory, sends the record along when another worker decides the page,
reads it back when nobody holds it any more, and still decides pages written in the earlier form."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest

from streams.dev import simweb
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.message import InputPositions, InputReader
from streams.runtime.offline import LineMessage
from streams.runtime.store import MemoryStore
from streams.runtime.topology import shard_handlers
from streams.stages.content_seen.spec import SPEC
from streams.stages.content_seen.stage import ContentSeenSettings, ContentSeenStage
from streams.stages.content_seen.waiting import PageCache, Source
from streams.topics import Topics
from testing.stages import bind

TOPICS = Topics("unit.")
TOPOLOGY = SPEC.topology(TOPICS, "a")


class FakeReader:
    """The input topic, by position; records what was read."""

    def __init__(self, values: dict[Source, bytes]) -> None:
        self.values, self.reads = values, []  # type: list[Source]

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        self.reads.append(Source(topic, partition, offset))
        return self.values.get(Source(topic, partition, offset))

    def close(self) -> None:
        pass


def _messages(seed: int, articles: int) -> list[LineMessage]:
    pages = simweb.crawl(seed=seed, articles=articles)
    return [LineMessage(TOPICS.fetched_pages, number, orjson.dumps(page.record))
            for number, page in enumerate(pages)]


class _Worker:
    """A stage initialised as a worker of the one shard, kept in ``store``, which it owns or not."""

    def __init__(self, store: MemoryStore, owns: bool = True, reader: InputReader | None = None,
                 stage: ContentSeenStage | None = None) -> None:
        self.owned = OwnedShards({0: store} if owns else {})
        self.context, self.processors = bind(stage or ContentSeenStage(), TOPOLOGY, 1, self.owned, reader)
        self.handlers = shard_handlers(TOPOLOGY, self.processors)


def _run(router: _Worker, decider: _Worker, messages: list[LineMessage]) -> list[Emit]:
    """Route each message with ``router``, decide every internal record with ``decider`` (which owns
    the shard), in the order sent, each message a transaction whose callbacks run last, as offline.
    The outputs, in order."""
    outputs: list[Emit] = []
    for message in messages:
        states = decider.owned.begin()
        place = (message.topic(), 0)
        positions: InputPositions | None = InputPositions({place: message.offset() + 1},
                                                          {place: message.offset() + 1}, {message.topic(): 1})
        pending = deque(router.processors.route(message))
        while True:  # the callbacks run at least once: a page decided on the local path sends nothing
            while pending:
                emit = pending.popleft()
                if emit.topic not in decider.handlers:
                    outputs.append(emit)
                    continue
                state = decider.owned.state(0)
                assert state is not None
                shard_message = LineMessage(emit.topic, 0, emit.value or b"", emit.key)
                pending.extend(decider.handlers[emit.topic](shard_message, state))
            pending.extend(router.context.services.punctuators.run(positions))
            if decider is not router:
                pending.extend(decider.context.services.punctuators.run(None))
            positions = None
            if not pending:
                break
        for state in states.values():
            state.store.apply(state.writes, None)
    return outputs


def _parsed(outputs: list[Emit]) -> list[tuple[str, bytes | None, dict[str, Any]]]:
    return [(emit.topic, emit.key, orjson.loads(emit.value or b"")) for emit in outputs]


def _by_topic(outputs: list[Emit], topic: str) -> list[dict[str, Any]]:
    return [orjson.loads(emit.value or b"") for emit in outputs if emit.topic == topic]


def test_a_page_nobody_holds_is_read_back_from_the_input_topic() -> None:
    """As after a restart, or past the cache's size: the worker deciding has none of the pages in
    memory (a cache of no bytes keeps none)."""
    messages = _messages(seed=8, articles=5)
    alone = _Worker(MemoryStore())
    expected = _run(alone, alone, messages)
    reader = FakeReader({Source(m.topic(), 0, m.offset()): m.value() for m in messages})
    forgetful = _Worker(MemoryStore(), reader=reader,
                        stage=ContentSeenStage(ContentSeenSettings(page_cache_mb=0)))
    found = _run(forgetful, forgetful, messages)
    assert found == expected
    unique = _by_topic(found, TOPICS.unique_pages)
    assert unique and len(reader.reads) == len(unique)  # duplicates need no body: not read


def test_a_page_gone_from_the_input_topic_keeps_its_verdict_and_is_a_dead_letter() -> None:
    messages = _messages(seed=9, articles=2)
    forgetful = _Worker(MemoryStore(), reader=FakeReader({}),  # deleted by retention
                        stage=ContentSeenStage(ContentSeenSettings(page_cache_mb=0)))
    found = _run(forgetful, forgetful, messages)
    unique = [v for v in _by_topic(found, TOPICS.page_verdicts) if v["verdict"] == "unique"]
    letters = _by_topic(found, TOPICS.dead_letters)
    assert unique and not _by_topic(found, TOPICS.unique_pages)
    assert [(letter["reason"], letter["source_topic"]) for letter in letters] == [
        ("page_unavailable", TOPICS.fetched_pages)] * len(unique)


def test_a_page_decided_by_another_worker_takes_its_record_along() -> None:
    """The router owns no shard: the record travels in the page record; no read back is needed."""
    messages = _messages(seed=10, articles=4)
    alone = _Worker(MemoryStore())
    expected = _run(alone, alone, messages)
    store, reader = MemoryStore(), FakeReader({})
    router, decider = _Worker(store, owns=False), _Worker(store, reader=reader)
    assert _run(router, decider, messages) == expected and reader.reads == []


def test_the_cache_drops_its_oldest_past_its_size() -> None:
    cache = PageCache(max_bytes=10)
    for offset in range(4):
        cache.put(Source("t", 0, offset), b"x" * 4)
    assert (len(cache), cache.size_bytes) == (2, 8)
    assert cache.pop(Source("t", 0, 0)) is None and cache.pop(Source("t", 0, 3)) == b"x" * 4
    cache.put(Source("t", 0, 9), b"y" * 40)  # larger than the whole cache: read back for its verdict
    assert (len(cache), cache.size_bytes) == (0, 0)


def test_parked_pages_leave_the_intake_free_and_go_first_newest_first() -> None:
    """A page waiting only for its horizon is not in flight: intake never waits for it, and when
    the cache is full the newest parked page goes first (the queue decides the oldest first)."""
    cache = PageCache(max_bytes=12)
    for offset in range(3):
        cache.put(Source("t", 0, offset), b"x" * 4)
        cache.park(Source("t", 0, offset))
    assert (len(cache), cache.size_bytes, cache.parked_bytes) == (0, 0, 12)
    cache.put(Source("t", 0, 9), b"y" * 4)  # in flight: a parked page makes room
    assert (len(cache), cache.size_bytes, cache.parked_bytes) == (1, 4, 8)
    assert cache.pop(Source("t", 0, 2)) is None  # the newest parked page went
    assert cache.pop(Source("t", 0, 0)) == b"x" * 4 and cache.pop(Source("t", 0, 9)) == b"y" * 4


@pytest.mark.parametrize(("cache_mb", "pages", "taken"), [
    (4, 10, 3),   # three quarters of 4 MB: three pages of 1 MB
    (1, 5, 1),    # a page over the budget is still taken when none is in flight
])
def test_a_batch_takes_the_pages_its_budget_holds(cache_mb: int, pages: int, taken: int) -> None:
    stage = ContentSeenStage(ContentSeenSettings(page_cache_mb=cache_mb))
    services = bind(stage, TOPOLOGY, 1)[0].services
    messages = [LineMessage(TOPICS.fetched_pages, n, b"x" * (1024 * 1024 - 1)) for n in range(pages)]
    assert services.prepare(messages) == taken
    assert services.ready_for_input() == (taken * 1024 * 1024 <= cache_mb * 1024 * 1024 // 2)
