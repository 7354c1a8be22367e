"""Repeats answered at routing (``streams/urls/recent.py``, ``UrlDedupStage._known``): the bounded
set's guarantees, and that an answer is only ever given for a URL whose first sighting is certain to
reach (or to have reached) its shard: routed in a committed transaction or in the same one, or in
the committed store of an owned shard. Never after an abort.
"""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime.partitioner import partition_for
from streams.runtime.stage import BatchState, Emit
from streams.runtime.store import MemoryStore
from streams.topics import Topics
from streams.url_dedup import UrlDedupSettings, UrlDedupStage
from streams.urls.canonical import fingerprint
from streams.urls.recent import RecentKeys

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


class Record:
    def __init__(self, topic: str, value: bytes, key: bytes | None = None, partition: int = 0) -> None:
        self._topic, self._value, self._key, self._partition = topic, value, key, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return 0

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def _stage(owned: dict[int, MemoryStore] | None = None) -> UrlDedupStage:
    stage = UrlDedupStage(Topics("t."), "app", UrlDedupSettings(route_cache_urls=100))
    stage.attach_shards(owned if owned is not None else {}, SHARDS)
    return stage


def _route(stage: UrlDedupStage, url: str) -> list[Emit]:
    return stage.route(Record("t.frontier", orjson.dumps({"url": url})))


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
