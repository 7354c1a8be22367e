"""Letting URLs go, without a broker: the marks' format (format 1 still read), what a forget selects,
forgets applied by a shard's owner (in parts, ordered with the URLs routed around them), expiry on an
injected clock, the routing memory that must not answer for a URL let go, and the Bloom front
filter's false-positive rate after rounds of forgetting."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import ConfigError
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.offline import LineMessage
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore, RocksStore
from streams.stages.url_dedup import marks
from streams.stages.url_dedup.bloom_store import BloomFrontStore
from streams.stages.url_dedup.forgetting import CONTROL_KEY, FORGETTING_KEY, Control, Forgetter
from streams.stages.url_dedup.marks import Expiry, Selection
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.stages.url_dedup.spec import SPEC
from streams.stages.url_dedup.stage import UrlDedupStage
from streams.topics import Topics
from streams.urls.canonical import fingerprint, scoped
from testing.stages import bind, local_path

SHARDS = 2
TOPOLOGY = SPEC.topology(Topics("t."), "app")
SHARD_TOPIC = "t.app.url-dedup.shards"
DAY_S = 86_400.0


class Clock:
    def __init__(self, now_s: float = 1_800_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class Worker:
    """A URL stage owning every shard (memory stores), its transactions driven as the engine does."""

    def __init__(self, settings: UrlDedupSettings | None = None, clock: Clock | None = None,
                 part_entries: int | None = None) -> None:
        self.clock = clock or Clock()
        self.stage = UrlDedupStage(settings or UrlDedupSettings(route_cache_urls=1000), clock=self.clock)
        self.stores = {shard: MemoryStore() for shard in range(SHARDS)}
        self.owned = OwnedShards(self.stores)
        self.owned.begin()
        self.context, self.processors = bind(self.stage, TOPOLOGY, SHARDS, self.owned)
        self.local = local_path(TOPOLOGY, self.context, self.processors)
        [self.memory] = self.context.services.listeners
        if part_entries is not None:
            assert self.stage._forgetter is not None
            self.stage._forgetter._part_entries = part_entries
        self.offset = 0

    def route(self, url: str, crawl: str | None = None) -> list[Emit]:
        record = {"url": url} if crawl is None else {"url": url, "crawl": crawl}
        message = LineMessage("t.frontier", self.offset, orjson.dumps(record))
        emits = self.local.run(self.stage.route(message), message)  # every shard owned: decided at once
        self.offset += 1
        return emits

    def control(self, control: Control, shard: int) -> list[Emit]:
        message = LineMessage(SHARD_TOPIC, self.offset, control.encode(), CONTROL_KEY, shard)
        self.offset += 1
        state = self.owned.state(shard)
        assert state is not None
        return self.stage.process(message, state)

    def commit(self) -> None:
        for state in self.owned.states.values():
            if state.writes:
                state.store.apply(state.writes, None)
        self.owned.begin()
        self.memory.committed()

    def forget(self, selection: Selection) -> tuple[int, int]:
        """A second on, apply a forget at every shard, part after part (each committed): (forgotten,
        parts). (A forget lets go the marks made before it began, to the millisecond.)"""
        self.clock.now_s += 1.0
        total, parts = 0, 0
        for shard in range(SHARDS):
            pending = [Control("forget", "r1", selection)]
            while pending:
                emits = self.control(pending.pop(), shard)
                self.commit()
                parts += 1
                for emit in emits:
                    if emit.topic == SHARD_TOPIC:
                        pending.append(Control.decode(emit.value or b""))
                    else:
                        total += orjson.loads(emit.value or b"")["forgotten"]
        return total, parts

    def new(self, urls: list[str]) -> list[str]:
        """The URLs of ``urls`` emitted as new, each routed and committed in turn."""
        found = []
        for url in urls:
            found += [orjson.loads(e.value or b"")["url"] for e in self.route(url) if e.topic == "t.new-urls"]
        self.commit()
        return found


# -- marks -------------------------------------------------------------------------------------------

@given(st.text(min_size=0, max_size=40).map(lambda name: name.replace(" ", "")), st.integers(0, 2**62))
def test_a_mark_keeps_its_url_and_time_and_format_1_is_read_as_it_is(crawl: str, at_ms: int) -> None:
    url = "http://a.example/x"
    value = marks.mark(scoped(url, crawl), at_ms)
    assert (marks.scoped_url(value), marks.seen_at_ms(value)) == (scoped(url, crawl), at_ms)
    old = scoped(url, crawl).encode()  # format 1: the scoped URL alone
    assert (marks.scoped_url(old), marks.seen_at_ms(old)) == (scoped(url, crawl), None)
    assert marks.seen_at_ms(marks.stamped(old, at_ms)) == at_ms and marks.stamped(value, 1) == value


SELECTIONS = [  # selection, URL, crawl, seen at (ms), selected
    (Selection(host="a.example"), "http://a.example/x", "", 5, True),
    (Selection(host="a.example"), "http://b.a.example/x", "", 5, False),   # not its subdomains
    (Selection(host="a.example"), "http://a.example/x", "c1", 5, False),   # another crawl
    (Selection(host="a.example", crawl="c1"), "http://a.example/x", "c1", 5, True),
    (Selection(prefix="http://a.example/blog/"), "http://a.example/blog/1", "", 5, True),
    (Selection(prefix="http://a.example/blog/"), "http://a.example/blo", "", 5, False),
    (Selection(seen_before_ms=10), "http://a.example/x", "", 9, True),
    (Selection(seen_before_ms=10), "http://a.example/x", "", 10, False),
    (Selection(host="a.example", seen_before_ms=10), "http://a.example/x", "", 11, False),  # both hold
]


@pytest.mark.parametrize(("selection", "url", "crawl", "at_ms", "selected"), SELECTIONS)
def test_what_a_forget_selects(selection: Selection, url: str, crawl: str, at_ms: int,
                               selected: bool) -> None:
    value = marks.mark(scoped(url, crawl), at_ms)
    assert selection.matches(fingerprint(url, crawl), value) is selected
    assert Selection.from_json(orjson.loads(orjson.dumps(selection.to_json()))) == selection


def test_a_forget_selects_something_and_not_both_ways() -> None:
    with pytest.raises(ValueError, match="selects nothing"):
        Selection()
    with pytest.raises(ValueError, match="not both"):
        Selection(frozenset({b"k" * 16}), host="a.example")
    assert not Selection(seen_before_ms=10).matches(b"k" * 16, b"http://a.example/")  # format 1: no time


# -- forgetting at the shards ------------------------------------------------------------------------

URLS = [f"http://{host}.example/{path}/{n}"
        for host in ("a", "b") for path in ("blog", "shop") for n in range(40)]


@pytest.mark.parametrize("part_entries", [1000, 7])
def test_a_forget_lets_exactly_its_urls_go_in_one_part_or_many(part_entries: int) -> None:
    worker = Worker(part_entries=part_entries)
    assert sorted(worker.new(URLS)) == sorted(URLS) and worker.new(URLS) == []
    forgotten, parts = worker.forget(Selection(host="a.example"))
    selected = [url for url in URLS if url.startswith("http://a.example/")]
    assert forgotten == len(selected)
    assert (parts > SHARDS) is (part_entries < len(URLS) // SHARDS)
    assert all(FORGETTING_KEY not in dict(store.items()) for store in worker.stores.values())
    assert sorted(worker.new(URLS)) == sorted(selected)  # new again, once
    assert worker.new(URLS) == []
    forgotten, _ = worker.forget(Selection(prefix="http://b.example/shop/"))
    assert forgotten == 40 and sorted(worker.new(URLS)) == [u for u in sorted(URLS) if "b.example/shop" in u]


def test_between_its_parts_a_forget_answers_for_the_marks_its_scan_has_not_reached() -> None:
    worker = Worker(part_entries=3)
    worker.new(URLS)
    worker.clock.now_s += 1.0
    shard = partition_for(fingerprint(URLS[-1]), SHARDS)
    [first_part] = worker.control(Control("forget", "r", Selection(host="b.example")), shard)
    worker.commit()
    assert first_part.topic == SHARD_TOPIC  # more parts to come
    assert worker.stores[shard].get(FORGETTING_KEY) is not None
    assert worker.new([URLS[-1]]) == [URLS[-1]]  # its mark not scanned yet: new again now
    pending = [Control.decode(first_part.value or b"")]
    count = 0
    while pending:
        for emit in worker.control(pending.pop(), shard):
            if emit.topic == SHARD_TOPIC:
                pending.append(Control.decode(emit.value or b""))
            else:
                count = orjson.loads(emit.value or b"")["forgotten"]
        worker.commit()
    ours = [url for url in URLS
            if url.startswith("http://b.") and partition_for(fingerprint(url), SHARDS) == shard]
    assert count == len(ours)  # the one found meanwhile counted once
    assert worker.new([URLS[-1]]) == []  # seen again since the forget began: it stays


def test_a_url_routed_in_the_same_transaction_after_a_forget_is_new_and_its_memory_is_cleared() -> None:
    worker = Worker()
    url = URLS[0]
    worker.new([url])
    worker.route(url)
    assert url not in worker.new([url]) and worker.memory._recent  # remembered
    shard = partition_for(fingerprint(url), SHARDS)
    worker.control(Control("forget", "r", Selection(frozenset({fingerprint(url)}))), shard)
    assert len(worker.memory._recent) == 0  # cleared at the forget
    assert [e.topic for e in worker.route(url)] == ["t.new-urls"]  # after it in the transaction: new
    worker.commit()
    assert worker.new([url]) == []


def test_a_url_decided_before_a_forget_in_the_same_transaction_is_let_go_by_it() -> None:
    worker = Worker()
    url = URLS[1]
    worker.clock.now_s -= 1.0  # marked a second before the forget begins
    assert [e.topic for e in worker.route(url)] == ["t.new-urls"]
    worker.clock.now_s += 1.0
    shard = partition_for(fingerprint(url), SHARDS)
    [reply] = worker.control(Control("forget", "r", Selection(host="a.example")), shard)
    assert orjson.loads(reply.value or b"")["forgotten"] == 1
    worker.commit()
    assert worker.new([url]) == [url]


def test_a_forget_with_recrawl_writes_each_url_it_lets_go_to_the_frontier() -> None:
    worker = Worker(part_entries=5)
    worker.new(URLS[:20])
    named = "http://a.example/blog/1"
    worker.route(named, crawl="c1")
    worker.commit()
    worker.clock.now_s += 1.0
    requeued: list[dict[str, object]] = []
    for shard in range(SHARDS):
        selection = Selection(prefix="http://a.example/blog/1", crawl="c1")
        pending = [Control("forget", "r", selection, recrawl=True)]
        while pending:
            for emit in worker.control(pending.pop(), shard):
                if emit.topic == SHARD_TOPIC:
                    pending.append(Control.decode(emit.value or b""))
                elif emit.topic == "t.frontier":
                    requeued.append(orjson.loads(emit.value or b""))
            worker.commit()
    assert [(r["url"], r["crawl"]) for r in requeued] == [(named, "c1")]
    assert [e.topic for e in worker.route(named, crawl="c1")] == ["t.new-urls"]


def test_a_bloom_only_seen_set_refuses_to_forget() -> None:
    worker = Worker(UrlDedupSettings(seen_set="bloom"))
    [reply] = worker.control(Control("forget", "r", Selection(host="a.example")), 0)
    assert "cannot let URLs go" in orjson.loads(reply.value or b"")["error"]
    with pytest.raises(ConfigError, match="seen_set = exact"):
        UrlDedupStage(UrlDedupSettings(seen_set="bloom", forget_after_days=1))


def test_a_worker_owning_no_shard_keeps_no_routing_memory_and_one_reassigned_clears_it() -> None:
    stage = UrlDedupStage(UrlDedupSettings(route_cache_urls=1000))
    owned = OwnedShards({})
    context, _ = bind(stage, TOPOLOGY, SHARDS, owned)
    [memory] = context.services.listeners
    url = URLS[0]
    for _ in range(2):
        assert len(stage.route(LineMessage("t.frontier", 0, orjson.dumps({"url": url})))) == 1
        memory.committed()
    other = OwnedShards({1 - partition_for(fingerprint(url), SHARDS): MemoryStore()})
    stage2 = UrlDedupStage(UrlDedupSettings(route_cache_urls=1000))
    context2, _ = bind(stage2, TOPOLOGY, SHARDS, other)
    [memory2] = context2.services.listeners
    stage2.route(LineMessage("t.frontier", 0, orjson.dumps({"url": url})))
    memory2.committed()
    assert stage2.route(LineMessage("t.frontier", 1, orjson.dumps({"url": url}))) == []  # remembered
    other.generation += 1  # a rebalance
    assert len(stage2.route(LineMessage("t.frontier", 2, orjson.dumps({"url": url})))) == 1


# -- expiry ------------------------------------------------------------------------------------------

def test_a_url_seen_longer_ago_than_forget_after_days_is_new_again() -> None:
    clock = Clock()
    worker = Worker(UrlDedupSettings(forget_after_days=2, route_cache_urls=1000), clock)
    assert worker.new(URLS[:2]) == URLS[:2]
    clock.now_s += 1.5 * DAY_S
    assert worker.new(URLS[:3]) == [URLS[2]]
    clock.now_s += 0.6 * DAY_S  # URLS[:2] seen 2.1 days ago, URLS[2] 0.6 days ago
    assert worker.new(URLS[:3]) == URLS[:2]  # new again, the routing memory notwithstanding
    assert worker.stage.events["expired"] == 2
    assert worker.new(URLS[:3]) == []  # marked afresh


def test_expiry_off_keeps_urls_for_ever_and_a_format_1_mark_is_stamped_when_met() -> None:
    clock = Clock()
    forever = Worker(UrlDedupSettings(route_cache_urls=1000), clock)
    forever.new(URLS[:1])
    clock.now_s += 10_000 * DAY_S
    assert forever.new(URLS[:1]) == []
    old = Worker(UrlDedupSettings(forget_after_days=1, route_cache_urls=1000), clock)
    key = fingerprint(URLS[0])
    shard = partition_for(key, SHARDS)
    old.stores[shard].apply({key: URLS[0].encode()}, None)  # a mark written before marks had times
    assert old.new(URLS[:1]) == [] and marks.seen_at_ms(old.stores[shard].get(key) or b"") is not None
    clock.now_s += 1.1 * DAY_S
    assert old.new(URLS[:1]) == URLS[:1]


def test_status_says_seen_since_when_and_when_new_again() -> None:
    clock = Clock(1_800_000_000.0)
    worker = Worker(UrlDedupSettings(forget_after_days=1, route_cache_urls=1000), clock)
    worker.new(URLS[:1])
    key = fingerprint(URLS[0])
    store = worker.stores[partition_for(key, SHARDS)]
    assert worker.stage.status(store, key) == {
        "seen": True, "first_seen_at": "2027-01-15T08:00:00.000Z", "new_again_at": "2027-01-16T08:00:00.000Z"}
    clock.now_s += 2 * DAY_S
    assert worker.stage.status(store, key)["expired"] is True
    assert worker.stage.status(store, fingerprint(URLS[1])) == {"seen": False}
    assert Expiry.of_days(0).after_ms == 0 and Expiry.of_days(0.5).after_ms == 43_200_000


# -- the Bloom front filter after rounds of forgetting -------------------------------------------------

def test_the_front_filter_keeps_its_rate_after_three_rounds_of_forgetting(tmp_path: Path) -> None:
    """Capacity 20,000 at 1 %: 18,000 keys, then three rounds that each delete 40 % of them and add as
    many new ones. Without rebuilding, the deleted keys' bits would stay (36,000 keys' worth of bits
    by the third round, a rate near 9 %); the filter is rebuilt from the store when they matter."""
    rng = random.Random(5)
    capacity, rate = 20_000, 0.01
    store = BloomFrontStore(RocksStore(tmp_path / "rocksdb"), tmp_path, capacity, rate)
    live = [rng.randbytes(16) for _ in range(18_000)]
    store.apply(dict.fromkeys(live, b"u"), 1)
    measured = []
    for offset in range(2, 5):
        rng.shuffle(live)
        gone, live = live[:7_200], live[7_200:]
        store.apply(dict.fromkeys(gone), offset)  # deleted (a forget)
        fresh = [rng.randbytes(16) for _ in range(7_200)]
        store.apply(dict.fromkeys(fresh, b"u"), offset)
        live += fresh
        assert all(store.get(key) == b"u" for key in live)  # no false negative, ever
        assert all(store.get(key) is None for key in gone)
        probes = [rng.randbytes(16) for _ in range(100_000)]
        measured.append(sum(key in store.bloom for key in probes) / len(probes))
    assert store.rebuilds >= 1
    print(f"false-positive rate after each round: {measured}, rebuilds {store.rebuilds}")
    assert max(measured) <= rate, measured
    store.close()


def test_a_forget_record_is_refused_when_unreadable() -> None:
    worker = Worker()
    message = LineMessage(SHARD_TOPIC, 0, b"{}", CONTROL_KEY, 0)
    state = worker.owned.state(0)
    assert isinstance(state, BatchState)
    with pytest.raises(Exception, match="control record"):
        worker.stage.process(message, state)
    assert isinstance(worker.stage._forgetter, Forgetter)
