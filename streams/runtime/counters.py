"""What a worker counts: running totals for the metrics layer, and the age of a batch.

Kept apart from the engine that updates them (:mod:`streams.runtime.engine`) so the metrics layer
and its tests depend on the numbers only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka import Message

AGE_SAMPLE: Final = 64  # records whose timestamps give a batch's oldest (oldest_timestamp_ms)


@dataclass
class Counters:
    """Running totals of one worker, read by :mod:`streams.ops.metrics` after each batch.

    Updated only by the engine's thread; the metrics layer reads them from its batch observer in
    that same thread (:mod:`streams.ops.metrics`), so no lock is needed.
    """

    consumed: int = 0
    emitted: int = 0
    dead_letters: int = 0
    batches: int = 0
    aborted_batches: int = 0
    recovered_records: int = 0
    deferred_records: int = 0  # input records a stage had no room for, consumed again later
    consumed_by_topic: dict[str, int] = field(default_factory=dict)
    emitted_by_topic: dict[str, int] = field(default_factory=dict)
    # records for a shard owned here, decided at once instead of produced to their internal topic
    at_once_by_topic: dict[str, int] = field(default_factory=dict)
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)  # the stage's, by name (StageContext)
    labelled: dict[str, Counter[str]] = field(default_factory=dict)  # a stage's counts by label value
    events: Counter[str] = field(default_factory=Counter)  # a stage's other counts (URLs forgotten...)
    last_batch_s: float = 0.0
    last_batch_oldest_ms: int | None = None  # the earliest record timestamp of the last batch


def oldest_timestamp_ms(batch: Sequence[Message]) -> int | None:
    """The earliest producer or log-append timestamp among at most about :data:`AGE_SAMPLE` records
    spread evenly over a batch, all of a smaller one (``None`` if none carries one).

    Sampled because reading every record's timestamp cost 2 % of a URL worker's time, for one
    gauge. A batch holds runs of records per partition, oldest first within each run, so what the
    sample can miss is at most the spread of ``len(batch) // AGE_SAMPLE`` consecutive records of
    one partition: milliseconds, for a metric in seconds.
    """
    step = max(1, len(batch) // AGE_SAMPLE)
    stamps = [stamp for kind, stamp in (message.timestamp() for message in batch[::step]) if kind != 0]
    return min(stamps) if stamps else None
