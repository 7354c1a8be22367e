"""Reshard, without a broker: generation topic names and checks, where each stage's state entries go
under a new shard count (streams/runtime/moves.py and the stages' moves), the drain cut, and the
local state directory's generation marker."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import ReshardRefused, ShardCountMismatch, StaleGeneration, StateError
from streams.pages.analyze import design_for
from streams.pages.blocks import BlockDesign
from streams.runtime.drain import Cut
from streams.runtime.generations import Generation, require_current
from streams.runtime.moves import KeyedMove, Placed, StateMove
from streams.runtime.partitioner import partition_for
from streams.runtime.runner import check_local_shards
from streams.runtime.store_spec import StoreSpec
from streams.stages.content_seen.buckets import record_key
from streams.stages.content_seen.move import state_tables
from streams.stages.content_seen.stage import ContentSeenSettings
from streams.stages.revisit.allocation import RATE_BINS
from streams.stages.revisit.budget import SPEND_WINDOW_S, UNESTIMATED, BudgetState
from streams.stages.revisit.history import FetchHistory, encode_history
from streams.stages.revisit.hosts import HostChanges, host_key
from streams.stages.revisit.move import ALLOCATION_KEY, HISTORY_PREFIX, RevisitMove, merge_budgets
from streams.topics import Topics

DAY = 86_400.0
shard_counts = st.integers(1, 32)
simhashes = st.integers(0, 2**64 - 1)


def fingerprint(number: int) -> bytes:
    """A 16-byte URL fingerprint, spread like the real ones."""
    return hashlib.blake2b(str(number).encode(), digest_size=16).digest()


def design() -> BlockDesign:
    return design_for(ContentSeenSettings())


# -- topic names ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("generations", "shards", "changelog"), [
    ((), "p.app.url-dedup.shards", "p.app.url-dedup.changelog"),
    ((("url-dedup", 3),), "p.app.url-dedup.g3.shards", "p.app.url-dedup.g3.changelog"),
    ((("revisit", 2),), "p.app.url-dedup.shards", "p.app.url-dedup.changelog"),  # another stage's
])
def test_internal_topics_are_named_after_the_stage_generation(
        generations: tuple[tuple[str, int], ...], shards: str, changelog: str) -> None:
    """Generation 0 keeps the names deployed before reshards existed; later ones get their own."""
    topics = Topics("p.", generations)
    assert topics.shards("app", "url-dedup") == shards
    assert topics.changelog("app", "url-dedup") == changelog
    assert topics.generations_topic("app", "url-dedup") == "p.app.url-dedup.generations"
    assert topics.group("app", "url-dedup") == "p.app.url-dedup"


@pytest.mark.parametrize(("generation", "suffix"), [(None, ".g3"), (0, ""), (3, ".g3"), (4, ".g4")])
def test_an_explicit_generation_overrides_the_current_one(generation: int | None, suffix: str) -> None:
    """A reshard names the old and the new generation's topics from one Topics."""
    topics = Topics("p.", (("url-dedup", 3),))
    assert topics.shards("app", "url-dedup", generation) == f"p.app.url-dedup{suffix}.shards"
    assert topics.changelog("app", "url-dedup", generation) == f"p.app.url-dedup{suffix}.changelog"


def test_at_generation_changes_only_that_stage_and_never_the_group() -> None:
    """Input offsets live in the group: a resharded stage goes on where the old generation stopped."""
    base = Topics("p.", (("revisit", 2),))
    moved = base.at_generation("url-dedup", 3)
    assert moved.generation("url-dedup") == 3 and base.generation("url-dedup") == 0
    assert moved.generation("revisit") == 2 and moved.generation("content-seen") == 0
    assert moved.shards("app", "revisit") == base.shards("app", "revisit") == "p.app.revisit.g2.shards"
    assert moved.prefix == base.prefix and moved.shared() == base.shared()
    for stage in ("url-dedup", "revisit"):
        assert moved.group("app", stage) == base.group("app", stage) == f"p.app.{stage}"
        assert moved.generations_topic("app", stage) == base.generations_topic("app", stage)
    again = moved.at_generation("url-dedup", 4)
    assert again.generation("url-dedup") == 4 and again.generation("revisit") == 2
    assert dict(again.generations) == {"url-dedup": 4, "revisit": 2}  # replaced, not appended
    assert moved.at_generation("url-dedup", 0).generations == (("revisit", 2),)  # 0 is not recorded
    assert Topics("p.").at_generation("url-dedup", 0) == Topics("p.")


# -- the generation record --------------------------------------------------------------------------

