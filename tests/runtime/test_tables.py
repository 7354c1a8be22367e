"""Named stores (:mod:`streams.runtime.tables`): declared tables, their views and their moves, then a
stage of two of them (:mod:`testing.numbered`) on the engine over the in-memory Kafka."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import ConfigError, ReshardRefused, StateError
from streams.runtime.batch import BatchState
from streams.runtime.partitioner import partition_for
from streams.runtime.store import MemoryStore
from streams.runtime.store_spec import StoreSpec
from streams.runtime.tables import Table, TablesMove, refused, starts_afresh
from streams.runtime.topology import InternalTopic
from testing.numbered import COUNTS, SEEN, SEP, NumberedStage
from testing.stages import plain_topology, running

TABLES = {"keyed": Table(b"k"), "progress": Table(b"meta:progress", starts_afresh),
          "waiting": Table(b"w", refused("pages are waiting: drain first"))}


@pytest.mark.parametrize(("tables", "fault"), [
    ({"a": Table(b"a"), "ab": Table(b"ab")}, "prefix b'a' begins b'ab'"),
    ({"meta": Table(b"meta:"), "gather": Table(b"meta:gather")}, "prefix b'meta:' begins b'meta:gather'"),
    ({"empty": Table(b"")}, "empty prefix"),
])
def test_a_layout_where_an_entry_could_be_two_tables_entries_is_refused(
        tables: dict[str, Table], fault: str) -> None:
    with pytest.raises(ConfigError, match=fault):
        StoreSpec(tables=tables)


def test_a_table_reads_and_writes_its_own_entries_in_the_open_transaction() -> None:
    store = MemoryStore()
    store.apply({b"kx": b"committed", b"wx": b"other table"}, 0)
    state = BatchState(store)
    keyed = TABLES["keyed"]
    assert keyed.get(state, b"x") == b"committed"
    keyed.set(state, b"y", b"1")
    keyed.delete(state, b"x")
    assert (keyed.get(state, b"y"), keyed.get(state, b"x")) == (b"1", None)
    assert state.writes == {b"ky": b"1", b"kx": None}
    assert list(keyed.items(store)) == [(b"x", b"committed")] and keyed.read(store, b"x") == b"committed"


@pytest.mark.parametrize(("key", "placed"), [
    (b"kexample.com", [(partition_for(b"example.com", 3), b"kexample.com", b"v")]),
    (b"meta:progress", []),
])
def test_each_entry_moves_by_its_tables_rule(key: bytes, placed: list[tuple[int, bytes, bytes]]) -> None:
    move = StoreSpec(tables=TABLES).move(2, 3)
    assert list(move.place(0, key, b"v")) == placed


@pytest.mark.parametrize(("key", "error"), [
    (b"wpage", ReshardRefused), (b"xunknown", StateError), (b"meta:other", StateError),
])
def test_an_entry_in_flight_refuses_the_reshard_and_one_no_table_declares_fails_it(
        key: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        list(StoreSpec(tables=TABLES).move(2, 3).place(0, key, b"v"))


def test_a_store_with_neither_tables_nor_layout_cannot_be_resharded_and_a_layout_wins() -> None:
    with pytest.raises(ReshardRefused, match="no way to move"):
        StoreSpec().move(1, 2)
    whole = starts_afresh(1, 2)
    assert StoreSpec(tables=TABLES, layout=lambda old, new: whole).move(1, 2) is whole


def test_the_move_says_what_it_wrote_per_table() -> None:
    move = TablesMove(TABLES, 1, 2)
    for key in (b"ka", b"kb", b"meta:progress"):
        list(move.place(0, key, b"v"))
    list(move.finish())
    assert move.summary() == "entries written per table: keyed 2, progress 0, waiting 0"


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=8).filter(lambda g: SEP not in g),
                          st.binary(max_size=8)), max_size=30), st.integers(1, 5), st.integers(1, 5))
def test_the_numbered_stages_tables_keep_each_group_in_one_shard_whatever_the_counts(
        entries: list[tuple[bytes, bytes]], old: int, new: int) -> None:
    move = NumberedStage().store().move(old, new)
    for group, item in entries:
        [(count_shard, _, _)] = move.place(0, COUNTS.prefix + group, b"1")
        [(seen_shard, _, _)] = move.place(0, SEEN.prefix + group + SEP + item, b"1")
        assert count_shard == seen_shard == partition_for(group, new)


@pytest.mark.parametrize("local", [True, False])
def test_the_numbered_stage_numbers_each_groups_new_items_once(local: bool) -> None:
    topology = plain_topology(("input",), ("output",), (InternalTopic("groups", local=local),), "numbered")
    records = [(b"a", b"g1"), (b"b", b"g1"), (b"a", b"g1"), (b"c", b"g2"), (b"a", b"g2"), (b"b", b"g1"),
               (b"", b"g1"), (b"d", b"g\x00")]
    with running(NumberedStage(), topology, shards=2) as (engine, broker, stores):
        for item, group in records:
            broker.append("input", 0, item, group)
        for _ in range(4):
            engine.step()
        out = sorted((m.key(), m.value()) for m in broker.committed_records("output"))
        assert out == [(b"a", b"g1 1"), (b"a", b"g2 2"), (b"b", b"g1 2"), (b"c", b"g2 1")]
        assert len(broker.committed_records("dlq")) == 2
        assert (broker.committed_records("groups") == []) is local
        counts = Counter({group: int(value)
                          for store in stores.values() for group, value in COUNTS.items(store)})
        assert counts == {b"g1": 2, b"g2": 2}
