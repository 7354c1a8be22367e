"""Routing marks and shard progress: how a gather shard learns that a horizon is covered.

Last in each transaction (the stage's per-transaction callback, :mod:`streams.runtime.schedule`) a
worker sends every shard a *mark*: how far it has routed its input partitions and their log ends
(when they moved). A shard that takes a mark keeps it (``meta:routing``) and, last in the same
transaction, sends every gather shard its *progress*: all it has been told, which is what it has
probed through. Both are produced after the records they vouch for, which is the whole argument of
:mod:`streams.stages.content_seen.horizon`.

On the local path (:mod:`streams.stages.content_seen.local`, which says why each step keeps that
argument) a worker merges its marks directly into the owned shards that have vouched for it, and
gives its shards' progress to the gather shards it owns that have vouched for its current token
as one :class:`VouchedProgress` record each, which the runtime's local path has the gather shard's
processor take at once, deciding, in the same transaction, the pages whose horizons that covers
(at most ``DECISIONS_PER_RECORD`` a gather shard, :mod:`streams.stages.content_seen.gather`, the
rest after a drain record). Everything else goes as records, as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from streams.runtime.api import BatchState, Emit, InternalStream, Table
from streams.runtime.extras import InputPositions, OwnedShards, starts_afresh
from streams.stages.content_seen.horizon import RoutingView, encode_horizon
from streams.stages.content_seen.local import Ownership
from streams.stages.content_seen.shard_records import Mark, Progress, VouchedProgress

ROUTING_KEY: Final = b"meta:routing"  # what marks told this shard
TABLES: Final = {"routing view": Table(ROUTING_KEY, starts_afresh)}  # the old shards' marks


class Relay:
    """One worker's marks and its shards' progress."""

    def __init__(self, shards: InternalStream, owned: OwnedShards, ownership: Ownership,
                 topic_index: Mapping[str, int]) -> None:
        """``topic_index``: each input topic's number (its place among the stage's input topics)."""
        self._shards = shards
        self._owned = owned
        self._ownership = ownership
        self._topic_index = topic_index
        self._marked: set[int] = set()  # shards that took a new mark in this part of a batch
        # The log ends of this worker's input partitions in its last marks: the horizon its pages
        # start from (encoded, :func:`streams.stages.content_seen.horizon.encode_horizon`).
        self.reported_ends = b""

    def take_mark(self, shard: int, view: RoutingView, state: BatchState) -> None:
        """A worker routed its input this far: kept, and told to the gather shards at the end of
        the transaction, after the replies and notices of the probes it vouches for."""
        routing = RoutingView.decode(state.get(ROUTING_KEY))
        if routing.merge(view):
            state.set(ROUTING_KEY, routing.encode())
            self._marked.add(shard)

    def end_of_part(self, inputs: InputPositions | None) -> list[Emit]:
        """This worker's marks (when its positions moved): merged directly into the owned shards
        that vouched for it, sent to the others; then the progress of each shard that took a new
        mark in this transaction: to the gather shards owned here that have vouched for this
        worker's current token in one :class:`VouchedProgress` each (taken at once, with the pages
        it makes ready), and to every other gather shard as a :class:`Progress` record."""
        emits: list[Emit] = []
        shards, ownership = self._shards, self._ownership
        if inputs is not None:
            ownership.inputs(inputs)
            view = self.routing_view(inputs)
            self.reported_ends = encode_horizon(view.ends)
            mark: bytes | None = None
            for shard in range(shards.shards):
                state = ownership.claimed(shard)
                if state is not None:
                    self.take_mark(shard, view, state)
                    continue
                mark = mark or shards.frame(Mark(view, ownership.token))
                emits.append(Emit(shards.topic, mark, b"mark", shard))
        if not self._marked:
            return emits
        states = self._owned.states
        told = tuple((shard, RoutingView.decode(states[shard].get(ROUTING_KEY)))
                     for shard in sorted(self._marked) if shard in states)
        self._marked.clear()
        vouched = ownership.vouched_gathers()
        token = ownership.token
        for shard, routing in told:
            progress: bytes | None = None
            for to in range(shards.shards):
                if to not in vouched:
                    progress = progress or shards.frame(Progress(shard, routing, token))
                    emits.append(Emit(shards.topic, progress, b"progress", to))
        if told and vouched:
            given = shards.frame(VouchedProgress(told))
            emits += [Emit(shards.topic, given, b"progress", to) for to in sorted(vouched)]
        return emits

    def routing_view(self, inputs: InputPositions) -> RoutingView:
        """Input positions by topic name, as a view by topic index (the stage's input topics)."""
        index = self._topic_index
        return RoutingView({index[t]: n for t, n in inputs.partitions.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.routed.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.log_ends.items() if t in index})
