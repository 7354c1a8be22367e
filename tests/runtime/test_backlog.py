"""Shards taken settle once the records routed to them before are decided (streams.runtime.backlog):
the steps table-driven over a stand-in for the consumer's offset calls (pure logic, no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.runtime.backlog import Backlogs
from streams.runtime.batch import OwnedShards
from streams.runtime.store import MemoryStore

SHARDS = "app.url-dedup-shards"


@dataclass
class Offsets:
    """The two offset calls Backlogs makes, answered from dicts."""

    ends: dict[int, int]
    positions: dict[int, int] = field(default_factory=dict)
    commits: dict[int, int] = field(default_factory=dict)

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.commits.get(tp.partition, -1001))
                for tp in partitions]

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.ends[tp.partition]) for tp in partitions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001))
                for tp in partitions]


def _taken(ends: dict[int, int], commits: dict[int, int] | None = None
           ) -> tuple[Offsets, Backlogs, OwnedShards]:
    offsets = Offsets(ends, commits=commits or {})
    owned = OwnedShards({shard: MemoryStore() for shard in ends})
    backlogs = Backlogs(offsets, [SHARDS], owned.pending)  # type: ignore[arg-type]
    backlogs.assigned([TopicPartition(SHARDS, shard) for shard in ends]
                      + [TopicPartition("app.frontier", 0)])  # an input partition: no backlog
    return offsets, backlogs, owned


@pytest.mark.parametrize(("positions", "pending_after_one", "pending_after_two"), [
    ({}, {0, 1}, {0, 1}),                     # nothing fetched yet: the position is not known
    ({0: 5, 1: 9}, {0, 1}, {1}),              # shard 0 at its end: settles when the next batch starts
    ({0: 7, 1: 12}, {0, 1}, set()),           # past the end (records routed since): settled too
])
def test_a_shard_settles_the_batch_after_its_backlog_was_consumed(
        positions: dict[int, int], pending_after_one: set[int], pending_after_two: set[int]) -> None:
    offsets, backlogs, owned = _taken({0: 5, 1: 12})
    assert owned.pending == {0, 1}
    assert owned.settled(0) is None and owned.state(0) is not None  # its own records are decided
    offsets.positions = positions
    backlogs.batch_starting()
    assert owned.pending == pending_after_one
    backlogs.batch_starting()
    assert owned.pending == pending_after_two
    for shard in {0, 1} - pending_after_two:
        assert owned.settled(shard) is not None


def test_an_aborted_batch_undoes_the_promise() -> None:
    offsets, backlogs, owned = _taken({0: 5})
    offsets.positions = {0: 5}
    backlogs.batch_starting()
    backlogs.aborted()  # the batch holding the backlog's last records comes again
    offsets.positions = {0: 3}  # rewound
    backlogs.batch_starting()
    assert owned.pending == {0}
    offsets.positions = {0: 5}
    backlogs.batch_starting()
    backlogs.batch_starting()
    assert owned.pending == set()


def test_a_revoked_shard_is_not_pending_and_a_shard_taken_again_waits_again() -> None:
    offsets, backlogs, owned = _taken({0: 5, 1: 7})
    backlogs.revoked([TopicPartition(SHARDS, 0)])
    assert owned.pending == {1}
    offsets.ends[0] = 8
    backlogs.assigned([TopicPartition(SHARDS, 0)])
    offsets.positions = {0: 5, 1: 7}
    backlogs.batch_starting()
    backlogs.batch_starting()
    assert owned.pending == {0}


@pytest.mark.parametrize(("ends", "commits", "pending"), [
    ({0: 5, 1: 9}, {0: 5, 1: 3}, {1}),   # the group's offset at the end: nothing routed waits
    ({0: 0, 1: 9}, {}, {1}),             # no offset, an empty partition: nothing either
    ({0: 4}, {}, {0}),                   # no offset, records from the start: they wait
])
def test_a_shard_with_nothing_routed_to_it_waiting_settles_at_once(
        ends: dict[int, int], commits: dict[int, int], pending: set[int]) -> None:
    _, _, owned = _taken(ends, commits)
    assert owned.pending == pending


@dataclass
class Moving(Offsets):
    """A coordinator that moves: its first answers are errors."""

    errors: list[int] = field(default_factory=list)

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return super().committed(partitions, timeout)


def test_a_coordinator_moving_while_a_shard_is_taken_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked in the rebalance callback: an error there would leave consume and stop the worker."""
    monkeypatch.setattr("streams.runtime.recovery.time.sleep", lambda _s: None)
    offsets = Moving({0: 5}, commits={0: 2}, errors=[KafkaError.NOT_COORDINATOR,
                                                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    owned = OwnedShards({0: MemoryStore()})
    backlogs = Backlogs(offsets, [SHARDS], owned.pending)  # type: ignore[arg-type]
    backlogs.assigned([TopicPartition(SHARDS, 0)])
    assert owned.pending == {0} and not offsets.errors
    refused = Moving({0: 5}, errors=[KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        Backlogs(refused, [SHARDS], set()).assigned([TopicPartition(SHARDS, 0)])  # type: ignore[arg-type]
