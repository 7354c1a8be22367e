"""The records a stage's processors see, and where its input stands: the runtime's value types.

A processor reads a :class:`Message` (the part of ``confluent_kafka.Message`` the stages use, so
unit tests and the offline driver hand it stubs); a stage that reads an input record back by
position uses an :class:`InputReader`; a stage's per-transaction callback learns how far this
worker has routed its input from :class:`InputPositions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class Message(Protocol):
    """The part of ``confluent_kafka.Message`` the stages use (stubbed in unit tests)."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since the epoch) as librdkafka reports it."""
        ...


class InputReader(Protocol):
    """Reads an input record back by position (:class:`streams.runtime.kafka_io.RecordReader`)."""

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The value at ``offset``; None when the record is gone."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class InputPositions:
    """How far a worker has routed its input partitions, by ``(topic, partition)``.

    ``routed``: the next offset to route (every record before it is routed, in a committed or the
    open transaction); ``log_ends``: each partition's log-end offset as last fetched; ``partitions``:
    each input topic's partition count.
    """

    routed: Mapping[tuple[str, int], int]
    log_ends: Mapping[tuple[str, int], int]
    partitions: Mapping[str, int]


class Unreadable:
    """An input reader that finds nothing (a unit test's stage, which never reads input back)."""

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        return None

    def close(self) -> None:
        pass
