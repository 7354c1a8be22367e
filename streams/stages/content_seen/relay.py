"""Routing marks and shard progress: how a gather shard learns that a horizon is covered.

Last in each transaction a worker sends every shard a *mark*: how far it has routed its input
partitions and their log ends (when they moved). A shard that takes a mark keeps it
(``meta:routing``) and, last in the same transaction, sends every gather shard its *progress*: all
it has been told, which is what it has probed through. Both are produced after the records they
vouch for, which is the whole argument of :mod:`streams.stages.content_seen.horizon`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

from streams.runtime.batch import BatchState, Emit
from streams.stages.content_seen.horizon import RoutingView

if TYPE_CHECKING:
    from streams.runtime.stage import InputPositions

MARK, PROGRESS = b"M", b"G"  # shard record kinds
ROUTING_KEY = b"meta:routing"  # what marks told this shard
_SHARD = struct.Struct(">H")


class Relay:
    """One worker's marks and its shards' progress."""

    def __init__(self, state_topic: str, topic_index: Mapping[str, int]) -> None:
        """``topic_index``: each input topic's number (its place among the stage's route topics)."""
        self._state_topic = state_topic
        self._topic_index = topic_index
        self._marked: set[int] = set()  # shards that took a new mark in this part of a batch

    def take_mark(self, shard: int, body: bytes, state: BatchState) -> None:
        """A worker routed its input this far: kept, and told to the gather shards at the end of
        the transaction, after the replies and notices of the probes it vouches for."""
        view = RoutingView.decode(state.get(ROUTING_KEY))
        if view.merge(RoutingView.decode(body)):
            state.set(ROUTING_KEY, view.encode())
            self._marked.add(shard)

    def end_of_part(self, inputs: InputPositions | None, states: Mapping[int, BatchState],
                    shards: int) -> list[Emit]:
        """This worker's marks to every shard (when its positions moved), then the progress of each
        shard that took a new mark to every gather shard."""
        emits = []
        if inputs is not None and shards:
            mark = MARK + self.routing_view(inputs).encode()
            emits += [Emit(self._state_topic, mark, b"mark", shard) for shard in range(shards)]
        for shard in sorted(self._marked):
            state = states.get(shard)
            if state is not None:
                told = PROGRESS + _SHARD.pack(shard) + (state.get(ROUTING_KEY) or b"")
                emits += [Emit(self._state_topic, told, b"progress", to) for to in range(shards)]
        self._marked.clear()
        return emits

    def routing_view(self, inputs: InputPositions) -> RoutingView:
        """Input positions by topic name, as a view by topic index (the stage's route topics)."""
        index = self._topic_index
        return RoutingView({index[t]: n for t, n in inputs.partitions.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.routed.items() if t in index},
                           {(index[t], p): o for (t, p), o in inputs.log_ends.items() if t in index})


def progress_of(body: bytes) -> tuple[int, RoutingView]:
    """A progress record's value (after its kind byte): the shard, and what it has probed through."""
    return _SHARD.unpack_from(body)[0], RoutingView.decode(body[_SHARD.size:])
