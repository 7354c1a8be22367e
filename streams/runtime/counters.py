"""What a worker counts: running totals for the metrics layer, and the age of a batch.

Kept apart from the engine that updates them (:mod:`streams.runtime.engine`) so the metrics layer
and its tests depend on the numbers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Message


@dataclass
class Counters:
    """Running totals of one worker, read by :mod:`streams.ops.metrics` after each batch.

    Updated only by the engine's thread; the metrics layer reads them from ``on_batch`` in that
    same thread, so no lock is needed.
    """

    consumed: int = 0
    emitted: int = 0
    dead_letters: int = 0
    batches: int = 0
    aborted_batches: int = 0
    recovered_records: int = 0
    consumed_by_topic: dict[str, int] = field(default_factory=dict)
    emitted_by_topic: dict[str, int] = field(default_factory=dict)
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    last_batch_s: float = 0.0
    last_batch_oldest_ms: int | None = None  # the earliest record timestamp of the last batch


def oldest_timestamp_ms(batch: Sequence[Message]) -> int | None:
    """The earliest producer or log-append timestamp in a batch (``None`` if none carries one)."""
    stamps = [stamp for kind, stamp in (message.timestamp() for message in batch) if kind != 0]
    return min(stamps) if stamps else None
