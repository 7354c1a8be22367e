"""How a preparing stage's input records reach its ``route`` step: prepared in one batch, routed in
the next, and only as many as the stage has room for.

Why routed a batch late: the page stage prepares (analyses) its pages in child processes, which
would otherwise wait idle while the worker commits a batch and consumes the next one, and the worker
would wait while they analyse. Handing the children batch k's pages before the worker routes
batch k-1's (whose analysis is done by then) keeps both busy; measured in
docs/decisions/0002-compiled-hot-path.md. Input records held from one batch to the next are consumed
but uncommitted, like any record of an open batch: after a crash they are consumed again from the
committed offsets, after a rebalance the new owner consumes them, and an aborted batch rewinds
their partitions too (:meth:`InputFlow.rewind`).

Why only as many as the stage has room for: a stage that keeps what it routed in memory until its
shard records come back (the page stage keeps pages until their verdict) would otherwise route a
backlog far faster than its replies return. The records it does not take are consumed again
later: their partitions are rewound to the first of them and paused until the stage is ready for
input, as Kafka Streams pauses a partition whose buffer holds ``buffered.records.per.partition``.

Why not always: at a light load a batch holds a page or two and little else, and routing them a
batch late made each wait for the worker's next batch and its commit (with two page workers, whose
loops are kept busy by each other's shard records, 30-60 ms of a page's verdict). So a batch that
finds nothing held and takes at most :data:`ROUTE_AT_ONCE_MAX` input records routes them in
itself, after its shard records (the children analyse them meanwhile). A backlog's batches are
larger, and each one holds the last one's records, so they stay a batch apart.

A stage that prepares nothing gets :class:`DirectFlow`: each batch's records routed in it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from streams.runtime.counters import Counters
from streams.runtime.message import Message as StageMessage

log = logging.getLogger(__name__)

Partition = tuple[str, int]


def first_offsets(messages: Iterable[Message]) -> dict[Partition, int]:
    """Each partition's first offset among ``messages`` (which keep each partition's order)."""
    first: dict[Partition, int] = {}
    for message in messages:
        first.setdefault((message.topic() or "", message.partition() or 0), message.offset() or 0)
    return first


Prepare = Callable[[Sequence[StageMessage]], int]
ROUTE_AT_ONCE_MAX = 4  # input records a batch routes itself when none are held (module docstring)


def settled() -> None:
    """The default ``settle``: nothing is prepared in the background, so nothing to wait for."""


class Flow(Protocol):
    """How a batch's input records reach the stage's ``route`` step."""

    @property
    def holding(self) -> bool: ...

    def arrange(self, batch: list[Message]) -> list[Message]: ...

    def resume_if_ready(self) -> None: ...

    def revoked(self, partitions: set[Partition]) -> None: ...

    def rewind(self, aborted: list[Message]) -> None: ...


class DirectFlow:
    """Each batch routed as it was consumed (a stage that prepares nothing)."""

    holding = False

    def __init__(self, consumer: Consumer, inputs: frozenset[str], counters: Counters) -> None:
        self._consumer = consumer

    def arrange(self, batch: list[Message]) -> list[Message]:
        return batch

    def resume_if_ready(self) -> None:
        pass

    def revoked(self, partitions: set[Partition]) -> None:
        pass

    def rewind(self, aborted: list[Message]) -> None:
        """After an abort: each partition of the aborted records back to its first offset among them."""
        for (topic, partition), offset in first_offsets(aborted).items():
            self._consumer.seek(TopicPartition(topic, partition, offset))


class InputFlow:
    """The input records of a stage that prepares them (``context.prepare_input``), batch to batch."""

    def __init__(self, prepare: Prepare, ready_for_input: Callable[[], bool],
                 consumer: Consumer, inputs: frozenset[str], counters: Counters, *,
                 settle: Callable[[], None] = settled) -> None:
        """``settle()``: wait until the records prepared last are ready to route (see
        :meth:`resume_if_ready`)."""
        self._prepare = prepare
        self._ready_for_input = ready_for_input
        self._settle = settle
        self._consumer = consumer
        self._inputs = inputs
        self._counters = counters  # the worker's: deferred records are counted there
        self._held: list[Message] = []  # prepared in the last batch, routed in the next
        self._paused: set[Partition] = set()  # deferred until the stage is ready for input

    @property
    def holding(self) -> bool:
        """Whether input records wait to be routed (a batch is due even if nothing new came)."""
        return bool(self._held)

    def arrange(self, batch: list[Message]) -> list[Message]:
        """What to process in this batch: its shard records, then the input records prepared in the
        last one. This batch's input records go to the stage to prepare, as many as it takes, and
        are held for the next batch (routed in this one when none were held and they are few: the
        module docstring); the others are deferred. Each partition keeps its order, which
        is all the offsets need; input records only emit and read no state the batch writes, so
        deciding shard records first changes no outcome."""
        topics = self._inputs
        inputs = [message for message in batch if message.topic() in topics]
        taken = self._prepare(inputs)
        if taken < len(inputs):
            self._defer(inputs[taken:])
        if self._held or taken > ROUTE_AT_ONCE_MAX:
            routed, self._held = self._held, inputs[:taken]
        else:
            routed = inputs[:taken]
        return [message for message in batch if message.topic() not in topics] + routed

    def _defer(self, deferred: list[Message]) -> None:
        """Consume these records again later: each partition rewound to its first deferred record
        (its later records in the batch are deferred too) and paused until the stage has room."""
        first = first_offsets(deferred)
        positions = [TopicPartition(topic, partition, offset) for (topic, partition), offset in first.items()]
        self._consumer.pause(positions)
        for position in positions:
            self._consumer.seek(position)
        self._paused.update(first)
        self._counters.deferred_records += len(deferred)
        log.debug("no room for %d input records: %d partitions paused", len(deferred), len(positions))

    def resume_if_ready(self) -> None:
        """Before each consume. With records held for routing, their preparation is finished first:
        the consumer's fetch queue fills while the stage's children prepare, so what it holds then
        is taken into this batch and handed to them before the held records are routed and
        committed. Waiting after the consume instead (in ``prepare``, as before) found the queue
        just emptied by the last batch, took nothing, and left the children idle while the worker
        routed and committed. Then the paused partitions resume if the stage has room."""
        if self._held:
            self._settle()
        if self._paused and self._ready_for_input():
            self._consumer.resume([TopicPartition(topic, partition) for topic, partition in self._paused])
            self._paused.clear()

    def revoked(self, partitions: set[Partition]) -> None:
        """Another worker consumes these from their committed offsets now: forget them here."""
        self._held = [message for message in self._held
                      if (message.topic(), message.partition()) not in partitions]
        self._paused -= partitions

    def rewind(self, aborted: list[Message]) -> None:
        """After an abort: every partition of the aborted records and of the held ones goes back to
        its first offset among them, to be consumed again."""
        for (topic, partition), offset in first_offsets([*aborted, *self._held]).items():
            self._consumer.seek(TopicPartition(topic, partition, offset))
        self._held = []