@given(st.integers(0, 10**6), st.integers(1, 10**4), st.none() | st.integers(1, 10**6), st.integers(1, 10**4))
def test_generation_record_round_trips(number: int, shards: int, moving_to: int | None,
                                       moving_shards: int) -> None:
    """The record is the reshard's commit point: what a worker reads is what the reshard wrote."""
    generation = Generation(number, shards, moving_to, None if moving_to is None else moving_shards)
    decoded = Generation.decode(generation.encode())
    assert decoded == generation
    assert decoded.moving is (moving_to is not None)


def test_a_record_without_the_moving_fields_decodes() -> None:
    assert Generation.decode(b'{"generation": 2, "shards": 8}') == Generation(2, 8)


@pytest.mark.parametrize(("found", "generation", "shards", "refusal"), [
    (None, 0, 4, None),                        # never resharded: any shard count (the topics hold it)
    (None, 0, 17, None),
    (Generation(2, 8), 2, 8, None),
    (None, 1, 4, ["generation 1", "generation 0 is current"]),
    (Generation(2, 8), 1, 8, ["generation 1", "generation 2 is current"]),
    (Generation(2, 8), 3, 8, ["generation 3", "generation 2 is current"]),
    (Generation(2, 8), 2, 4, ["8 shards", "shards=4", "set shards=8"]),
    (Generation(2, 8, 3, 16), 2, 8, ["generation 2 (8 shards)", "generation 3 (16 shards)"]),
    (Generation(2, 8, 3, 16), 3, 16, ["generation 2 (8 shards)", "generation 3 (16 shards)"]),
])
def test_require_current(found: Generation | None, generation: int, shards: int,
                         refusal: list[str] | None) -> None:
    """A worker runs only on the current generation with its shard count, and never mid-reshard."""
    if refusal is None:
        require_current(found, "url-dedup", generation, shards)
        return
    with pytest.raises(StaleGeneration) as raised:
        require_current(found, "url-dedup", generation, shards)
    for words in [*refusal, "url-dedup"]:
        assert words in str(raised.value)


# -- keyed entries ----------------------------------------------------------------------------------

@settings(max_examples=200)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(0, 2), shard_counts, shard_counts,
       shard_counts)
def test_keyed_entries_go_where_their_routing_key_goes(keys: list[bytes], prefix: int, old: int, new: int,
                                                       again: int) -> None:
    """Each entry lands on exactly the shard its shard records will be routed to, and where it lands
    depends on the final count only: M -> N -> M' is M -> M'."""
    via, straight = KeyedMove(old, new, prefix), KeyedMove(new, again, prefix)
    for key in keys:
        value = b"v" + key
        placed = list(KeyedMove(1, old, prefix).place(0, key, value))
        assert len(placed) == 1 and placed[0][1:] == (key, value)
        [(shard, moved_key, moved_value)] = via.place(placed[0][0], key, value)
        assert 0 <= shard < new and shard == partition_for(key[prefix:], new)
        assert (moved_key, moved_value) == (key, value)
        [(final, _, _)] = straight.place(shard, moved_key, moved_value)
        assert final == partition_for(key[prefix:], again) == straight.shard_of(key)
    assert list(via.finish()) == []


# -- revisit ----------------------------------------------------------------------------------------

def history(rate_bin: int) -> bytes:
    return encode_history(FetchHistory(first_fetch_s=0.0, last_fetch_s=DAY, interval_s=DAY,
                                       rate_bin=rate_bin))


def budget(**fields: Any) -> bytes:
    return BudgetState(**fields).encode()


def placed_by_shard(placed: list[Placed]) -> dict[int, dict[bytes, bytes]]:
    by_shard: dict[int, dict[bytes, bytes]] = {}
    for shard, key, value in placed:
        assert key not in by_shard.setdefault(shard, {}), "an entry written twice to one shard"
        by_shard[shard][key] = value
    return by_shard


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([UNESTIMATED, 0, 1, 7, 40, RATE_BINS - 1]), min_size=1, max_size=60),
       st.integers(1, 9))
