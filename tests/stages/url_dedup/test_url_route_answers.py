"""Answers at routing (``streams/stages/url_dedup/routing_memory.py``, ``UrlDedupStage.route``): the
bounded set's guarantees; that a repeat is only ever answered for a URL whose first sighting is
certain to reach (or to have reached) its shard: routed in a committed transaction or in the same
one, never after an abort; and that a URL of an owned shard is decided at routing against the same
transaction's state its shard records are decided against.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.config import RuntimeSettings
from streams.errors import ConfigError
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.identity import ShardIdentities
from streams.runtime.offline import LineMessage, OfflineDriver
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore
from streams.stages.url_dedup.marks import scoped_url
from streams.stages.url_dedup.routing_memory import RecentKeys, RoutingMemory
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.stages.url_dedup.spec import SPEC
from streams.stages.url_dedup.stage import VERSION_KEY, UrlDedupStage
from streams.topics import Topics
from streams.urls.canonical import fingerprint
from testing.stages import bind, local_path, running

SHARDS = 4
TOPOLOGY = SPEC.topology(Topics("t."), "app")
SHARD_TOPIC = "t.app.url-dedup.shards"


@given(st.lists(st.binary(min_size=16, max_size=16), max_size=300), st.integers(min_value=2, max_value=64))
def test_recent_keys_hold_at_most_capacity_and_remember_the_latest_half(keys: list[bytes],
                                                                        capacity: int) -> None:
    recent = RecentKeys(capacity)
    recent.update(keys)
    assert len(recent) <= capacity
    distinct_latest: list[bytes] = []
    for key in reversed(keys):
        if key not in distinct_latest:
            distinct_latest.append(key)
    assert all(key in recent for key in distinct_latest[: capacity // 2])
    assert all(key in set(keys) for key in [*recent._young, *recent._old])  # nothing invented


class Routed:
    """A URL stage bound as the engine binds it, with its routing memory, its transaction listener;
    by default a worker owning one shard, not ``URL``'s (a worker owning none keeps no routing
    memory)."""

    def __init__(self, owned: OwnedShards | None = None) -> None:
        self.stage = UrlDedupStage(UrlDedupSettings(route_cache_urls=100))
        if owned is None:
            owned = OwnedShards({(partition_for(fingerprint(URL), SHARDS) + 1) % SHARDS: MemoryStore()})
        context, processors = bind(self.stage, TOPOLOGY, SHARDS, owned)
        [memory] = context.services.listeners
        assert isinstance(memory, RoutingMemory)
        self.memory = memory
        self.process = processors.shards["shards"]
        self.local = local_path(TOPOLOGY, context, processors)

    def route(self, url: str, accepted: bool = True) -> list[Emit]:
        """Route one frontier record, a record of an owned shard decided at once as the engine does;
        ``accepted``: the runtime took its output (else it tells the listeners the record was
        refused, as the engine does)."""
        message = LineMessage("t.frontier", 0, orjson.dumps({"url": url}))
        emits = self.local.run(self.stage.route(message), message)
        if not accepted:
            self.memory.refused()
        return emits


URL = "http://example.com/a"


def test_a_repeat_in_the_same_transaction_or_after_its_commit_is_answered_at_routing() -> None:
    routed = Routed()
    [first] = routed.route(URL)
    assert first.partition == partition_for(fingerprint(URL), SHARDS) and first.key == fingerprint(URL)
    assert routed.route("HTTP://EXAMPLE.COM:80/a#x") == []  # same transaction: commits with the first
    routed.memory.committed()
    assert routed.route(URL) == []
    assert routed.stage.decisions["seen"] == 2


def test_nothing_routed_in_an_aborted_transaction_is_remembered() -> None:
    routed = Routed()
    routed.route(URL)
    routed.memory.aborted()
    assert len(routed.route(URL)) == 1  # its first sighting was never produced: route it again


def test_a_route_whose_output_the_runtime_refused_is_not_remembered() -> None:
    routed = Routed()
    routed.route(URL, accepted=False)
    assert len(routed.route(URL)) == 1


def test_the_engine_reports_only_shard_records_it_accepted() -> None:
    """A first sighting whose shard record is over the topic's limit becomes a dead letter
    (``output_too_large``); a later, smaller sighting must still reach the shard, not be answered."""
    stage = UrlDedupStage()
    with running(stage, TOPOLOGY, shards=SHARDS, limits={SHARD_TOPIC: 2_000},
                 settings=RuntimeSettings(worker_id="w", shards=SHARDS)) as (engine, broker, _):
        broker.fixed_shares["w"] = [("t.frontier", 0)]  # it owns no shard: the shard decides
        broker.append("t.frontier", 0, None, orjson.dumps({"url": URL, "anchor_text": "x" * 5_000}))
        broker.append("t.frontier", 0, None, orjson.dumps({"url": URL}))
        engine.step()
        assert [event for event in broker.events if event.startswith("produce")] == [
            "produce t.dead-letters", f"produce {SHARD_TOPIC}"]


def _owning(store: MemoryStore, url: str = URL) -> OwnedShards:
    """The shards of a worker that owns only ``url``'s shard, kept in ``store``."""
    identities = ShardIdentities(UrlDedupStage().store().identity)
    owned = OwnedShards({partition_for(fingerprint(url), SHARDS): store}, identities.first_use)
    owned.begin()
    return owned


