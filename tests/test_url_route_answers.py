"""Repeats answered at routing (``streams/urls/recent.py``, ``UrlDedupStage.route``): the bounded
set's guarantees, and that an answer is only ever given for a URL whose first sighting is certain to
reach (or to have reached) its shard: routed in a committed transaction or in the same one, or in
the committed store of an owned shard. Never after an abort.
"""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from streams.config import RuntimeSettings
from streams.runtime.batch import BatchState, Emit
from streams.runtime.engine import Engine
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.offline import LineMessage
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore
from streams.topics import Topics
from streams.url_dedup import UrlDedupStage
from streams.urls.canonical import fingerprint
from streams.urls.recent import RecentKeys
from streams.urls.settings import UrlDedupSettings

SHARDS = 4


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


def _stage(owned: dict[int, MemoryStore] | None = None) -> UrlDedupStage:
    stage = UrlDedupStage(Topics("t."), "app", UrlDedupSettings(route_cache_urls=100))
    stage.attach_shards(owned if owned is not None else {}, SHARDS)
    return stage


def _route(stage: UrlDedupStage, url: str, accepted: bool = True) -> list[Emit]:
    """Route one frontier record; ``accepted``: the runtime took its output (as the engine reports)."""
    emits = stage.route(LineMessage("t.frontier", 0, orjson.dumps({"url": url})))
    if accepted:
        stage.routed(emits)
    return emits


URL = "http://example.com/a"


def test_a_repeat_in_the_same_transaction_or_after_its_commit_is_answered_at_routing() -> None:
    stage = _stage()
    [first] = _route(stage, URL)
    assert first.partition == partition_for(fingerprint(URL), SHARDS) and first.key == fingerprint(URL)
    assert _route(stage, "HTTP://EXAMPLE.COM:80/a#x") == []  # same transaction: commits with the first
    stage.committed()
    assert _route(stage, URL) == []
    assert stage.decisions["seen"] == 2


def test_nothing_routed_in_an_aborted_transaction_is_remembered() -> None:
    stage = _stage()
    _route(stage, URL)
    stage.aborted()
    assert len(_route(stage, URL)) == 1  # its first sighting was never produced: route it again


def test_a_route_whose_output_the_runtime_refused_is_not_remembered() -> None:
    stage = _stage()
    _route(stage, URL, accepted=False)
    assert len(_route(stage, URL)) == 1


class RecordingProducer:
    def __init__(self) -> None:
        self.topics: list[str] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, **_: object) -> None:
        self.topics.append(topic)


def test_the_engine_reports_only_shard_records_it_accepted() -> None:
    """A first sighting whose shard record is over the topic's limit becomes a dead letter
    (``output_too_large``); a later, smaller sighting must still reach the shard, not be answered."""
    stage = UrlDedupStage(Topics("t."), "app")
    engine = Engine(stage, KafkaConfig("127.0.0.1:1"), RuntimeSettings(worker_id="w", shards=SHARDS), "g",
                    "changelog", "t.dead-letters", output_limits={stage.state_topic: 2_000})
    engine._producer = RecordingProducer()  # type: ignore[assignment]
    large = orjson.dumps({"url": URL, "anchor_text": "x" * 5_000})
    small = orjson.dumps({"url": URL})
    engine._process([LineMessage("t.frontier", 0, large), LineMessage("t.frontier", 1, small)])  # type: ignore[list-item]
    assert engine._producer.topics == ["t.dead-letters", stage.state_topic]  # type: ignore[attr-defined]


def test_a_url_in_an_owned_shards_committed_store_is_answered_and_others_are_routed() -> None:
    key = fingerprint(URL)
    shard = partition_for(key, SHARDS)
    store = MemoryStore()
    store.apply({key: URL.encode()}, None)
    assert _route(_stage({shard: store}), URL) == []
    assert len(_route(_stage({(shard + 1) % SHARDS: store}), URL)) == 1  # not the owner: ask the shard
    uncommitted = MemoryStore()
    BatchState(uncommitted).set(key, URL.encode())  # a batch's write, not yet committed
    assert len(_route(_stage({shard: uncommitted}), URL)) == 1


def test_without_the_runtime_every_record_goes_to_its_shard() -> None:
    """Offline (no attached shards, no transactions) routes everything, as before."""
    stage = UrlDedupStage(Topics("t."), "app")
    assert len(_route(stage, URL)) == len(_route(stage, URL)) == 1
