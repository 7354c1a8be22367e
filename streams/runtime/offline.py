"""``--offline``: a stage driven over JSON lines and one local store, without Kafka.

The offline driver is a driver like the engine (:mod:`streams.runtime.engine`), not a mode of the
stages: it gives the stage the same context, with one shard that it owns, and runs the same
processors and services. Each input line is a record of the stage's first input topic and one
transaction of its own:

1. the stage's ``prepare_input`` has seen it, in a window of lines read ahead and handed over
   before the window before is decided, as the engine prepares a batch ahead (the page stage's
   analysis processes work on one window while the driver decides the last); then its ``route``
   step;
2. what reaches an internal topic is processed at once, in the order sent, on the one shard (the
   offline run sees every key);
3. the stage's scheduled callbacks run last (:mod:`streams.runtime.schedule`), with the input
   positions the line moved (one partition, whose log ends at the line: what a worker that
   routed it would report); what they send is processed too, and the callbacks run again until
   nothing more is sent;
4. the shard's writes are applied to the store, and the listeners hear that the line's transaction
   committed (:mod:`streams.runtime.listeners`).

Records emitted to the stage's first output are written to stdout, one JSON line each, flushed as
soon as their line is decided so a simulator can drive the stage one record at a time. A rejected
line changes nothing; it is reported on stderr (and, with ``errors_to_stdout``, as
``{"line", "error", "detail"}`` on stdout).
"""

from __future__ import annotations

import itertools
import os
import select
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Final

import orjson

from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.context import StageContext
from streams.runtime.counters import Counters
from streams.runtime.identity import ShardIdentities
from streams.runtime.listeners import Listeners
from streams.runtime.local_path import LocalPath
from streams.runtime.message import InputPositions
from streams.runtime.stage import Stage
from streams.runtime.store import PartitionStore
from streams.runtime.topology import Topology, shard_handlers

SHARD: Final = 0  # the one shard of an offline run


LINES_KEY = "offline_lines"  # the last input offset an offline run decided, in its store's metadata


@dataclass(frozen=True, slots=True)
class LineMessage:
    """One input line dressed as a Kafka message (offset = line number, counted on from the last run
    over the same state)."""

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


class LineReader:
    """The input reader of an offline run: the line being decided (a page is decided on its own line)."""

    def __init__(self) -> None:
        self.line: LineMessage | None = None

    def read(self, topic: str, partition: int, offset: int) -> bytes | None:
        line = self.line
        if line is not None and (line.topic(), line.partition(), line.offset()) == (topic, partition, offset):
            return line.value()
        return None

    def close(self) -> None:
        self.line = None


class OfflineDriver:
    """One stage over one local store (see the module docstring)."""

    def __init__(self, topology: Topology, stage: Stage, store: PartitionStore,
                 counters: Counters | None = None) -> None:
        self.topology = topology
        self.counters = counters or Counters()
        self._source = topology.input_topics[0]
        self._store = store
        # Lines are offsets of the input, counted on from the last run over the same state: a stage
        # keeps input positions in its state (the page stage's marks and progress), and positions
        # that went back to 1 would never again cover what the last run left waiting.
        self._base = int(store.get_meta(LINES_KEY) or b"0")
        self._stored_line = self._last_line = self._base
        self._identities = ShardIdentities(stage.store().identity)
        self._identities.opened(SHARD, store)
        self.owned = OwnedShards({SHARD: store}, self._identities.first_use)
        self._reader = LineReader()
        context = StageContext(topology, 1, self.owned, self._reader, self.counters,
                               RuntimeSettings.dead_letter_max_value_bytes)
        processors = stage.init(context)
        self._stage = stage
        self._route = processors.route
        # Every internal topic is the local path here: there is no topic, and every shard is owned.
        self._local = LocalPath(shard_handlers(topology, processors), frozenset(topology.shard_topics), 1,
                                self.owned, offline=True)
        self._services = context.services
        self._listeners = Listeners([self._identities, *context.services.listeners])

    def message(self, number: int, value: bytes, key: bytes | None = None) -> LineMessage:
        """Line ``number`` as a record of the stage's first input topic."""
        return LineMessage(self._source, self._base + number, value, key)

    def line_of(self, message: LineMessage) -> int:
        """The line number of ``message`` in this run's input."""
        return message.offset() - self._base

    def prepare(self, messages: Sequence[LineMessage]) -> int:
        """Lines read ahead, to the stage's ``prepare_input`` before they are decided (the page stage
        starts analysing them in its children); how many of them, the first ones, it took."""
        return self._services.prepare(messages)

    def decide(self, message: LineMessage, prepared: bool = False) -> list[Emit]:
        """One line's transaction: what it emits beyond the internal topics, in order. Raises
        RecordRejected, with the store and the memory as they were, for a line that is refused.
        ``prepared``: :meth:`prepare` took it already (else it is prepared alone, here)."""
        services, local = self._services, self._local
        states = self.owned.begin()
        self._reader.line = message
        try:
            if not prepared:
                services.prepare([message])
            decided = local.run(self._route(message), message)
            positions: InputPositions | None = self._positions(message)
            while sent := services.punctuators.run(positions):
                decided.extend(local.run(sent, message))
                positions = None  # reported: the callbacks run again only for what they sent
        except RecordRejected:
            self._listeners.aborted()  # the line's transaction: nothing of it stands
            raise
        wrote = False
        for state in states.values():
            wrote = wrote or bool(state.writes)
            state.store.apply(state.writes, None)
        self._last_line = message.offset()
        if wrote:  # the state may name this line's offset now: a next run counts on from it
            self._store_line()
        self._listeners.committed()
        return decided

    def finish(self) -> None:
        """Store the last line decided, for a next run over the same state to count on from. Lines
        that changed the state stored theirs already (a metadata write per line was a tenth of a
        URL's cost offline); the rest are named by nothing in the state, so a run that ends without
        this only counts on from a little earlier."""
        if self._last_line > self._stored_line:
            self._store_line()

    def close(self) -> None:
        """The stage's own close (:meth:`streams.runtime.stage.Stage.close`); the store is the caller's."""
        self._stage.close()

    def _store_line(self) -> None:
        self._store.set_meta(LINES_KEY, str(self._last_line).encode())
        self._stored_line = self._last_line

    def _positions(self, message: LineMessage) -> InputPositions:
        """The line routed, and the input's end at it: what a worker routing it would report."""
        place = (message.topic(), message.partition())
        return InputPositions({place: message.offset() + 1}, {place: message.offset() + 1},
                              {message.topic(): 1})