def test_revisit_histograms_are_recounted_from_the_histories_each_new_shard_gets(
        bins: list[int], shards: int) -> None:
    """Every new shard's histogram is exact for the pages it holds, and together they count every
    page once, in the bin its history says."""
    move = RevisitMove(4, shards)
    move.place(0, ALLOCATION_KEY, budget(mu_s=DAY, spend_weight=5.0, clock_s=1000.0))
    placed: list[Placed] = []
    for number, rate_bin in enumerate(bins):
        key = HISTORY_PREFIX + fingerprint(number)
        out = list(move.place(0, key, history(rate_bin)))
        assert out == [(partition_for(key[1:], shards), key, history(rate_bin))]
        placed += out
    allocations = list(move.finish())
    assert [(shard, key) for shard, key, _ in allocations] == [(s, ALLOCATION_KEY) for s in range(shards)]
    budgets = [BudgetState.decode(value) for _, _, value in allocations]
    expected = Counter(bins)
    total = [sum(column) for column in zip(*(b.counts for b in budgets), strict=True)]
    assert total == [expected[rate_bin] for rate_bin in range(RATE_BINS)]
    assert sum(b.unestimated for b in budgets) == expected[UNESTIMATED]
    by_shard = placed_by_shard(placed)
    for shard, new in enumerate(budgets):
        mine = Counter(bins[number] for number in range(len(bins))
                       if HISTORY_PREFIX + fingerprint(number) in by_shard.get(shard, {}))
        assert new.counts == [mine[rate_bin] for rate_bin in range(RATE_BINS)]
        assert new.unestimated == mine[UNESTIMATED]


def test_revisit_budgets_are_merged_and_split_over_the_new_shards() -> None:
    """mu and the correction carry over (each new shard re-solves at once); the realised spend is
    split so that the new shards' feedback adds up to the old shards'."""
    move = RevisitMove(2, 4)
    move.place(0, ALLOCATION_KEY, budget(mu_s=100.0, correction=1.5, spend_weight=8.0, clock_s=5000.0,
                                      started_s=10.0))
    move.place(0, ALLOCATION_KEY, budget(mu_s=300.0, correction=0.5, spend_weight=4.0, clock_s=5000.0))
    for number in range(40):
        move.place(0, HISTORY_PREFIX + fingerprint(number), history(number % 3))
    budgets = [BudgetState.decode(value) for _, _, value in move.finish()]
    assert len(budgets) == 4
    for new in budgets:
        # neither old budget counted pages: their weights are equal
        assert new.mu_s == pytest.approx(200.0) and new.correction == pytest.approx(1.0)
        assert new.spend_weight == pytest.approx(3.0) and new.clock_s == 5000.0 and new.started_s == 10.0
        assert new.since_solve >= 1 << 20
    assert sum(new.pages for new in budgets) == 40


def test_merge_budgets_weights_by_pages_and_decays_spend_to_the_latest_clock() -> None:
    """Two old shards, one with 4 pages and one with 6, the second's clock a spend window later."""
    first = BudgetState(counts=[3] + [0] * (RATE_BINS - 1), unestimated=1, mu_s=100.0, correction=1.2,
                        spend_weight=10.0, clock_s=1000.0, started_s=500.0)
    second = BudgetState(counts=[0, 0, 6] + [0] * (RATE_BINS - 3), mu_s=200.0, correction=0.8,
                         spend_weight=4.0, clock_s=1000.0 + SPEND_WINDOW_S)
    merged = merge_budgets([first, second])
    assert merged.counts == [3, 0, 6] + [0] * (RATE_BINS - 3)
    assert merged.unestimated == 1 and merged.pages == 10
    assert merged.mu_s == pytest.approx(0.4 * 100.0 + 0.6 * 200.0)
    assert merged.correction == pytest.approx(0.4 * 1.2 + 0.6 * 0.8)
    assert merged.spend_weight == pytest.approx(10.0 * math.exp(-1.0) + 4.0)
    assert merged.clock_s == 1000.0 + SPEND_WINDOW_S
    assert merged.started_s == 500.0  # the earliest start known; the second never re-fetched
    assert math.isnan(merge_budgets([second]).started_s)


def test_a_revisit_state_without_budgets_moves_only_its_histories() -> None:
    """Shards that never fetched have no allocation entry; the new ones start without one too."""
    move = RevisitMove(2, 3)
    assert len(list(move.place(0, HISTORY_PREFIX + fingerprint(1), history(4)))) == 1
    assert list(move.finish()) == []


def test_revisit_host_priors_are_added_up_and_split_over_the_new_shards() -> None:
    """A host's changes are per shard (its pages there): the new shards get even shares of the sum."""
    move = RevisitMove(2, 4)
    assert list(move.place(0, host_key("example.com"), HostChanges(3.0, 1000.0, 50.0).encode())) == []
    assert list(move.place(1, host_key("example.com"), HostChanges(1.0, 600.0, 50.0).encode())) == []
    move.place(1, host_key("other.example"), HostChanges(2.0, 80.0, 50.0).encode())
    placed = list(move.finish())
    hosts = [(shard, key, HostChanges.decode(value)) for shard, key, value in placed if key.startswith(b"p")]
    assert sorted((shard, key) for shard, key, _ in hosts) == sorted(
        (shard, host_key(host)) for shard in range(4) for host in ("example.com", "other.example"))
    for _, key, state in hosts:
        expected = (1.0, 400.0) if key == host_key("example.com") else (0.5, 20.0)
        assert (state.changes, state.watched_s) == pytest.approx(expected)


