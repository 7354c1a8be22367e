"""The local path (streams/stages/content_seen/local.py): what a worker owning the shards does in the
routing transaction, and what must vouch for it first."""

from __future__ import annotations

import base64
import random
from collections import Counter, deque

import orjson
import pytest

from streams.dev import simweb
from streams.errors import RecordRejected
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.context import StageContext
from streams.runtime.counters import Counters
from streams.runtime.message import InputPositions, Unreadable
from streams.runtime.offline import LineMessage, OfflineDriver
from streams.runtime.store import MemoryStore
from streams.runtime.topology import shard_handlers
from streams.stages.content_seen.buckets import Match, order_key
from streams.stages.content_seen.gather import QUEUE_KEY, Gatherer, Queue
from streams.stages.content_seen.horizon import RoutingView, encode_horizon
from streams.stages.content_seen.local import LOCAL_KEY, Ownership
from streams.stages.content_seen.shard_records import Mark, Notice, PageWaits, Progress, Reply
from streams.stages.content_seen.spec import SPEC
from streams.stages.content_seen.stage import ContentSeenSettings, ContentSeenStage
from streams.stages.content_seen.waiting import EARLY_PREFIX, PageCache, replies
from streams.topics import Topics
from testing import simcluster, stages

TOPICS = Topics("local.")
TOPOLOGY = SPEC.topology(TOPICS, "a")
TOPIC = TOPICS.fetched_pages


def _positions(partitions: list[int], count: int) -> InputPositions:
    routed = {(TOPIC, p): 0 for p in partitions}
    return InputPositions(routed, routed, {TOPIC: count})


def test_marks_and_progress_carry_their_token_and_records_without_one_are_read() -> None:
    view = RoutingView({0: 2}, {(0, 1): 5}, {(0, 1): 9})
    assert Mark.decode(Mark(view, b"t" * 16).encode()) == Mark(view, b"t" * 16)
    assert Progress.decode(Progress(3, view, b"t" * 16).encode()) == Progress(3, view, b"t" * 16)
    assert Mark.decode(view.encode()) == Mark(view)  # written by a version before tokens
    assert Progress.decode(b"\x00\x03" + view.encode()) == Progress(3, view)
    with pytest.raises(ValueError, match="cut short"):
        Mark.decode(b"\x10short")


def test_a_shard_vouches_only_for_a_record_of_this_worker_since_its_assignment() -> None:
    owned = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    ownership, other = Ownership(owned, 3, 1), Ownership(OwnedShards({}), 3, 1)
    owned.begin()
    state = owned.state(0)
    assert state is not None and ownership.claimed(0) is None and ownership.claimed(2) is None
    ownership.vouch(0, other.token, state)  # another worker's (or process's) mark
    assert ownership.claimed(0) is None
    ownership.vouch(0, ownership.token, state)
    assert ownership.claimed(0) is state and ownership.claimed(1) is None
    ownership.taint()  # progress given directly waits; direct marks need the assignment only
    assert ownership.claimed(0) is state
    owned.generation += 1  # a rebalance: what vouched before counts no more
    assert ownership.claimed(0) is None
    ownership.vouch(0, ownership.token, state)
    assert ownership.claimed(0) is state


def test_a_shard_not_settled_or_a_probe_sent_around_it_stops_direct_marks_until_a_newer_one_vouches() -> None:
    """While a shard waits for the records routed to it before, the runtime sends this worker's
    probes for it through the topic: no direct mark (it would vouch for probes on their way), and a
    mark sent before such a probe, processed after the shard settles, vouches for nothing."""
    owned = OwnedShards({0: MemoryStore()})
    ownership = Ownership(owned, 1, 1)
    owned.begin()
    state = owned.state(0)
    assert state is not None
    sent_before = ownership.token
    owned.pending.add(0)
    ownership.vouch(0, sent_before, state)
    assert ownership.claimed(0) is None  # not settled
    owned.detours += 1  # the runtime's local path sent a probe for shard 0 through the topic
    owned.pending.clear()
    assert ownership.claimed(0) is None  # what vouched was sent before that probe
    ownership.vouch(0, sent_before, state)
    assert ownership.claimed(0) is None
    ownership.vouch(0, ownership.token, state)  # a mark sent after it
    assert ownership.claimed(0) is state