def run_offline(topology: Topology, stage: Stage, store: PartitionStore, lines: Iterable[bytes],
                out: IO[bytes] | None = None, errors_to_stdout: bool = False) -> int:
    """Feed ``lines`` through ``stage``; write what reaches its first output; return records written.

    Lines are read ahead as the engine consumes a batch ahead: each window of lines (those already
    readable, up to :data:`WINDOW_LINES`) goes to the stage's ``prepare_input`` before the last
    window's lines are decided, so the page stage's children analyse one window while the driver
    decides the one before, in order. A line is never waited for while one read is undecided, so a
    simulator writing a line and waiting for its answer still gets it."""
    out = out if out is not None else sys.stdout.buffer
    output_topic = topology.output_topics[0]
    driver = OfflineDriver(topology, stage, store)
    written = 0
    read: deque[LineMessage] = deque()  # read, not prepared yet
    prepared: list[LineMessage] = []  # prepared, decided next

    def decide_prepared() -> None:
        nonlocal written, prepared
        for message in prepared:
            try:
                emits = driver.decide(message, prepared=True)
            except RecordRejected as rejected:
                _report(driver.line_of(message), rejected, out if errors_to_stdout else None)
                continue
            for emit in emits:
                if emit.topic == output_topic and emit.value is not None:
                    out.write(emit.value + b"\n")
                    written += 1
            out.flush()
        prepared = []

    def prepare_next() -> list[LineMessage]:
        window = list(read)
        taken = driver.prepare(window) if window else 0
        for _ in range(taken):
            read.popleft()
        return window[:taken]

    try:
        for window in line_windows(lines):
            for number, line in window:
                line = line.rstrip(b"\r\n")
                if line.strip():
                    read.append(driver.message(number, line))
            following = prepare_next()
            decide_prepared()
            prepared = following
        while prepared or read:
            following = prepare_next()
            decide_prepared()
            prepared = following
        driver.finish()
    finally:
        driver.close()
    return written


WINDOW_LINES = 64  # lines read ahead at most: a batch for the analysis processes


def line_windows(lines: Iterable[bytes], size: int | None = None) -> Iterator[list[tuple[int, bytes]]]:
    """``lines`` numbered from 1, in windows of up to ``size``. From a file or pipe (``fileno``), a
    window is the lines readable without waiting, and an empty window comes before any wait for
    more: the caller decides what it holds then, so an interactive caller's line is answered
    without its next one."""
    size = size or WINDOW_LINES
    fd = _fileno(lines)
    if fd is None:
        numbered = enumerate(lines, start=1)
        while window := list(itertools.islice(numbered, size)):
            yield window
        return
    number, ready, pieces, end = 0, deque[bytes](), list[bytes](), False
    while True:
        while not end and len(ready) < size:
            if not select.select([fd], [], [], 0)[0]:
                if ready:
                    break
                yield []  # about to wait: decide what was read first
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                end = True
                break
            *complete, rest = chunk.split(b"\n")
            if complete:
                complete[0] = b"".join([*pieces, complete[0]])
                pieces = []
                ready.extend(complete)
            if rest:
                pieces.append(rest)
        if end and pieces:
            ready.append(b"".join(pieces))
            pieces = []
        if not ready:
            return
        window = []
        while ready and len(window) < size:
            number += 1
            window.append((number, ready.popleft()))
        yield window


def _fileno(lines: Iterable[bytes]) -> int | None:
    try:
        return int(lines.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def _report(number: int, rejected: RecordRejected, out: IO[bytes] | None) -> None:
    print(f"line {number}: {rejected.reason}: {rejected.detail}", file=sys.stderr)
    if out is not None:
        out.write(orjson.dumps({"line": number, "error": rejected.reason, "detail": rejected.detail}) + b"\n")
