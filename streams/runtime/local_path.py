"""The local path: a record for a shard this worker owns is decided at once, not sent through its topic.

An internal topic only carries a record to the worker that owns its shard. When that is this
worker, the trip (encode, produce, commit, fetch back, decode, and a transaction more before the
record's outputs are visible) decides nothing a direct call could not. So each record a stage's
processor emits to one of its internal topics (one that allows it, :attr:`InternalTopic.local
<streams.runtime.topology.InternalTopic.local>`) goes, when its shard is owned here and settled,
to the processor of that topic at once, in the open transaction, against the shard's state as
that transaction sees it (:class:`~streams.runtime.batch.OwnedShards`): the state its records from
the topic are decided against, so the writes and outputs commit or abort with the batch, and the
group generation that fences a topic record's transaction fences this one. What that processor
emits goes the same way, records before the records they caused (first in, first out), so a shard
sees one worker's records in the order they were sent, as through the topic. The same processors
decide a record read from the topic and one decided here: a stage has one entry point per
processor, and never asks which shards it owns. The records a per-transaction callback returns
(:mod:`streams.runtime.schedule`) take the path too; they have no record that sent them, so one
refused here is logged by the engine, not made a dead letter.

A record a shard sends to itself (same topic, same partition) goes through the topic, always: it is
how a processor goes on in a later transaction (the URL stage's forget scans a shard one part per
transaction, each part sending the next part's record to its own partition), and deciding it at
once would run every part in one transaction, however large the shard.

*Settled* (:mod:`streams.runtime.backlog`): a shard just taken may still hold records in its topic
that were routed to it before; until they are decided its records go through the topic too, after
them. A sighting routed by another worker is decided when its record arrives, and finds what was
decided here: the first one decided wins, as through the topic.

The offline driver (:mod:`streams.runtime.offline`) owns the one shard there is, and every internal
topic is its local path: there is no topic. A record refused on the local path (its processor
raised, or its outputs exceed their topics' limits) leaves a dead letter of the record that sent it
(the engine's: the input record, or a record of an internal topic, which has a place in its topic
and can be replayed from the letter; the refused record is named in the detail), and the rest of
what that record caused stands, as it would through the topic; offline the line is refused whole,
as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from streams.errors import RecordRejected, StreamsError
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.message import Message
from streams.runtime.partitioner import partition_for

ShardHandler = Callable[[Message, BatchState], list[Emit]]
Refuse = Callable[["LocalRecord", Exception], list[Emit]]  # a local record refused: its dead letter
Check = Callable[[list[Emit]], None]  # a record's outputs against their topics' limits

NOT_WRITTEN: Final = -1  # the offset of a record decided on the local path: it has none
NO_TIMESTAMP: Final = (0, -1)  # confluent_kafka's TIMESTAMP_NOT_AVAILABLE, and no time


class LocalRecord:
    """A record decided on the local path, as its processor reads it: the topic, shard, key and value
    it was sent with; the time of the record that caused it (its offset has none: -1; a
    per-transaction callback's record has no cause: no time either)."""

    __slots__ = ("_key", "_origin", "_partition", "_topic", "_value")

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                 origin: Message | None) -> None:
        self._topic = topic
        self._partition = partition
        self._key = key
        self._value = value
        self._origin = origin

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return NOT_WRITTEN

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return NO_TIMESTAMP if self._origin is None else self._origin.timestamp()

    @property
    def origin(self) -> Message | None:
        """The input (or topic) record whose processing sent it; None for a per-transaction callback's."""
        return self._origin


def _nothing_to_check(emits: list[Emit]) -> None:
    """Offline: no topic limits (the driver writes lines, not records)."""