def test_arrivals_and_probes_are_records_and_one_sent_around_a_shard_not_settled_detours() -> None:
    """A page's arrival and its probes are records the runtime's local path decides (the topic names
    them by tag); one it must send through the topic of a shard owned here (not settled) changes the
    worker's token."""
    declared = TOPOLOGY.internal[0][0]
    assert isinstance(declared.local, frozenset)
    names = {declared.tagged()[tag].__name__ for tag in declared.local}
    assert names == {"PageWaits", "Probe", "PayloadProbe", "VouchedProgress"}
    value = orjson.dumps(simweb.crawl(seed=1, articles=1)[0].record)
    tokens = []
    for pending in (set(), {0}):
        owned = OwnedShards({0: MemoryStore()})
        owned.pending.update(pending)
        stage = ContentSeenStage(ContentSeenSettings(page_cache_mb=1, analysis_processes=0))
        context = StageContext(TOPOLOGY, 1, owned, Unreadable(), Counters(), 512 * 1024)
        processors = stage.init(context)
        owned.begin()
        ownership = processors.route.__self__._relay._ownership  # type: ignore[attr-defined]
        before = ownership.token
        message = LineMessage(TOPIC, 0, value)
        emits = processors.route(message)
        assert {emit.value[0] for emit in emits if emit.value} <= declared.local  # arrival and probes
        stages.local_path(TOPOLOGY, context, processors).run(emits, message)
        tokens.append(ownership.token == before)
        stage.close()
    assert tokens == [True, False]


def test_alone_needs_every_shard_every_input_partition_and_the_current_token() -> None:
    owned = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    ownership = Ownership(owned, 2, 1)
    owned.begin()

    def vouch_all() -> None:
        for shard in (0, 1):
            state = owned.state(shard)
            assert state is not None
            ownership.vouch(shard, ownership.token, state)

    vouch_all()
    assert not ownership.alone()  # which inputs it routes is not known yet
    ownership.inputs(_positions([0], 2))
    assert not ownership.alone()  # another worker routes partition 1
    ownership.inputs(_positions([0, 1], 2))  # other inputs than before: a new assignment
    assert not ownership.alone()
    vouch_all()
    assert ownership.alone()
    ownership.taint()  # a notice went to an owned gather shard as a record
    assert not ownership.alone()
    vouch_all()
    assert ownership.alone()
    assert not Ownership(OwnedShards({0: MemoryStore()}), 2, 1).alone()  # shard 1 is elsewhere


def test_progress_goes_directly_to_owned_gather_shards_vouched_with_the_current_token() -> None:
    """Not alone (shard 2 is elsewhere, another worker routes partition 1): the settled gather
    shards it owns still take its progress at once once vouched, until a taint or a rebalance; one
    not settled takes it as a record (the local path would send a vouched one around it)."""
    owned = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    ownership = Ownership(owned, 3, 1)
    owned.begin()
    ownership.inputs(_positions([0], 2))
    assert ownership.vouched_gathers() == frozenset()
    first = owned.state(0)
    assert first is not None
    ownership.vouch(0, ownership.token, first)
    assert ownership.vouched_gathers() == {0} and not ownership.alone()
    owned.pending.add(0)  # records routed to it before wait in its topic
    assert ownership.vouched_gathers() == frozenset()
    owned.pending.clear()
    ownership.taint()  # a notice went to an owned gather shard as a record
    assert ownership.vouched_gathers() == frozenset()
    ownership.vouch(0, ownership.token, first)
    assert ownership.vouched_gathers() == {0}
    owned.generation += 1  # a rebalance
    assert ownership.vouched_gathers() == frozenset()


def _gatherer(owned: OwnedShards, ownership: Ownership) -> Gatherer:
    stream = StageContext(TOPOLOGY, 2, owned, Unreadable(), Counters(), 1024).internal("shards")
    return Gatherer(stream, owned, ownership, PageCache(1 << 20), {TOPIC: 0}, Counter(),
                    lambda state, order: [])


def _order_at(gatherer: Gatherer, shard: int) -> bytes:
    shard_of = gatherer._shards.shard_of
    return next(order_key(1, 0, n) for n in range(100) if shard_of(order_key(1, 0, n)) == shard)


_HEAD = b'{"url": "https://a.example/", "tables": 2, "source": ["local.fetched-pages", 0, 0]}'


def _head(offset: int) -> bytes:
    return _HEAD.replace(b', 0, 0]', b', 0, %d]' % offset)


def test_a_page_arriving_first_is_decided_at_once_when_covered_and_one_behind_waits() -> None:
    """The progress that covers a page may be given before the page comes (by a worker none of whose
    shards it was probed in): arriving first in its queue, it is decided on arrival. Behind a page
    whose horizon is not covered it waits, and its arrival does not look at the queue."""
    owned = OwnedShards({0: MemoryStore()})
    stream = StageContext(TOPOLOGY, 1, owned, Unreadable(), Counters(), 1024).internal("shards")
    gatherer = Gatherer(stream, owned, Ownership(owned, 1, 1), PageCache(1 << 20), {TOPIC: 0}, Counter(),
                        lambda state, order: [Emit("decided", order, order)])
    owned.begin()
    state = owned.state(0)
    assert state is not None
    gatherer.progress(Progress(0, RoutingView({0: 1}, {(0, 0): 5}, {(0, 0): 5})),
                      LineMessage("shards", 0, b"", b"progress", 0), state)
    seed = encode_horizon({(0, 0): 5})

    def arrive(offset: int) -> list[Emit]:
        message = LineMessage("shards", 0, b"", order_key(1, 0, offset), 0)
        return gatherer.page(PageWaits(_head(offset), b"", seed), message, state)

    assert [emit.key for emit in arrive(0)] == [order_key(1, 0, 0)]  # covered: decided on arrival
    assert arrive(7) == []  # its own offset is past the coverage: it waits
    assert arrive(1) == []  # behind it
    assert Queue.decode(state.get(QUEUE_KEY)) == Queue(1, 3)


