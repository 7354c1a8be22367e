"""Scheduled callbacks: what a stage asks to run last in a transaction, as Kafka Streams' punctuators.

Two kinds, both registered in ``Stage.init`` through the context:

- :meth:`Punctuators.each_transaction`: last in every transaction, with this worker's
  :class:`~streams.runtime.message.InputPositions` when they moved since the last committed
  transaction (else None), and once more in a transaction of its own when they moved while no
  input came (a new assignment). The page stage tells its shards how far the input has been
  routed this way (:mod:`streams.stages.content_seen.relay`).
- :meth:`Punctuators.every`: wall-clock time (Kafka Streams' ``WALL_CLOCK_TIME``): last in the first
  transaction after each ``interval_s``, in a transaction of its own when no input comes.

What a callback returns is produced in the transaction it runs in, so it commits or aborts with the
records and state writes it speaks for. Input positions are tracked only when a callback wants
them (:meth:`Punctuators.tracker`): tracking reads every record's offset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer

from streams.runtime.batch import Emit
from streams.runtime.drain import Cut
from streams.runtime.message import InputPositions
from streams.runtime.positions import InputTracker, NoPositions, PositionTracker

EachTransaction = Callable[[InputPositions | None], list[Emit]]
Timed = Callable[[], list[Emit]]


@dataclass
class _Timer:
    interval_s: float
    callback: Timed
    due_s: float
    ran: bool = False  # in the open transaction: due again from its commit, or at once after an abort


@dataclass
class Punctuators:
    """The scheduled callbacks of one stage in one worker (see the module docstring)."""

    clock: Callable[[], float] = time.monotonic
    _each: list[EachTransaction] = field(default_factory=list)
    _timers: list[_Timer] = field(default_factory=list)

    def each_transaction(self, callback: EachTransaction) -> None:
        self._each.append(callback)

    def every(self, interval_s: float, callback: Timed) -> None:
        if interval_s <= 0:
            raise ValueError(f"a timed callback needs a positive interval, not {interval_s}")
        self._timers.append(_Timer(interval_s, callback, self.clock() + interval_s))

    def tracker(self, consumer: Consumer, inputs: Iterable[str], timeout_s: float,
                cut: Cut) -> PositionTracker:
        """Input positions, tracked when a callback wants them."""
        if self._each:
            return InputTracker(consumer, frozenset(inputs), timeout_s, cut)
        return NoPositions()

    def due(self) -> bool:
        """Whether a timed callback is due (with no input, a transaction of its own runs it)."""
        now = self.clock()
        return any(timer.due_s <= now and not timer.ran for timer in self._timers)

    def run(self, positions: InputPositions | None) -> list[Emit]:
        """What the callbacks emit last in a transaction: every per-transaction one, every due timer."""
        emits: list[Emit] = []
        for callback in self._each:
            emits += callback(positions)
        if self._timers:
            now = self.clock()
            for timer in self._timers:
                if timer.due_s <= now and not timer.ran:
                    timer.ran = True
                    emits += timer.callback()
        return emits

    def committed(self) -> None:
        now = self.clock()
        for timer in self._timers:
            if timer.ran:
                timer.due_s, timer.ran = now + timer.interval_s, False

    def aborted(self) -> None:
        for timer in self._timers:
            timer.ran = False