def test_a_url_in_an_owned_shards_store_is_answered_and_others_are_routed() -> None:
    store = MemoryStore()
    store.apply({fingerprint(URL): URL.encode()}, None)
    assert Routed(_owning(store)).route(URL) == []
    not_owner = OwnedShards({(partition_for(fingerprint(URL), SHARDS) + 1) % SHARDS: store})
    [routed] = Routed(not_owner).route(URL)
    assert routed.topic == "t.app.url-dedup.shards"  # not the owner: the shard decides


def test_a_first_sighting_in_an_owned_shard_is_decided_in_the_open_transaction() -> None:
    store = MemoryStore()
    owned = _owning(store)
    routed = Routed(owned)
    [new] = routed.route(URL + "#top")
    assert (new.topic, new.key) == ("t.new-urls", b"example.com")
    assert orjson.loads(new.value or b"")["canonical"] == URL
    shard = partition_for(fingerprint(URL), SHARDS)
    assert scoped_url(owned.states[shard].writes[fingerprint(URL)]) == URL  # commits with the output
    assert store.get(fingerprint(URL)) is None  # nothing applied before the commit
    assert routed.route(URL) == [] and routed.stage.decisions == {"new": 1, "seen": 1}


def test_a_shard_record_of_a_url_decided_at_routing_is_a_repeat_and_the_reverse() -> None:
    """Another worker's sighting in the shard topic, decided before or after this worker's own."""
    key, shard = fingerprint(URL), partition_for(fingerprint(URL), SHARDS)
    shard_record = LineMessage("t.app.url-dedup.shards", 0, orjson.dumps(
        {"url": URL, "canonical": URL, "host": "example.com", "fingerprint": key.hex()}), key, shard)
    for shard_first in (False, True):
        owned = _owning(MemoryStore())
        routed = Routed(owned)
        state = owned.state(shard)
        assert state is not None
        first = routed.stage.process(shard_record, state) if shard_first else routed.route(URL)
        second = routed.route(URL) if shard_first else routed.stage.process(shard_record, state)
        assert (len(first), second) == (1, [])


def test_a_decision_at_routing_in_an_aborted_transaction_leaves_nothing() -> None:
    owned = _owning(MemoryStore())
    routed = Routed(owned)
    assert len(routed.route(URL)) == 1
    routed.memory.aborted()
    owned.begin()  # the engine's next transaction: the aborted one's writes are gone
    assert len(routed.route(URL)) == 1


def test_a_shard_of_another_canonicalization_is_refused_at_routing_too() -> None:
    store = MemoryStore()
    store.apply({VERSION_KEY: b"1:safe"}, None)
    with pytest.raises(ConfigError, match="url-dedup-migrate"):
        Routed(_owning(store)).route(URL)


def test_offline_the_one_shard_is_owned_so_every_url_is_answered_at_routing() -> None:
    """The offline driver is a worker owning the only shard: nothing goes through the shard topic."""
    driver = OfflineDriver(TOPOLOGY, UrlDedupStage(), MemoryStore())
    first = driver.decide(driver.message(1, orjson.dumps({"url": URL})))
    again = driver.decide(driver.message(2, orjson.dumps({"url": URL + "#x"})))
    assert ([emit.topic for emit in first], again) == (["t.new-urls"], [])