def test_a_reply_or_notice_goes_at_once_where_its_page_waits_else_as_a_record() -> None:
    owned = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    ownership = Ownership(owned, 2, 1)
    gatherer = _gatherer(owned, ownership)
    owned.begin()
    order = _order_at(gatherer, 0)
    match = Match(order_key(0, 0, 9), "https://earlier.example/", 1, True, 256)
    token = ownership.token
    assert gatherer.tell(order, Notice(match)) != []  # not there: on its way, or decided
    assert ownership.token != token  # a record to an owned gather shard taints the token
    state = owned.state(0)
    assert state is not None
    gatherer.page(PageWaits(_HEAD, b"", b""), LineMessage("shards", 0, b"", order, 0), state)  # at once
    assert gatherer.tell(order, Reply(None)) == []
    assert gatherer.tell(order, Notice(match)) == [] and gatherer.races["in_time"] == 1
    heard = replies(state, order)
    assert heard is not None and (heard.count, heard.best) == (1, match)


@pytest.mark.parametrize("early", [0, 1, 2])
def test_a_reply_probed_here_before_its_page_arrived_waits_for_it_without_a_record(early: int) -> None:
    """The page's probe record was processed before its page record (two partitions, no order
    between them): its reply is kept at the gather shard, not sent there as a record, so the token
    stays and progress is still given directly; the page takes it in when it comes, and a page all
    of whose replies came first is parked at once."""
    owned = OwnedShards({0: MemoryStore(), 1: MemoryStore()})
    ownership = Ownership(owned, 2, 1)
    gatherer = _gatherer(owned, ownership)
    owned.begin()
    order = _order_at(gatherer, 0)
    matches = [Match(order_key(0, 0, n), f"https://earlier.example/{n}", 3 - n, False, 200) for n in range(2)]
    token = ownership.token
    for match in matches[:early]:
        assert gatherer.tell(order, Reply(match)) == []
    assert ownership.token == token
    state = owned.state(0)
    assert state is not None
    message = LineMessage("local.shards", 0, b"", order, 0)
    gatherer.page(PageWaits(_HEAD, b"page"), message, state)
    assert gatherer._pages.parked_bytes == (len(b"page") if early == 2 else 0)  # waits for its horizon only
    assert state.get(EARLY_PREFIX + order) is None
    heard = replies(state, order)
    assert heard is not None and heard.count == early and heard.tables == 2
    assert heard.best == (matches[early - 1] if early else None)  # the nearer, the better
    for match in matches[early:]:
        assert gatherer.tell(order, Reply(match)) == []
    heard = replies(state, order)
    assert heard is not None and (heard.count, heard.best) == (2, matches[1])
    assert gatherer._pages.parked_bytes == len(b"page")


def _crawl(seed: int, articles: int) -> list[bytes]:
    return [orjson.dumps(page.record) for page in simweb.crawl(seed=seed, articles=articles)]


def test_one_worker_decides_each_page_in_the_transaction_that_routes_it() -> None:
    """After one transaction's marks have vouched for the shards, a page written while the worker
    runs gets its verdict in the transaction that routes it, and nothing goes through the shard topic."""
    values = _crawl(seed=5, articles=3)
    cluster = simcluster.Cluster(lambda: ContentSeenStage(ContentSeenSettings(page_cache_mb=1)), TOPOLOGY,
                                 [[], []], 3, 1, random.Random(3))
    cluster.produce(0, values[0])
    for _ in range(4):  # route, then the marks vouch for every shard
        cluster.step(0, max_records=10)
    assert len(cluster.verdicts(TOPICS)) == 1
    sent = sum(len(log) for logs in cluster.shard_logs.values() for log in logs)
    for number, value in enumerate(values[1:], start=1):
        cluster.produce(number % 2, value)
        cluster.step(0, max_records=10)
        assert len(cluster.verdicts(TOPICS)) == number + 1  # decided in its routing transaction
    assert sum(len(log) for logs in cluster.shard_logs.values() for log in logs) == sent


