"""``--offline``: run a stage's own route and process steps on JSON lines, without Kafka.

The same :class:`~streams.runtime.stage.Stage` object that the engine drives is driven here: each
input line is a record of the stage's first input topic; what ``route`` sends to the shard topic is
processed at once against one local store (one shard: the offline run sees every key), and the
records emitted to ``output_topic`` are written to stdout, one JSON line each, flushed as soon as
they are decided so a simulator can drive the stage one record at a time. A rejected line is
reported on stderr (and, with ``errors_to_stdout``, as ``{"line", "error", "detail"}`` on stdout).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Final

import orjson

from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.identity import ShardIdentities
from streams.runtime.routing import RoutingMemory
from streams.runtime.stage import Needs, Stage, StageContext
from streams.runtime.store import PartitionStore

OFFLINE_DEAD_LETTERS: Final = "dead-letters"  # a stage's own dead letters offline: not written out


@dataclass(frozen=True, slots=True)
class LineMessage:
    """One input line dressed as a Kafka message (offset = line number)."""

    _topic: str
    _offset: int
    _value: bytes
    _key: bytes | None = None
    _partition: int = 0

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        """No record time offline: pages without ``fetched_at`` are ordered by line number."""
        return (0, 0)


def run_offline(stage: Stage, store: PartitionStore, lines: Iterable[bytes], output_topic: str,
                out: IO[bytes] | None = None, errors_to_stdout: bool = False) -> int:
    """Feed ``lines`` through ``stage``; write what reaches ``output_topic``; return records written."""
    out = out if out is not None else sys.stdout.buffer
    source = stage.route_topics[0]
    shard = bind_offline(stage, store)
    written = 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip(b"\r\n")
        if not line.strip():
            continue
        try:
            emits = decide_offline(stage, shard, LineMessage(source, number, line))
        except RecordRejected as rejected:
            _report(number, rejected, out if errors_to_stdout else None)
            continue
        for emit in emits:
            if emit.topic == output_topic and emit.value is not None:
                out.write(emit.value + b"\n")
                written += 1
        out.flush()
    return written


def offline_context(stage_name: str, needs: Needs, store: PartitionStore,
                    identities: ShardIdentities) -> StageContext:
    """The context of an ``--offline`` run: one store, shard 0, holding every key."""
    owned = OwnedShards({0: store}, identities.first_use)
    routing = RoutingMemory(needs.routing_memory_keys) if needs.routing_memory_keys else None
    return StageContext(stage_name, 0, owned, OFFLINE_DEAD_LETTERS,
                        RuntimeSettings.dead_letter_max_value_bytes, routing=routing)


@dataclass(frozen=True, slots=True)
class OfflineShard:
    """The one shard of an ``--offline`` run, and the check of its identity."""

    owned: OwnedShards
    identities: ShardIdentities


def bind_offline(stage: Stage, store: PartitionStore) -> OfflineShard:
    """Bind ``stage`` to a context over ``store`` alone (:func:`offline_context`),
    after checking the store's identity; returns the one shard, as :func:`decide_offline` takes it."""
    needs = stage.needs()
    identities = ShardIdentities(needs.identity)
    identities.opened(0, store)
    context = offline_context(stage.name, needs, store, identities)
    stage.bind(context)
    return OfflineShard(context.owned, identities)


def decide_offline(stage: Stage, shard: OfflineShard, message: LineMessage) -> list[Emit]:
    """Route one line, then process what reaches the shard topic until nothing does.

    A stage may send records back to its own shard topic (content_seen's probes and replies);
    offline, every shard is the one local store, so they are processed here in the order sent, each
    applied at once.
    """
    decided: list[Emit] = []
    pending = deque(stage.route(message))
    while pending:
        routed = pending.popleft()
        if routed.topic != stage.state_topic:
            decided.append(routed)
            continue
        shard.owned.begin()
        state = shard.owned.state(0)
        assert state is not None
        shard_message = LineMessage(stage.state_topic, message.offset(), routed.value or b"", routed.key)
        pending.extend(stage.process(shard_message, state))
        state.store.apply(state.writes, None)
        shard.identities.committed()  # applied at once, as committed: checked once, not per record
    return decided


def _report(number: int, rejected: RecordRejected, out: IO[bytes] | None) -> None:
    print(f"line {number}: {rejected.reason}: {rejected.detail}", file=sys.stderr)
    if out is not None:
        out.write(orjson.dumps({"line": number, "error": rejected.reason, "detail": rejected.detail}) + b"\n")
