"""What a stage gives the runtime: its store, declared, and its processors, given a context.

A stage is processors over topics (after Kafka Streams' processor API):

1. ``route`` runs on records of the input topics (whatever their partitioning): decode, validate,
   compute the state key, and send the record on to an internal topic keyed by that key. A bad
   record raises :class:`~streams.errors.RecordRejected` and becomes a dead letter.
2. A processor per internal topic (or per record type of one) runs on records of shard *i*, the
   topic's partition *i*, against shard *i*'s state (:class:`~streams.runtime.batch.BatchState`),
   and returns what to emit: outputs, and records for other shards.

The runtime wraps them all in one Kafka transaction per batch, so the emitted records, the state
changes (as changelog records) and the consumed offsets are committed together or not at all.

Everything else is declared, not hooked: the stage's topics by name in its
:class:`streams.spec.StageSpec`, its store in :meth:`Stage.store`
(:class:`~streams.runtime.store_spec.StoreSpec`), and the services it uses asked of the
:class:`~streams.runtime.context.StageContext` in :meth:`Stage.init`; :meth:`Stage.close` lets go of
what the stage made itself (the page stage's analysis processes). The same calls serve the Kafka
engine and ``--offline``: a stage never knows which drives it.
"""

from __future__ import annotations

from typing import Protocol

from streams.runtime.context import StageContext
from streams.runtime.store_spec import StoreSpec
from streams.runtime.topology import Processors


class Stage(Protocol):
    """A stateful stage as the runtime drives it."""

    def store(self) -> StoreSpec:
        """Its shard store, declared (read before :meth:`init`, and by ``reshard`` alone)."""
        ...

    def init(self, context: StageContext) -> Processors:
        """Called once, before any record: the services it uses, asked of ``context``; its processors."""
        ...

    def close(self) -> None:
        """Called once, after the last record, by the driver that called :meth:`init` (when the
        worker stops, fails or the offline input ends): what the stage started itself is stopped
        here. The runtime closes its stores and clients itself."""
        ...
