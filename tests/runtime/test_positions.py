"""Input positions (streams/runtime/positions.py): where assigned inputs stand, what a part moves, and
that a report counts only once committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from streams.runtime.drain import NoCut
from streams.runtime.offline import LineMessage
from streams.runtime.positions import InputTracker


@dataclass
class StubConsumer:
    """Committed offsets and log ends by partition; the client's cached ends lag behind."""

    committed_at: dict[int, int]
    ends: dict[int, int]
    cached: dict[int, int] = field(default_factory=dict)

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.committed_at.get(tp.partition, -1001))
                for tp in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        if cached:
            return -1001, self.cached.get(tp.partition, -1001)
        return 3, self.ends[tp.partition]

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions={0: None, 1: None, 2: None})})


def test_assigned_inputs_stand_at_their_committed_offsets_and_known_ends() -> None:
    consumer = StubConsumer({0: 10}, {0: 50, 1: 7})
    tracker = InputTracker(consumer, frozenset({"in"}), 1.0, NoCut())  # type: ignore[arg-type]
    tracker.assigned([TopicPartition("in", 0), TopicPartition("in", 1), TopicPartition("shards", 0)])
    positions = tracker.after([])
    assert positions is not None
    # none committed on partition 1: the consumer starts at the first offset kept (3)
    assert dict(positions.routed) == {("in", 0): 10, ("in", 1): 3}
    assert dict(positions.log_ends) == {("in", 0): 50, ("in", 1): 7}  # not the client's unknown -1001
    assert dict(positions.partitions) == {"in": 3}


def test_a_part_moves_the_positions_and_only_a_committed_report_counts() -> None:
    consumer = StubConsumer({0: 10}, {0: 50}, cached={0: 60})
    tracker = InputTracker(consumer, frozenset({"in"}), 1.0, NoCut())  # type: ignore[arg-type]
    tracker.assigned([TopicPartition("in", 0)])
    part = [LineMessage("in", 10, b"x"), LineMessage("in", 11, b"y"), LineMessage("shards", 99, b"z")]
    moved = tracker.after(part)
    assert moved is not None and dict(moved.routed) == {("in", 0): 12}
    assert dict(moved.log_ends) == {("in", 0): 60}
    assert tracker.after(part) == moved  # aborted: reported again by the next part
    tracker.committed(moved)
    assert tracker.after([]) is None  # nothing moved since the committed report
    tracker.revoked([("in", 0)])
    after = tracker.after([])
    assert after is not None and not after.routed  # another worker reports it now, not this one
