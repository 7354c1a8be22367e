"""The stream runtime: batched consume, one Kafka transaction per batch (or per part of a batch that
runs long, see :meth:`Engine._run_batch`), state applied after commit.

Why this design (docs/decisions/0001-stream-runtime.md has the measurements): a "seen" mark must
never survive when the output it stands for was lost. Each batch therefore goes through four named
steps, and only the last touches local state:

1. ``_consume`` up to ``batch_max_messages`` records (librdkafka's batch ``consume``, far faster
   than per-message ``poll`` from Python), read_committed.
2. ``_process_until`` each record inside an open transaction: records of input topics are routed
   by the stage's ``route`` step, records of its internal topics decided by their processors
   against :class:`BatchState` (store + in-memory writes of this batch), and so is, at once, a
   record sent to a shard this worker owns (:mod:`streams.runtime.local_path`); a bad record becomes a
   dead letter in the same transaction, and so does a record whose output would exceed its topic's
   size limit (``output_too_large``; :mod:`streams.runtime.outputs`). The stage's scheduled
   callbacks run last (:mod:`streams.runtime.schedule`).
3. ``Commit.commit`` (:mod:`streams.runtime.commit`): the batch's state writes go to the changelog,
   the consumed offsets are added with ``send_offsets_to_transaction`` (KIP-447: the group
   generation fences zombies), and the transaction commits. Outputs, changelog and offsets become
   visible together or not at all.
4. ``apply``: only now are the writes applied to RocksDB, with the changelog offset they reach,
   in one WriteBatch. A crash between 3 and 4 leaves the store one batch behind; recovery replays
   that batch from the changelog on restart. A crash before 3 aborts the transaction (the next
   ``init_transactions`` with the same ``transactional.id`` fences and aborts it).

The transactional id is ``<app>-<stage>-<worker_id>``: stable across restarts of one worker so a
restarted worker aborts its killed predecessor's open transaction at once instead of leaving
read_committed consumers blocked until ``transaction.timeout.ms``. The shards a worker owns, their
stores opened and recovered on assignment, are :mod:`streams.runtime.shards`'.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final, Literal, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.config import RuntimeSettings
from streams.errors import RecordRejected, RuntimeFailure, StreamsError
from streams.runtime.access import NO_WATCH, Watch, fenced
from streams.runtime.backlog import Backlogs
from streams.runtime.batch import BatchState, Emit
from streams.runtime.clients import CONFLUENT, KafkaClients, worker_consumer
from streams.runtime.commit import Commit, apply
from streams.runtime.context import StageContext
from streams.runtime.counters import Counters, oldest_timestamp_ms
from streams.runtime.drain import DRAIN_SESSION_TIMEOUT_MS, Cut, NoCut
from streams.runtime.kafka_io import KafkaConfig, RecordReader
from streams.runtime.lifecycle import Lifecycle
from streams.runtime.listeners import Listeners
from streams.runtime.local_path import LocalPath, LocalRecord
from streams.runtime.message import InputPositions
from streams.runtime.outputs import Outputs
from streams.runtime.restore import ShardOpener, processes_for, restore_cold
from streams.runtime.shards import Shards, StoreFactory, stage_dir
from streams.runtime.stage import Stage
from streams.runtime.standby import Standbys
from streams.runtime.store import PartitionStore
from streams.runtime.topology import Topology, shard_handlers
from streams.runtime.warmth import warmth_for
from streams.runtime.watchdog import Watchdog

log: Final = logging.getLogger(__name__)

Step = Literal["batch", "report", "idle"]

# How long past its own timeout a transactional call may stay blocked before the watchdog calls the
# client wedged (see streams/runtime/watchdog.py). librdkafka returns a timed-out call within a
# second or two of its timeout; ten seconds more is a hang, not a slow broker.
WEDGED_GRACE_S: Final = 10.0


class EngineObserver(Protocol):
    """Watches a running engine from its own thread (the metrics layer implements it)."""

    def started(self, engine: Engine) -> None: ...

    def batch_done(self, engine: Engine) -> None: ...

    def stopped(self, engine: Engine) -> None: ...


class Unobserved:
    """No observer: a worker run with its metrics disabled, or a test."""

    def started(self, engine: Engine) -> None:
        pass

    def batch_done(self, engine: Engine) -> None:
        pass

    def stopped(self, engine: Engine) -> None:
        pass


UNOBSERVED: Final = Unobserved()


def _current() -> None:
    """An assignment check that finds every assignment current (a worker not run by the runner)."""


class Engine:
    """Drives one :class:`Stage` in one worker process until stopped."""

    def __init__(self, stage: Stage, topology: Topology, kafka: KafkaConfig, settings: RuntimeSettings,
                 store_factory: StoreFactory | None = None,
                 output_limits: Mapping[str, int] | None = None, clients: KafkaClients = CONFLUENT,
                 drain: bool = False, assignment_check: Callable[[], None] = _current,
                 watch: Watch = NO_WATCH) -> None:
        """``topology``: the stage's topics in this application. ``store_factory``: a shard's store
        (default: the stage's declared store, under ``state_dir``). ``output_limits``: the largest
        key plus value each topic takes (from :func:`~streams.runtime.topic_admin.output_limits`);
        other topics get librdkafka's default. ``clients``: where the Kafka clients come from
        (:mod:`streams.runtime.clients`). ``drain``: route input only up to each partition's cut
        (:mod:`streams.runtime.drain`). ``assignment_check``: called on every assignment before
        anything is read; it raises to stop the worker (the state generation is no longer current,
        :mod:`streams.runtime.generations`). ``watch``: tells a failure that is the cluster's doing
        (credentials, ACLs, a deleted topic) from a fault (:mod:`streams.runtime.access`)."""
        self.stage = stage
        self.topology = topology
        self.kafka = kafka
        self.group = topology.group
        self.settings = settings
        self.changelog_topic = topology.changelog
        self.counters = Counters()
        self.lifecycle = Lifecycle(topology.stage, topology.shard_topics, settings.recovery_log_interval_s)
        declared = stage.store()
        opener = None if store_factory else ShardOpener(
            declared.open, stage_dir(settings, topology.stage), settings.shards,
            settings.rocksdb_block_cache_mb, settings.rocksdb_memtable_mb)
        open_store = store_factory or opener
        assert open_store is not None
        restore = partial(restore_cold, kafka, opener, topic=topology.changelog,
                          processes=processes_for(settings.restore_processes), watcher=self.lifecycle)
        standbys = Standbys(topology.changelog, open_store, kafka, clients, settings.standby_replicas)
        self._shards = Shards(topology.shard_topics, topology.changelog, declared.identity, open_store,
                              kafka, clients, self.counters, self.lifecycle, standbys, restore)
        self._warmth = warmth_for(kafka, clients, topology.group, settings, standbys, self._shards.bring_up,
                                  self.lifecycle.standby)
        self._owned = self._shards.owned
        self._input_reader = RecordReader(kafka, clients=clients)  # its consumer made on first read
        self._shard_topics = self._shards.topics
        self._inputs = frozenset(topology.input_topics)  # the records routed
        self._assignment_check = assignment_check
        self._watch = watch
        self._stopping = False
        self._assigned = False
        self._closing = False  # close() under way: an assignment it serves is not taken up
        # Rebound, never mutated, so another thread (the lag monitor) may read it at any time.
        self.assignment: tuple[tuple[str, int], ...] = ()
        self._last_activity = time.monotonic()
        session_ms = int(1000 * settings.session_timeout_s)
        session_ms = min(session_ms, DRAIN_SESSION_TIMEOUT_MS) if drain else session_ms
        heartbeat_ms = int(1000 * settings.heartbeat_interval_s)
        self._consumer = clients.consumer(kafka.consumer(topology.group, **worker_consumer(
            settings.worker_id, session_ms, heartbeat_ms), **watch.client_config()))
        self._backlogs = Backlogs(self._consumer, self._shard_topics, self._owned.pending)
        self._cut = Cut(self._consumer, self._inputs, settings.transaction_timeout_s) if drain else NoCut()
        self._outputs = Outputs(self.counters, topology.stage, topology.dead_letters,
                                settings.dead_letter_max_value_bytes, output_limits)
        producer_config = {**self.kafka.transactional_producer(
            f"{topology.group}.{settings.worker_id}", settings.transaction_timeout_s,
            max_message_bytes=self._outputs.largest_record_bytes), **watch.client_config()}
        self._clients, self._producer_config = clients, producer_config  # see _join
        self._producer = clients.producer(producer_config)
        self._watchdog = Watchdog(WEDGED_GRACE_S, settings.on_wedged)
        self._commit = Commit(self._producer, self._watchdog, topology.changelog,
                              settings.transaction_timeout_s, self.counters, self.lifecycle)
        context = StageContext(topology, settings.shards, self._owned, self._input_reader, self.counters,
                               settings.dead_letter_max_value_bytes, self._outputs.check)
        processors = stage.init(context)
        self._route = processors.route
        self._handlers = shard_handlers(topology, processors)
        self._local = LocalPath(self._handlers, topology.local_topics, settings.shards, self._owned,
                                self._refuse_local, self._outputs.check,
                                counts=self.counters.at_once_by_topic, tags=topology.local_tags)
        services = context.services
        self._punctuators = services.punctuators
        self._listeners = Listeners([self._shards.identities, *services.listeners])
        self._shards.listeners = self._listeners
        self._positions = services.punctuators.tracker(self._consumer, self._inputs,
                                                       settings.transaction_timeout_s, self._cut)
        self._flow = services.flow(self._consumer, self._inputs, self.counters)

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Finish the current batch, commit it, and leave the group (SIGTERM, SIGINT)."""
        self._stopping = True
        self.lifecycle.stopping()
        self._watchdog.request_stop()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self, idle_exit_s: float = math.inf, observer: EngineObserver = UNOBSERVED) -> None:
        """Process batches until :meth:`stop`, or until no record arrived for ``idle_exit_s``."""
        self._watchdog.start()
        observer.started(self)
        self._join()
        try:
            while not self._stopping:
                done = self.step()
                if done == "batch":
                    observer.batch_done(self)
                elif done == "idle" and self._idle(idle_exit_s):
                    break
        except BaseException as error:
            cause = self._watch.cause_of(error, self._producer)
            joining = self._commit.commits == 0 and not self._watchdog.stop_requested  # before close
            self._close_after_failure(observer, cause or error)
            self.lifecycle.stopped(cause or error)
            if joining and fenced(error) is not None:
                self._watchdog.fenced_while_joining(str(error))  # restarts in place, or exits
            if cause is not None:
                raise cause from error
            raise
        observer.stopped(self)
        self.close()
        self.lifecycle.stopped(None)

    def start(self) -> None:
        """What :meth:`run` does first: fence this worker's predecessor, join the group. For a
        caller that drives the engine :meth:`step` by :meth:`step` (the state-machine tests)."""
        self._watchdog.start()
        self._join()

    def _join(self) -> None:
        """Fence this worker's predecessor, warm the shards it will own (:mod:`streams.runtime.warmth`),
        then subscribe; its own transactions are initialised at its first assignment.

        The predecessor is fenced at once, by a producer used for nothing else: what it left open is
        aborted before the warm-up, which may be long, and readers of what it wrote do not wait for it.
        The worker's own producer is initialised only once it is a member again, in its first
        assignment (:meth:`_on_assign`): another worker that took its shards while it was away fences
        its id (:mod:`streams.runtime.takeover`) in an assignment of a generation without it, which
        the range assignor's eager rebalance completes before the one that lets it in; and librdkafka
        initialises a producer once."""
        self._warmth.ask_early()  # the group describer's start overlaps the fencing
        self._commit.init_transactions(self._clients.producer(self._producer_config))
        self.lifecycle.warming()
        self._warmth.warm_up(lambda: self._stopping, self.lifecycle.turned)
        self._subscribe()

    def _subscribe(self) -> None:
        topics = [*self.topology.input_topics, *self.topology.shard_topics]
        self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)
        self._last_activity = time.monotonic()
        self.lifecycle.joining()

    def step(self) -> Step:
        """One turn of the loop: consume, and run the batch (``"batch"``); with nothing consumed,
        run the scheduled callbacks that have something to say (``"report"``), else ``"idle"``."""
        self.lifecycle.turned()
        self._watch.check()
        batch = self._consume()
        owned = frozenset(self._shards.stores)
        if batch or self._flow.holding:
            began = time.perf_counter()
            self._run_batch(batch)
            self._last_activity = time.monotonic()
            self._warmth.tick(owned, time.perf_counter() - began)
            return "batch"
        self._warmth.tick(owned, None)
        if self._punctuate_idle():
            return "report"
        return "idle"

    def _close_after_failure(self, observer: EngineObserver, error: BaseException) -> None:
        """Clean up after an error without letting a second error (a fenced producer's flush, a
        closed store) replace the first one in the worker's last words; the same error again (a
        full disk fails the stores' closing flushes too) is not worth a word."""
        try:
            observer.stopped(self)
            self.close()
        except Exception as again:  # noqa: BLE001 - the original error is re-raised by the caller
            if type(again) is type(error) and isinstance(error, StreamsError):
                log.debug("clean-up after the failure: %s", again)
            else:
                log.exception("clean-up after the failure above also failed")

    def _idle(self, idle_exit_s: float) -> bool:
        """Idle time counts from the last batch or the last assignment, never from start-up."""
        return self._assigned and time.monotonic() - self._last_activity > idle_exit_s

    def close(self) -> None:
        """Leave the group, close the clients and the stores, and the stage."""
        self._watchdog.request_stop()  # a close that wedges exits; it never restarts the worker
        self._warmth.close()
        try:
            with self._watchdog.guard("close", self.settings.transaction_timeout_s):
                self._closing = True
                self._consumer.close()
                self._producer.flush(10)
                self._input_reader.close()
            self._shards.close()
        finally:
            try:
                self.stage.close()
            finally:
                self._watchdog.close()

    # -- rebalance ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """A rebalance under way when the worker stops is served inside ``close()``, where every
        question to the broker fails with ``_DESTROY``: a closing worker takes nothing up (it
        stopped with exit 2 there, after a SIGTERM right after a rebalance)."""
        if self._closing:
            log.info("assignment of %d partitions while closing: not taken up", len(partitions))
            return
        self._assignment_check()
        if not self._assigned:  # a member now: no takeover's fence can come after this (see _join)
            self._commit.init_transactions()
        self._cut.assigned(partitions)
        owned = tuple(sorted({*self.assignment, *((tp.topic, tp.partition) for tp in partitions)}))
        self.lifecycle.assigned_now(owned)
        self._warmth.gained([(tp.topic, tp.partition) for tp in partitions])
        self._shards.assigned(partitions)
        self._backlogs.assigned(partitions)
        self._positions.assigned(partitions)
        self.assignment = owned
        self._assigned = True
        self._last_activity = time.monotonic()

    @property
    def stores(self) -> dict[int, PartitionStore]:
        """The shard stores this worker owns now (for measurements)."""
        return self._shards.stores

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._closing:  # only what was taken up (see _on_assign)
            partitions = [tp for tp in partitions if (tp.topic, tp.partition) in self.assignment]
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self.assignment = tuple(item for item in self.assignment if item not in revoked)
        self.lifecycle.revoked(revoked)
        self._positions.revoked(revoked)
        self._flow.revoked(revoked)
        self._cut.revoked(revoked)
        self._shards.revoked(partitions)
        self._backlogs.revoked(partitions)

    def _punctuate_idle(self) -> bool:
        """With no input to process: run the per-transaction callbacks in a transaction of their own
        when input positions moved (a new assignment). Whether one committed."""
        positions = self._positions.after([])
        if not self._assigned or positions is None:
            return False  # not before the first assignment: the producer is initialised there
        states = self._owned.begin()
        self._producer.begin_transaction()
        try:
            self._commit.produce(self._callbacks(positions))
            changelog_ends = self._commit.commit([], states, self._consumer)
        except KafkaException as error:
            self._abort([], error)
            return False
        apply(states, changelog_ends)
        self._positions.committed(positions)
        self._listeners.committed()
        return True

    # -- the four steps of a batch -------------------------------------------------------------

    def _consume(self) -> list[Message]:
        """What the client has fetched already, at once; only when that is nothing, wait up to
        ``batch_max_wait_s`` for the first record, then take what else is fetched with it.

        The cadence adapts to the load by itself: under a backlog records pile up in the client's
        fetch queue while a batch runs and commits, so the next call takes them all (batches of
        thousands, the commit's cost shared among them); at a sparse load a batch is the one or few
        records that came, committed at once. A call with a timeout returns early only once its
        ``limit`` records are in, so waiting for ``batch_max_messages`` (as this did before issue
        39) held every transaction at a sparse load the whole ``batch_max_wait_s``: a page passes
        several transactions (route, then the shard processors' hops), and its verdict came 0.6-1.0
        s after its write at 20 pages/s (p99 1.3 s); waking on the first record makes each hop cost
        about a commit (bench/results/latency.md; docs/decisions/0009-adaptive-cadence.md).

        With input records held for routing (a preparing stage's, prepared in the last batch) the
        batch is due now: nothing is waited for."""
        self._flow.resume_if_ready()
        limit = self.settings.batch_max_messages
        messages = self._consumer.consume(limit, timeout=0)
        if not messages and not self._flow.holding:  # no wait while a standby has work to do
            wait_s = 0.0 if self._warmth.behind else self.settings.batch_max_wait_s
            messages = self._consumer.consume(1, timeout=wait_s)
            if messages and limit > 1:
                messages.extend(self._consumer.consume(limit - 1, timeout=0))
        batch = []
        shard_topics, stores = self._shard_topics, self._shards.stores
        by_topic = self.counters.consumed_by_topic
        for message in messages:
            error = message.error()
            if error is None:
                topic = message.topic() or ""
                if topic in shard_topics and message.partition() not in stores:
                    continue  # fetched before its partition was revoked: not ours to process
                batch.append(message)
                by_topic[topic] = by_topic.get(topic, 0) + 1
            elif error.code() == KafkaError._FATAL:  # the consumer is done for: see Watchdog.session_lost
                self._watchdog.session_lost(str(error))
                raise RuntimeFailure(f"consumer: {error}")
            elif error.fatal():
                raise RuntimeFailure(f"consumer: {error}")
            elif error.code() != KafkaError._PARTITION_EOF:
                self._watch.consumer_error(error)  # raises when the cluster caused it
                log.warning("consumer: %s", error)
        return self._cut.within(batch)

    def _run_batch(self, batch: list[Message]) -> None:
        """Steps 2 to 4 for a consumed batch: in one transaction, or in several when it runs long.

        The broker aborts a transaction left open past ``transaction_timeout_s`` and fences the
        producer, so a batch of slow records (large pages: seconds each) would fail on every retry.
        Past a third of the timeout, the records processed so far are committed and the rest of
        the batch goes on in a new transaction, leaving the last record and the commit the rest.
        """
        batch = self._flow.arrange(batch)
        self._backlogs.batch_starting()
        budget_s, start, batch_began = self.settings.transaction_timeout_s / 3, 0, time.perf_counter()
        while start < len(batch):
            began = time.perf_counter()
            self._producer.begin_transaction()
            try:
                states, done = self._process_until(batch, start, began + budget_s)
                part = batch[start:start + done]
                positions = self._positions.after(part)
                self._commit.produce(self._callbacks(positions))
                changelog_ends = self._commit.commit(part, states, self._consumer)
            except KafkaException as error:
                self._abort(batch[start:], error)
                return
            apply(states, changelog_ends)
            self._positions.committed(positions)
            self._listeners.committed()
            self.counters.batches += 1
            self.counters.consumed += len(part)
            self.lifecycle.turned()  # a long batch commits in parts: each one is a sign of life
            start += done
        # The metrics observe the whole batch, every part of it.
        self.counters.last_batch_s = time.perf_counter() - batch_began
        self.counters.last_batch_oldest_ms = oldest_timestamp_ms(batch[:start])

    def _process_until(self, batch: list[Message], start: int,
                       deadline: float) -> tuple[dict[int, BatchState], int]:
        """Process ``batch`` from ``start`` until its end or, after at least one record, until
        ``deadline`` (``time.perf_counter``); return the states and how many records were done."""
        states = self._owned.begin()
        handlers, route, listeners = self._handlers, self._route, self._listeners
        local = self._local if self._local.active else None
        done = 0
        for message in batch[start:]:
            if done and time.perf_counter() > deadline:
                break
            done += 1
            try:
                topic = message.topic() or ""
                if topic in handlers:
                    state = self._owned.state(message.partition() or 0)
                    assert state is not None  # _consume dropped records of shards not owned
                    emits = handlers[topic](message, state)
                else:
                    emits = route(message)
                if emits:  # most routed URLs are repeats answered at routing: nothing to emit
                    self._outputs.check(emits)
                    if local is not None:
                        emits = local.run(emits, message)
            except RecordRejected as rejected:
                listeners.refused()
                emits = [self._outputs.dead_letter(message, rejected.reason, rejected.detail)]
            except StreamsError:
                raise  # the worker's configuration or state is wrong: stop, say why
            except Exception as error:  # noqa: BLE001 - a poison record must not stop the stage
                listeners.refused()
                log.exception("processing failed at %s[%s]@%s", message.topic(), message.partition(),
                              message.offset())
                emits = [self._outputs.dead_letter(message, "processing_error", repr(error))]
            if emits:
                self._commit.produce(emits)
        return states, done

    def _callbacks(self, positions: InputPositions | None) -> list[Emit]:
        """What the per-transaction callbacks emit, their records for owned, settled shards decided
        at once as a processor's are (:mod:`streams.runtime.local_path`)."""
        emits = self._punctuators.run(positions)
        return self._local.run(emits, None) if emits and self._local.active else emits

    def _refuse_local(self, record: LocalRecord, error: Exception) -> list[Emit]:
        """A record its processor refused on the local path: the dead letter of the record that sent
        it, which has a place in a topic and can be replayed (:mod:`streams.runtime.local_path`); a
        callback's record has none to name, and is logged (its sender's state is wrong)."""
        self._listeners.refused()
        where = f"its record for {record.topic()}[{record.partition()}], decided at once"
        if record.origin is None:
            log.error("a callback's record refused on the local path: %s: %r", where, error)
            return []
        if isinstance(error, RecordRejected):
            return [self._outputs.dead_letter(record.origin, error.reason, f"{error.detail} ({where})")]
        log.error("processing failed on the local path: %s", where, exc_info=error)
        return [self._outputs.dead_letter(record.origin, "processing_error", f"{error!r} ({where})")]

    def _abort(self, batch: list[Message], error: KafkaException) -> None:
        """An abortable error: drop the batch's state, abort, rewind to the batch's first offsets."""
        kafka_error: KafkaError = error.args[0]
        if not kafka_error.txn_requires_abort():
            raise RuntimeFailure(f"transaction failed: {kafka_error}") from error
        log.warning("aborting batch of %d: %s", len(batch), kafka_error)
        self._listeners.aborted()
        self._backlogs.aborted()
        self._commit.abort()
        self.counters.aborted_batches += 1
        cause = self._watch.after_abort(kafka_error)  # aborted already: nothing of the batch committed
        if cause is not None:
            raise cause from error
        self._flow.rewind(batch)  # a preparing stage's: the input records held for the next batch too