class LocalPath:
    """Decides the records for owned, settled shards of the local topics (see the module docstring).

    ``handlers``: each internal topic's processor, by topic; ``local``: the topics whose records
    may be decided here; ``tags``: of those, the topics whose typed records of these tags only may
    be (:attr:`InternalTopic.local <streams.runtime.topology.InternalTopic.local>`); ``shards``: the
    shard count (a record's shard, when it names none, is its key's,
    :func:`~streams.runtime.partitioner.partition_for`). ``refuse``: the dead letter of a
    local record its processor refused (None: the refusal is raised to the caller, offline).
    ``offline``: the offline driver's: no shard has a backlog to wait for, and a shard's record to
    itself is decided at once too (there is no later transaction: the line is decided whole).
    ``counts``: the records decided here, by topic (the worker's metrics)."""

    __slots__ = ("_check", "_counts", "_handlers", "_local", "_offline", "_owned", "_refuse", "_shards",
                 "_tags")

    def __init__(self, handlers: Mapping[str, ShardHandler], local: frozenset[str], shards: int,
                 owned: OwnedShards, refuse: Refuse | None = None, check: Check = _nothing_to_check,
                 offline: bool = False, counts: dict[str, int] | None = None,
                 tags: Mapping[str, frozenset[int]] | None = None) -> None:
        self._handlers: Final = {topic: handler for topic, handler in handlers.items() if topic in local}
        self._local: Final = frozenset(self._handlers)
        self._tags: Final[dict[str, frozenset[int]]] = dict(tags or {})
        self._shards: Final = shards
        self._owned: Final = owned
        self._refuse: Final = refuse
        self._check: Final = check
        self._offline: Final = offline
        self._counts: Final[dict[str, int]] = {} if counts is None else counts

    @property
    def active(self) -> bool:
        """Whether any topic has a local path (else :meth:`run` is never worth calling)."""
        return bool(self._local)

    def run(self, emits: list[Emit], origin: Message | None) -> list[Emit]:
        """``emits`` (a record's, checked already, or None's: a per-transaction callback's), with
        every record for an owned, settled shard of a local topic decided here, and what those
        decided emit in turn: what is left to produce, in order."""
        local = self._local
        sender = ("", -1) if origin is None else (origin.topic() or "", origin.partition() or 0)
        if len(emits) == 1:  # most records send one (a URL to its shard): no queue for it
            emit = emits[0]
            partition = self._shard_of(emit) if emit.topic in local and self._takes(emit) else None
            caused = None if partition is None else self._decide(emit, partition, origin, sender)
            if caused is None or partition is None:
                return emits
            if not any(each.topic in local for each in caused):
                return caused
            return self._queue(caused, origin, (emit.topic, partition))
        if any(emit.topic in local for emit in emits):
            return self._queue(emits, origin, sender)
        return emits

    def _queue(self, emits: list[Emit], origin: Message | None, sender: tuple[str, int]) -> list[Emit]:
        """Each of ``emits`` (sent by ``sender``, a topic and partition) decided here or left, and
        what those decided cause after them (first in, first out)."""
        local = self._local
        pending = [(emit, sender) for emit in emits]  # read from ``at`` on; what is decided, appended
        out: list[Emit] = []
        at = 0
        while at < len(pending):
            emit, by = pending[at]
            at += 1
            partition = self._shard_of(emit) if emit.topic in local and self._takes(emit) else None
            caused = None if partition is None else self._decide(emit, partition, origin, by)
            if caused is None or partition is None:
                out.append(emit)
            else:
                pending.extend((each, (emit.topic, partition)) for each in caused)
        return out

    def _decide(self, emit: Emit, partition: int, origin: Message | None,
                sender: tuple[str, int]) -> list[Emit] | None:
        """What ``emit`` (of a local topic, for shard ``partition``, sent by ``sender``) causes,
        decided here; None when a shard sends it to itself, or its shard is not owned and settled
        here (it goes through its topic); its dead letter when it is refused."""
        if not self._offline and partition == sender[1] and emit.topic == sender[0]:
            return None  # a shard's record to itself: how a processor goes on in a later transaction
        owned = self._owned
        state = owned.state(partition) if self._offline else owned.settled(partition)
        if state is None:
            if partition in owned:
                owned.detours += 1  # owned, not settled: through the topic, after the shard's backlog
            return None
        record = LocalRecord(emit.topic, partition, emit.key, emit.value, origin)
        counts = self._counts
        counts[emit.topic] = counts.get(emit.topic, 0) + 1
        try:
            caused = self._handlers[emit.topic](record, state)
            self._check(caused)
        except Exception as error:  # noqa: BLE001 - one bad record must not stop the stage
            worker_error = isinstance(error, StreamsError) and not isinstance(error, RecordRejected)
            if self._refuse is None or worker_error:
                raise  # offline's line is refused whole; a worker's configuration or state is wrong
            return self._refuse(record, error)
        return caused

    def _takes(self, emit: Emit) -> bool:
        """Whether ``emit``, of a local topic, is of a record type its path takes (every type unless
        the topic names some)."""
        tags = self._tags.get(emit.topic)
        if tags is None:
            return True
        value = emit.value
        return value is not None and len(value) > 0 and value[0] in tags

    def _shard_of(self, emit: Emit) -> int | None:
        """The shard ``emit`` goes to: the one it names, else its key's; None when it has neither
        (it goes where the producer sends it)."""
        partition = emit.partition
        if partition is not None:
            return partition
        key = emit.key
        return None if key is None else partition_for(key, self._shards)