@pytest.mark.parametrize("key", [b"meta:other", b"x" + fingerprint(1), HISTORY_PREFIX + fingerprint(1)[:15],
                                 HISTORY_PREFIX + fingerprint(1) + b"!", b""])
def test_revisit_refuses_a_key_it_does_not_know(key: bytes) -> None:
    """Moving an entry it cannot place would lose it silently in the new generation."""
    with pytest.raises(StateError):
        list(RevisitMove(3, 2).place(0, key, history(0)))


# -- content seen -----------------------------------------------------------------------------------

def content_move(old_shards: int, shards: int) -> StateMove:
    """The page stage's store, moved table by table (:mod:`streams.stages.content_seen.move`)."""
    return StoreSpec(tables=state_tables(design())).move(old_shards, shards)


@settings(max_examples=100, deadline=None)
@given(simhashes, shard_counts)
def test_a_bucket_goes_where_its_table_key_routes(simhash: int, shards: int) -> None:
    """A bucket lives in the shard its probes go to."""
    move = content_move(4, shards)
    for table_key in design().keys(simhash):
        assert list(move.place(0, b"t" + table_key, b"bucket")) == [
            (partition_for(table_key, shards), b"t" + table_key, b"bucket")]
    assert list(move.finish()) == []


@settings(max_examples=100, deadline=None)
@given(simhashes, shard_counts)
def test_a_simhash_record_goes_once_to_every_shard_its_tables_route_to(simhash: int, shards: int) -> None:
    """Later probes read the record wherever one of its tables lives; of its copies in several old
    shards (the same pages), only the lowest old shard's is written."""
    move = content_move(4, shards)
    key = record_key(simhash)
    holders = sorted({partition_for(k, 4) for k in design().keys(simhash)})
    first = list(move.place(holders[0], key, b"pages"))
    assert {shard for shard, _, _ in first} == {partition_for(k, shards) for k in design().keys(simhash)}
    assert len(first) == len({shard for shard, _, _ in first})
    assert all((k, v) == (key, b"pages") and 0 <= shard < shards for shard, k, v in first)
    for other in holders[1:]:
        assert list(move.place(other, key, b"pages")) == []  # the same record from another old shard


@pytest.mark.parametrize("key", [b"meta:gather", b"meta:queue", b"meta:routing", b"meta:horizons",
                                 b"meta:local"])
def test_gather_progress_starts_afresh(key: bytes) -> None:
    """Progress views describe the old shards; the new ones start as on a first start."""
    assert list(content_move(4, 4).place(0, key, b"{}")) == []


@pytest.mark.parametrize("kind", [b"p", b"w", b"q", b"v", b"e"])
def test_waiting_pages_refuse_the_reshard(kind: bytes) -> None:
    """A waiting page's horizon counts the old shards: the state must be drained first."""
    with pytest.raises(ReshardRefused, match="--drain"):
        content_move(4, 4).place(0, kind + b"\x00" * 16, b"{}")


@pytest.mark.parametrize("key", [b"meta:other", b"s" + b"\x00" * 7, b"y" + b"\x00" * 8, b"a" + b"\x00" * 16,
                                 b"z" + b"\x00" * 8])
def test_content_seen_refuses_a_key_it_does_not_know(key: bytes) -> None:
    with pytest.raises(StateError):
        content_move(4, 4).place(0, key, b"{}")


# -- the drain cut ----------------------------------------------------------------------------------

@dataclass
class StubConsumer:
    """Log ends by partition; records each pause and each watermark query."""

    ends: dict[tuple[str, int], int]
    queried: list[tuple[str, int, float, bool]] = field(default_factory=list)
    paused: list[list[tuple[str, int]]] = field(default_factory=list)

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        self.queried.append((tp.topic, tp.partition, timeout, cached))
        return 0, self.ends[(tp.topic, tp.partition)]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.append(sorted((tp.topic, tp.partition) for tp in partitions))


@dataclass(frozen=True)
class StubMessage:
    where: str
    number: int
    at: int

    def topic(self) -> str:
        return self.where

    def partition(self) -> int:
        return self.number

    def offset(self) -> int:
        return self.at


