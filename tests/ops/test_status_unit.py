"""``crawl-dedup status`` without a broker: a worker's address in its client id, the shard topic of
any generation, the owners a group's description gives, and the cache of them between commands."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition

from streams.ops.owners import Owner, Owners, OwnersCache, _owners, advertised_address, advertised_client_id
from streams.topics import Topics


@pytest.mark.parametrize(("client_id", "host", "address"), [
    (advertised_client_id("crawl-dedup.url-dedup", "127.0.0.1:9410"), "/127.0.0.1", "127.0.0.1:9410"),
    (advertised_client_id("mine@team", ":9410"), "/10.0.0.5", "10.0.0.5:9410"),  # every address: the member's
    (advertised_client_id("x", "[::1]:9410"), "/::1", "[::1]:9410"),
    (advertised_client_id("x", ":9410"), "/fe80::1", "[fe80::1]:9410"),
    ("rdkafka", "/127.0.0.1", None),  # an earlier version's worker tells nothing
    ("x@host", "/127.0.0.1", None),
])
def test_a_worker_tells_where_it_answers_in_its_client_id(client_id: str, host: str,
                                                          address: str | None) -> None:
    assert advertised_address(client_id, host) == address


def test_the_shard_topic_of_any_generation_is_recognised() -> None:
    topics = Topics("crawl.")
    assert topics.is_internal("crawl.app.url-dedup.shards", "app", "url-dedup", "shards")
    assert topics.is_internal("crawl.app.url-dedup.g12.shards", "app", "url-dedup", "shards")
    for other in ("crawl.app.url-dedup.changelog", "crawl.app.url-dedup.gx.shards", "crawl.frontier",
                  "crawl.app.revisit.shards", "crawl.app2.url-dedup.shards"):
        assert not topics.is_internal(other, "app", "url-dedup", "shards"), other


def _member(worker: str, port: int, partitions: list[int]) -> SimpleNamespace:
    assignment = SimpleNamespace(topic_partitions=[TopicPartition("crawl.frontier", p) for p in partitions]
                                 + [TopicPartition("crawl.app.url-dedup.g1.shards", p) for p in partitions])
    return SimpleNamespace(group_instance_id=worker, member_id=f"{worker}-1", host="/127.0.0.1",
                           client_id=f"crawl-dedup.url-dedup@127.0.0.1:{port}", assignment=assignment)


def test_a_groups_description_names_each_shards_owner_and_the_shard_count() -> None:
    described = SimpleNamespace(state=ConsumerGroupState.STABLE,
                                members=[_member("w0", 9410, [0, 1]), _member("w1", 9420, [2, 3])])
    owners = _owners("crawl.app.url-dedup", described,
                     lambda topic: Topics("crawl.").is_internal(topic, "app", "url-dedup", "shards"))
    assert owners.shard_topic == "crawl.app.url-dedup.g1.shards" and owners.shard_count == 4
    assert owners.shards[3] == Owner("w1", "127.0.0.1:9420")
    rebalancing = _owners("g", SimpleNamespace(state=ConsumerGroupState.PREPARING_REBALANCING,
                                               members=[_member("w0", 9410, [0, 2])]), lambda topic: True)
    assert rebalancing.shard_count is None  # a partition unassigned: the count is not known
    assert "has no members" in Owners("g", None, {}, 0, "EMPTY").describe_missing(0, "url-dedup")


def test_owners_are_kept_between_commands_by_cluster_and_group(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "status-owners.json"
    settled = Owners("g1", "t", {0: Owner("w0", "127.0.0.1:1"), 1: Owner("w1", None)}, 2, "STABLE")
    idle = Owners("g2", None, {}, 0, "EMPTY")
    OwnersCache(path, "k:9092").save([settled, idle])
    assert OwnersCache(path, "k:9092").load(["g1", "g2", "g3"]) == {"g1": settled, "g2": idle}
    assert OwnersCache(path, "other:9092").load(["g1"]) == {}  # another cluster's
    assert OwnersCache(None, "k:9092").load(["g1"]) == {}
    OwnersCache(path, "k:9092").save([Owners("g1", "t", {1: Owner("w1", None)}, 2, "PREPARING_REBALANCING")])
    assert OwnersCache(path, "k:9092").load(["g1"]) == {}  # a rebalance under way: nothing kept
    old = OwnersCache(path, "k:9092")
    old.MAX_AGE_S = old.IDLE_AGE_S = -1.0
    assert old.load(["g2"]) == {}
    path.write_text("not json")
    assert OwnersCache(path, "k:9092").load(["g1"]) == {}