def test_a_decision_whose_output_a_topic_refuses_is_a_dead_letter_alone() -> None:
    """Decided on the local path, in a per-transaction callback, each page's outputs are checked as
    a decide record's are: one refused (a unique page too large for its topic) is replaced by a
    dead letter naming the page's input record; the other pages keep theirs."""
    values = _crawl(seed=7, articles=2)
    large = max(range(len(values)), key=lambda n: len(values[n]))

    def check(emits: list[Emit]) -> None:
        for emit in emits:
            if emit.topic == TOPICS.unique_pages and len(emit.value or b"") >= len(values[large]):
                raise RecordRejected("output_too_large", "over the limit")

    store = MemoryStore()
    owned = OwnedShards({0: store})
    context = StageContext(TOPOLOGY, 1, owned, Unreadable(), Counters(), 1 << 20, check)
    processors = ContentSeenStage().init(context)
    handlers = shard_handlers(TOPOLOGY, processors)
    outputs: list[Emit] = []
    for number, value in enumerate(values):  # a line at a time, as offline (one shard, owned here)
        owned.begin()
        end = {(TOPIC, 0): number + 1}
        positions: InputPositions | None = InputPositions(end, end, {TOPIC: 1})
        pending = deque(processors.route(LineMessage(TOPIC, number, value)))
        while True:
            while pending:
                emit = pending.popleft()
                state = owned.state(0)
                if emit.topic not in handlers or state is None:
                    outputs.append(emit)
                    continue
                record = LineMessage(emit.topic, 0, emit.value or b"", emit.key)
                pending.extend(handlers[emit.topic](record, state))
            pending.extend(context.services.punctuators.run(positions))
            positions = None
            if not pending:
                break
        for state in owned.states.values():
            store.apply(state.writes, None)
    verdicts = [orjson.loads(e.value or b"") for e in outputs if e.topic == TOPICS.page_verdicts]
    letters = [orjson.loads(e.value or b"") for e in outputs if e.topic == TOPICS.dead_letters]
    refused = orjson.loads(values[large])["url"]
    assert sorted(v["url"] for v in verdicts) == sorted(orjson.loads(v)["url"] for v in values if
                                                        orjson.loads(v)["url"] != refused)
    assert [(each["reason"], each["source_offset"]) for each in letters] == [("output_too_large", large)]
    assert store.get(LOCAL_KEY) is not None  # vouched by its first mark: the rest went the local way


def test_a_page_whose_decide_record_s_output_is_refused_has_a_letter_carrying_the_page() -> None:
    """Two workers, so no worker is alone and every page is decided by a decide record, through the
    shard processors: a page whose unique-page record its topic refuses gets a dead letter that
    names and carries the page's input record (not the decide record, from which it could not be
    replayed), and its decision stands."""
    values = _crawl(seed=7, articles=2)

    def refuse_unique_pages(emits: list[Emit]) -> None:
        if any(emit.topic == TOPICS.unique_pages for emit in emits):
            raise RecordRejected("output_too_large", "over the limit")

    rng = random.Random(11)
    inputs: list[list[bytes]] = [[], []]
    for value in values:
        inputs[rng.randrange(2)].append(value)
    cluster = simcluster.Cluster(ContentSeenStage, TOPOLOGY, inputs, 3, 2, rng, refuse_unique_pages)
    simcluster.run(cluster, max_records=3)
    letters = [orjson.loads(e.value or b"") for e in cluster.outputs if e.topic == TOPICS.dead_letters]
    verdicts = cluster.verdicts(TOPICS)
    assert letters and not any(e.topic == TOPICS.unique_pages for e in cluster.outputs)
    assert len(letters) + len(verdicts) == len(values)  # the unique pages' verdicts went with them
    for letter in letters:
        assert (letter["reason"], letter["source_topic"]) == ("output_too_large", TOPIC)
        page = inputs[letter["source_partition"]][letter["source_offset"]]
        assert base64.b64decode(letter["value_base64"]) == page
    assert {v["verdict"] for v in verdicts} == {"duplicate"}


def test_a_gather_shard_whose_queue_lost_an_entry_refuses_the_line_offline() -> None:
    """Given progress at once, a queue that names an entry its state lacks refuses the record (a
    worker logs it: a callback's record has no input record to letter); offline the line is
    refused whole, its writes dropped."""
    values = _crawl(seed=8, articles=1)
    store = MemoryStore()
    driver = OfflineDriver(TOPOLOGY, ContentSeenStage(), store)
    driver.decide(driver.message(1, values[0]))  # vouches for the one shard, decides the first page
    store.apply({QUEUE_KEY: Queue(5, 6).encode()}, None)  # entry 5 was never written
    with pytest.raises(RecordRejected, match="queue entry 5 missing"):
        driver.decide(driver.message(2, values[1]))
    assert store.get(QUEUE_KEY) == Queue(5, 6).encode()