def within(cut: Cut, batch: list[StubMessage]) -> list[StubMessage]:
    return cast(list[StubMessage], cut.within(cast(Any, batch)))


def test_the_cut_keeps_input_below_each_partition_log_end_at_assignment() -> None:
    """Input at or past the cut is left for the next generation; shard records are always decided."""
    consumer = StubConsumer({("in", 0): 10, ("in", 1): 5, ("in", 2): 0})
    cut = Cut(consumer, ["in"], 2.5)  # type: ignore[arg-type]
    cut.assigned([TopicPartition("in", 0), TopicPartition("in", 1), TopicPartition("in", 2),
                  TopicPartition("shards", 0)])
    assert sorted(consumer.queried) == [("in", 0, 2.5, False), ("in", 1, 2.5, False), ("in", 2, 2.5, False)]
    assert (cut.end(("in", 0)), cut.end(("in", 2)), cut.end(("shards", 0))) == (10, 0, None)
    batch = [StubMessage("in", 0, 8), StubMessage("shards", 0, 1_000), StubMessage("in", 0, 9),
             StubMessage("in", 1, 4), StubMessage("in", 0, 10), StubMessage("in", 0, 11),
             StubMessage("in", 2, 0), StubMessage("other", 0, 99)]
    kept = within(cut, batch)
    assert kept == [batch[0], batch[1], batch[2], batch[3], batch[7]]  # in order; unassigned kept
    assert consumer.paused == [[("in", 0), ("in", 2)]]
    assert len(within(cut, [StubMessage("in", 1, 3), StubMessage("shards", 0, 7)])) == 2
    assert consumer.paused == [[("in", 0), ("in", 2)]]  # nothing past a cut: nothing paused
    cut.revoked([("in", 0)])
    assert cut.end(("in", 0)) is None
    assert within(cut, [StubMessage("in", 0, 50)]) == [StubMessage("in", 0, 50)]


# -- the local state directory ----------------------------------------------------------------------

def test_local_state_of_an_earlier_generation_is_replaced(tmp_path: Path) -> None:
    """Stores of the old shard count would answer from the wrong shards: they are rebuilt from the
    new generation's changelog instead."""
    directory = tmp_path / "state" / "url-dedup"
    check_local_shards(directory, 4, 0)
    assert (directory / "SHARDS").read_text() == "4\n"
    assert (directory / "GENERATION").read_text() == "0\n"
    (directory / "shard-0000").mkdir()
    (directory / "shard-0000" / "data").write_bytes(b"old")
    (directory / "shard-0003").write_bytes(b"old")
    (directory / "keep-me").write_bytes(b"not a store")
    check_local_shards(directory, 4, 0)  # restart of the same generation keeps everything
    assert (directory / "shard-0000" / "data").exists()
    check_local_shards(directory, 8, 2)
    assert not (directory / "shard-0000").exists() and not (directory / "shard-0003").exists()
    assert (directory / "keep-me").exists()
    assert (directory / "GENERATION").read_text() == "2\n"
    assert (directory / "SHARDS").read_text() == "8\n"


def test_local_state_of_a_newer_generation_is_refused(tmp_path: Path) -> None:
    """An out-of-date worker must not run on (or delete) the current generation's state."""
    check_local_shards(tmp_path, 8, 3)
    (tmp_path / "shard-0000").mkdir()
    with pytest.raises(StaleGeneration, match="generation 3"):
        check_local_shards(tmp_path, 8, 2)
    assert (tmp_path / "shard-0000").exists() and (tmp_path / "GENERATION").read_text() == "3\n"


@pytest.mark.parametrize("generation", [0, 2])
def test_another_shard_count_at_the_same_generation_is_refused(tmp_path: Path, generation: int) -> None:
    """Only a reshard (a new generation) changes the shard count of local state."""
    check_local_shards(tmp_path, 4, generation)
    with pytest.raises(ShardCountMismatch, match="shards=4"):
        check_local_shards(tmp_path, 8, generation)


def test_state_from_before_generations_counts_as_generation_0(tmp_path: Path) -> None:
    """A directory written before the GENERATION marker existed is kept at generation 0."""
    (tmp_path / "SHARDS").write_text("4\n")
    (tmp_path / "shard-0000").mkdir()
    check_local_shards(tmp_path, 4, 0)
    assert (tmp_path / "shard-0000").exists() and (tmp_path / "GENERATION").read_text() == "0\n"
    with pytest.raises(ShardCountMismatch):
        check_local_shards(tmp_path, 2, 0)
