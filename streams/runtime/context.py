"""What the runtime gives a stage: one context of general services, the same under every driver.

After Kafka Streams' ``ProcessingContext``: a stage's ``init`` receives a :class:`StageContext`,
asks it for the services it uses and returns its processors; the stage never learns what drives it
(a Kafka worker, :mod:`streams.runtime.engine`, or ``--offline``, :mod:`streams.runtime.offline`).

- ``shards``, ``owned``: the shard count and the shards this worker owns, each as the open
  transaction sees it (read it, never keep a shard's state beyond the record at hand);
- :meth:`~StageContext.output` and :meth:`~StageContext.internal`: the topics of its named outputs
  and internal topics (the runtime names them);
- ``input_reader``: an input record read back by position;
- :meth:`~StageContext.listen`: a :class:`~streams.runtime.listeners.TransactionListener` of its
  own, told when a transaction commits or aborts, when a record is refused and when shards go
  elsewhere (the URL stage's memory of what it routed, the page stage's caches);
- :meth:`~StageContext.each_transaction`: a callback run last in every transaction
  (:mod:`streams.runtime.schedule`);
- :meth:`~StageContext.prepare_input`: see each batch's input before routing it, routing as many as
  it has room for (:mod:`streams.runtime.inflow`);
- :meth:`~StageContext.dead_letter`, ``decisions``, ``events``, :meth:`~StageContext.counter`: its
  own dead letters and counts (``events``: what is not a decision, the URLs a forget let go...;
  ``counter(series)``: a count by label value that its spec declares, the page stage's racing
  copies);
- :meth:`~StageContext.check_outputs`: the outputs of a decision taken outside a record's
  processing (in a per-transaction callback), checked as a record's outputs are.

Every service a stage does not ask for is there anyway, doing nothing (no listeners, no callbacks, a
flow that routes each batch as it came): the drivers never ask whether a stage uses one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from confluent_kafka import Consumer

from streams import records
from streams.runtime.batch import Emit, OwnedShards
from streams.runtime.counters import Counters
from streams.runtime.inflow import DirectFlow, Flow, InputFlow, Prepare, settled
from streams.runtime.listeners import TransactionListener
from streams.runtime.message import InputReader
from streams.runtime.schedule import EachTransaction, Punctuators
from streams.runtime.topology import InternalStream, Topology

FlowFactory = Callable[[Consumer, frozenset[str], Counters], Flow]
OutputCheck = Callable[[list[Emit]], None]


def _ready() -> bool:
    return True


def _no_limits(emits: list[Emit]) -> None:
    """No topic limits to check (the offline driver writes lines, not records)."""


@dataclass
class Services:
    """What a stage asked for in ``init``; the drivers read it once, after."""

    listeners: list[TransactionListener] = field(default_factory=list)
    punctuators: Punctuators = field(default_factory=Punctuators)
    flow: FlowFactory = DirectFlow
    prepare: Prepare = len  # offline: take every record
    ready_for_input: Callable[[], bool] = _ready


class StageContext:
    """The services of one stage in one worker (see the module docstring)."""

    __slots__ = ("_check", "_dead_letter_max_value_bytes", "_labelled", "_topology", "decisions", "events",
                 "input_reader", "input_topics", "owned", "services", "shards")

    def __init__(self, topology: Topology, shards: int, owned: OwnedShards, input_reader: InputReader,
                 counters: Counters, dead_letter_max_value_bytes: int,
                 check_outputs: OutputCheck = _no_limits) -> None:
        """``check_outputs``: the engine's check of a record's outputs against their topics' limits
        (:meth:`streams.runtime.outputs.Outputs.check`)."""
        self._topology = topology
        self._check = check_outputs
        self.shards: Final = shards
        self.owned: Final = owned
        self.input_reader: Final = input_reader
        self.input_topics: Final = topology.input_topics
        self.decisions: Final[Counter[str]] = counters.decisions
        self._labelled = counters.labelled
        self.events: Final[Counter[str]] = counters.events
        self._dead_letter_max_value_bytes = dead_letter_max_value_bytes
        self.services: Final = Services()

    # -- topics ----------------------------------------------------------------------------------

    def output(self, name: str) -> str:
        """The topic of the output the stage declares as ``name``."""
        return self._topology.output(name)

    def internal(self, name: str) -> InternalStream:
        """The internal topic the stage declares as ``name``: where to send records to a shard."""
        declared, topic = self._topology.internal_topic(name)
        return InternalStream(declared, topic, self.shards)

    # -- services asked for in init --------------------------------------------------------------

    def counter(self, series: str) -> Counter[str]:
        """The count ``series`` by label value (declared in the stage's spec, which the metrics
        export: :class:`streams.spec.LabelledCounter`)."""
        return self._labelled.setdefault(series, Counter())

    def listen(self, listener: TransactionListener) -> None:
        """``listener`` is told of this worker's transactions (after the runtime's own bookkeeping,
        in the order the listeners were given)."""
        self.services.listeners.append(listener)

    def each_transaction(self, callback: EachTransaction) -> None:
        self.services.punctuators.each_transaction(callback)

    def prepare_input(self, prepare: Prepare, ready_for_input: Callable[[], bool] = _ready,
                      settle: Callable[[], None] = settled) -> None:
        """``prepare(records)``: a batch's input records before they are routed; it returns how many,
        the first ones, to route in the next batch; the others wait until ``ready_for_input()``.
        ``settle()``: wait until the records prepared last are ready to route (called before the
        next batch is consumed, :meth:`streams.runtime.inflow.InputFlow.resume_if_ready`)."""
        self.services.prepare, self.services.ready_for_input = prepare, ready_for_input
        self.services.flow = partial(InputFlow, prepare, ready_for_input, settle=settle)

    # -- records of the stage's own making -------------------------------------------------------

    def dead_letter(self, *, reason: str, detail: str, topic: str, partition: int, offset: int,
                    key: bytes | None = None, value: bytes | None = None) -> Emit:
        """A dead letter the stage writes itself beside a decision that stands (the page stage's
        ``page_unavailable``); the runtime counts it by its reason once the record's outputs are
        accepted. A bad record is not one of these: raise RecordRejected."""
        letter = records.dead_letter(reason=reason, detail=detail, stage=self._topology.stage, topic=topic,
                                     partition=partition, offset=offset, key=key, value=value,
                                     max_value_bytes=self._dead_letter_max_value_bytes)
        return Emit(self._topology.dead_letters, letter, key)

    def check_outputs(self, emits: list[Emit]) -> None:
        """Check the outputs of one decision a stage takes outside a record's processing (a
        per-transaction callback's: the page stage decides pages there when one worker owns every
        shard), as the engine checks a record's: raises RecordRejected (``output_too_large``) when
        one exceeds its topic's limit, before any is produced (the stage writes a dead letter
        instead); else counts the stage's own dead letters among them. What a callback returns is
        produced unchecked: a record over a topic's limit would fail the transaction, every retry."""
        self._check(emits)
