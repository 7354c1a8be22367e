"""Restore from nothing (streams/runtime/restore.py): which shards go to processes of their own, and how
they are shared out; the group view's answers (streams/runtime/group_view.py). No broker:
tests/kafka/test_standby_kafka.py and bench/restore_bench.py run the processes against one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime import restore
from streams.runtime.describe import Answer
from streams.runtime.group_view import GroupView, membership
from streams.runtime.restore import ShardOpener, processes_for, restore_cold
from streams.runtime.store import PartitionStore
from streams.runtime.store_spec import RocksOpener


@pytest.mark.parametrize(("backlog", "count", "groups"), [
    ({0: 10, 1: 10, 2: 10, 3: 10}, 2, [[0, 2], [1, 3]]),
    ({0: 100, 1: 10, 2: 10, 3: 10}, 2, [[0], [1, 2, 3]]),     # the big one alone
    ({0: 5, 1: 7}, 4, [[1], [0]]),                             # no empty group
    ({3: 1}, 2, [[3]]),
])
def test_shards_are_shared_out_by_backlog(backlog: dict[int, int], count: int,
                                          groups: list[list[int]]) -> None:
    assert restore._split(backlog, count) == groups


@given(st.dictionaries(st.integers(0, 63), st.integers(0, 10**6), min_size=1), st.integers(1, 8))
def test_every_shard_is_restored_once_and_no_group_is_much_heavier(backlog: dict[int, int],
                                                                   count: int) -> None:
    groups = restore._split(backlog, count)
    assert sorted(shard for group in groups for shard in group) == sorted(backlog)
    loads = [sum(backlog[shard] for shard in group) for group in groups]
    assert max(loads) - min(loads) <= max(backlog.values())  # greedy: within one shard's backlog


def _opener(tmp_path: Path) -> ShardOpener:
    return ShardOpener(RocksOpener(), tmp_path, 4, 8, 8)


def test_nothing_goes_to_processes_unless_it_pays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Any] = []
    monkeypatch.setattr(restore, "_run", lambda *args: ran.append(args) or {})
    small = {0: 10, 1: 10, 2: 10, 3: 10}
    monkeypatch.setattr(restore, "_backlog", lambda kafka, topic, shards: {s: small[s] for s in shards})
    assert restore_cold(None, _opener(tmp_path), range(4), "cl", 2).total == 0  # type: ignore[arg-type]
    assert not ran  # too little to replay
    big = {shard: restore.PARALLEL_MIN_OFFSETS for shard in range(4)}
    monkeypatch.setattr(restore, "_backlog", lambda kafka, topic, shards: {s: big[s] for s in shards})
    assert restore_cold(None, None, range(4), "cl", 2).total == 0  # type: ignore[arg-type]
    assert restore_cold(None, _opener(tmp_path), range(4), "cl", 1).total == 0  # type: ignore[arg-type]
    assert not ran  # no opener a process could use (a test's stores), or one process
    (tmp_path / "shard-0001").mkdir()  # local state: opened and recovered in the worker
    restore_cold(None, _opener(tmp_path), range(4), "cl", 2)  # type: ignore[arg-type]
    [(_, _, groups, _, _)] = ran
    assert sorted(shard for group in groups for shard in group) == [0, 2, 3]


def test_a_shard_opener_pickles_for_a_process_and_opens_where_the_worker_would(tmp_path: Path) -> None:
    import pickle

    opener = _opener(tmp_path)
    again = pickle.loads(pickle.dumps(opener))  # noqa: S301 - our own value, as multiprocessing sends it
    assert again == opener and again.path(3) == tmp_path / "shard-0003"
    store: PartitionStore = again(3)
    try:
        store.apply({b"k": b"v"}, 7)
        assert (store.get(b"k"), store.changelog_offset()) == (b"v", 7)
    finally:
        store.close()


def test_auto_restore_processes_is_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore, "this_process_cores", lambda: 6)
    assert (processes_for("auto"), processes_for(1), processes_for(0)) == (6, 1, 0)


class _Describer:
    def __init__(self, answers: list[Answer | None]) -> None:
        self.answers, self.asked = answers, 0

    def ask(self) -> None:
        self.asked += 1

    def wait(self, timeout_s: float) -> bool:
        return bool(self.answers)

    def take(self) -> Answer | None:
        return self.answers.pop(0)

    def close(self) -> None:
        pass


def test_the_view_remembers_who_owned_a_partition_last_besides_this_worker() -> None:
    answers: list[Answer | None] = [
        {"members": [["w0", [["t", 0]]], ["w1", [["t", 1]]]], "stable": True},
        {"members": [["w0", [["t", 0], ["t", 1]]]], "stable": True},   # w1 gone: w0 holds both
        None,                                                           # the coordinator did not answer
        {"members": [["w0", []], ["w2", [["t", 0], ["t", 1]]]], "stable": False},  # mid-rebalance
    ]
    first = membership(answers[0])  # type: ignore[arg-type]
    view = GroupView(_Describer(answers), "g", "w0", 1.0, 1.0)
    assert view.refresh() == first
    view.refresh()
    assert view.owners_before == {("t", 1): "w1"} and view.latest is not None
    assert view.refresh() is None and view.latest.members == {"w0"}  # the last answer stays
    view.refresh()
    assert view.owners_before == {("t", 1): "w1"}  # what an unstable group says is not remembered
