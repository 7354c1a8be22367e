"""Routing marks and shard progress: how a gather shard learns that a horizon is covered.

Last in each transaction (the stage's per-transaction callback, :mod:`streams.runtime.schedule`) a
worker sends every shard a *mark*: how far it has routed its input partitions and their log ends
(when they moved). A shard that takes a mark keeps it (``meta:routing``) and, last in the same
transaction, sends every gather shard its *progress*: all it has been told, which is what it has
probed through. Both are produced after the records they vouch for, which is the whole argument of
:mod:`streams.stages.content_seen.horizon`.
"""

from __future__ import annotations

from collections.abc import Mapping

from streams.runtime.api import BatchState, Emit, InputPositions, InternalStream, OwnedShards
from streams.stages.content_seen.horizon import RoutingView
from streams.stages.content_seen.shard_records import Mark, Progress

ROUTING_KEY = b"meta:routing"  # what marks told this shard


class Relay:
    """One worker's marks and its shards' progress."""

    def __init__(self, shards: InternalStream, owned: OwnedShards, topic_index: Mapping[str, int]) -> None:
        """``topic_index``: each input topic's number (its place among the stage's input topics)."""
        self._shards = shards
        self._owned = owned
        self._topic_index = topic_index
        self._marked: set[int] = set()  # shards that took a new mark in this part of a batch

    def take_mark(self, shard: int, mark: Mark, state: BatchState) -> None:
        """A worker routed its input this far: kept, and told to the gather shards at the end of
        the transaction, after the replies and notices of the probes it vouches for."""
        view = RoutingView.decode(state.get(ROUTING_KEY))
        if view.merge(mark.view):
            state.set(ROUTING_KEY, view.encode())
            self._marked.add(shard)

    def end_of_part(self, inputs: InputPositions | None) -> list[Emit]:
        """This worker's marks to every shard (when its positions moved), then the progress of each
        shard that took a new mark in this transaction to every gather shard."""
        emits = []
        shards = self._shards
        if inputs is not None:
            mark = shards.frame(Mark(self.routing_view(inputs)))
            emits += [Emit(shards.topic, mark, b"mark", shard) for shard in range(shards.shards)]
        states = self._owned.states
        for shard in sorted(self._marked):
            state = states.get(shard)
            if state is not None:
                told = shards.frame(Progress(shard, RoutingView.decode(state.get(ROUTING_KEY))))
                emits += [Emit(shards.topic, told, b"progress", to) for to in range(shards.shards)]
        self._marked.clear()
        return emits

    def routing_view(self, inputs: InputPositions) -> RoutingView:
        """Input positions by topic name, as a view by topic index (the stage's input topics)."""
        index = self._topic_index
        return RoutingView({index[t]: n for t, n in inputs.partitions.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.routed.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.log_ends.items() if t in index})
