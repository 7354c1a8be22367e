"""Scheduled callbacks: what a stage asks to run last in a transaction, as Kafka Streams' punctuators.

:meth:`Punctuators.each_transaction`, registered in ``Stage.init`` through the context: last in
every transaction, with this worker's :class:`~streams.runtime.message.InputPositions` when they
moved since the last committed transaction (else None), and once more in a transaction of its own
when they moved while no input came (a new assignment). The page stage tells its shards how far the
input has been routed this way (:mod:`streams.stages.content_seen.relay`). (Callbacks on wall-clock
time, Kafka Streams' ``WALL_CLOCK_TIME``, were offered too; no stage used them, and they went.)

What a callback returns is produced in the transaction it runs in, so it commits or aborts with the
records and state writes it speaks for; its records for shards this worker owns take the local path
as a processor's do (:mod:`streams.runtime.local_path`: decided at once, their outputs checked).
Input positions are tracked only when a callback wants them (:meth:`Punctuators.tracker`):
tracking reads every record's offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer

from streams.runtime.batch import Emit
from streams.runtime.drain import Cut
from streams.runtime.message import InputPositions
from streams.runtime.positions import InputTracker, NoPositions, PositionTracker

EachTransaction = Callable[[InputPositions | None], list[Emit]]


@dataclass
class Punctuators:
    """The scheduled callbacks of one stage in one worker (see the module docstring)."""

    _each: list[EachTransaction] = field(default_factory=list)

    def each_transaction(self, callback: EachTransaction) -> None:
        self._each.append(callback)

    def tracker(self, consumer: Consumer, inputs: Iterable[str], timeout_s: float,
                cut: Cut) -> PositionTracker:
        """Input positions, tracked when a callback wants them."""
        if self._each:
            return InputTracker(consumer, frozenset(inputs), timeout_s, cut)
        return NoPositions()

    def run(self, positions: InputPositions | None) -> list[Emit]:
        """What the callbacks emit last in a transaction."""
        emits: list[Emit] = []
        for callback in self._each:
            emits += callback(positions)
        return emits
