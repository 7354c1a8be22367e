"""The stream runtime: batched consume, one Kafka transaction per batch (or per part of a batch that
runs long, see :meth:`Engine._run_batch`), state applied after commit.

Why this design (docs/decisions/0001-stream-runtime.md has the measurements): a "seen" mark must
never survive when the output it stands for was lost. Each batch therefore goes through four named
steps, and only the last touches local state:

1. ``_consume`` up to ``batch_max_messages`` records (librdkafka's batch ``consume``, far faster
   than per-message ``poll`` from Python), read_committed.
2. ``_process`` each record inside an open transaction: input topics are routed to the shard topic,
   shard records are decided against :class:`BatchState` (store + in-memory writes of this batch);
   a bad record becomes a dead letter in the same transaction, and so does a record whose output
   would exceed its topic's size limit (``output_too_large``; :mod:`streams.runtime.outputs`).
3. ``_commit``: the batch's state writes go to the changelog, the consumed offsets are added with
   ``send_offsets_to_transaction`` (KIP-447: the group generation fences zombies), and the
   transaction commits. Outputs, changelog and offsets become visible together or not at all.
4. ``_apply``: only now are the writes applied to RocksDB, with the changelog offset they reach,
   in one WriteBatch. A crash between 3 and 4 leaves the store one batch behind; recovery replays
   that batch from the changelog on restart. A crash before 3 aborts the transaction (the next
   ``init_transactions`` with the same ``transactional.id`` fences and aborts it).

The transactional id is ``<app>-<stage>-<worker_id>``: stable across restarts of one worker so a
restarted worker aborts its killed predecessor's open transaction at once instead of leaving
read_committed consumers blocked until ``transaction.timeout.ms``.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.config import RuntimeSettings
from streams.errors import RecordRejected, RuntimeFailure, StreamsError
from streams.runtime.access import SUSPECT, ClusterWatch
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.clients import CONFLUENT, KafkaClients
from streams.runtime.counters import Counters, oldest_timestamp_ms
from streams.runtime.drain import DRAIN_SESSION_TIMEOUT_MS, Cut
from streams.runtime.identity import ShardIdentities
from streams.runtime.inflow import InputFlow, first_offsets
from streams.runtime.kafka_io import KafkaConfig, RecordReader, produce_when_room
from streams.runtime.lifecycle import Lifecycle
from streams.runtime.outputs import Outputs
from streams.runtime.positions import InputTracker
from streams.runtime.recovery import recover
from streams.runtime.routing import RoutingMemory
from streams.runtime.stage import Stage, StageContext, shard_store
from streams.runtime.store import PartitionStore, close_all
from streams.runtime.watchdog import Watchdog

log: Final = logging.getLogger(__name__)


StoreFactory = Callable[[int], PartitionStore]
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


def stage_dir(settings: RuntimeSettings, stage_name: str) -> Path:
    """Where one worker keeps one stage's shard stores."""
    return Path(settings.state_dir) / settings.app_id / stage_name / settings.worker_id


class Engine:
    """Drives one :class:`Stage` in one worker process until stopped."""

    def __init__(self, stage: Stage, kafka: KafkaConfig, settings: RuntimeSettings, group: str,
                 changelog_topic: str, dead_letter_topic: str,
                 store_factory: StoreFactory | None = None,
                 output_limits: Mapping[str, int] | None = None, clients: KafkaClients = CONFLUENT,
                 drain: bool = False, assignment_check: Callable[[], None] | None = None,
                 watch: ClusterWatch | None = None) -> None:
        """``output_limits``: the largest key plus value each topic takes (from
        :func:`~streams.runtime.kafka_io.output_limits`); other topics get librdkafka's default.
        ``clients``: where the Kafka clients come from (:mod:`streams.runtime.clients`).
        ``drain``: route input only up to each partition's cut (:mod:`streams.runtime.drain`).
        ``assignment_check``: called on every assignment before anything is read; it raises to stop
        the worker (the state generation is no longer current, :mod:`streams.runtime.generations`).
        ``watch``: tells a failure that is the cluster's doing (credentials, ACLs, a deleted topic)
        from a fault (:mod:`streams.runtime.access`)."""
        self.stage = stage
        self._clients = clients
        self.kafka = kafka
        self.group = group
        self.settings = settings
        self.changelog_topic = changelog_topic
        self.counters = Counters()
        self._store_factory = store_factory or self._rocks_store
        self._stores: dict[int, PartitionStore] = {}
        self._needs = needs = stage.needs()
        self._identities = ShardIdentities(needs.identity)
        self._owned = OwnedShards(self._stores, self._identities.first_use)
        self._routing = RoutingMemory(needs.routing_memory_keys) if needs.routing_memory_keys else None
        self._input_reader = RecordReader(kafka, clients=clients) if needs.input_reader else None
        self._reporter = needs.end_of_part
        self._assignment_check = assignment_check
        self._watch = watch
        errors: dict[str, Any] = {} if watch is None else {"error_cb": watch.client_error}
        self._stopping = False
        self._assigned = False
        self.lifecycle = Lifecycle(stage.name, stage.state_topic, settings.recovery_log_interval_s)
        # Rebound, never mutated, so another thread (the lag monitor) may read it at any time.
        self.assignment: tuple[tuple[str, int], ...] = ()
        self._last_activity = time.monotonic()
        self._consumer = clients.consumer(self.kafka.consumer(group, **{
            "fetch.max.bytes": 64 * 1024 * 1024,
            # librdkafka fetches 1 MB per partition per request by default: a handful of fetched
            # pages. Batches of pages need more per round trip, or the worker waits on fetches.
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "max.poll.interval.ms": 600_000,
            # Static membership (KIP-345): a restarted worker takes its old place at once
            # instead of waiting for the killed member's session to expire.
            "group.instance.id": settings.worker_id,
            "session.timeout.ms": DRAIN_SESSION_TIMEOUT_MS if drain else 30_000,
            **errors,
        }))
        self._cut = Cut(self._consumer, stage.state_topic, settings.transaction_timeout_s) if drain else None
        self._outputs = Outputs(self.counters, stage.name, dead_letter_topic,
                                settings.dead_letter_max_value_bytes, output_limits)
        self._producer = clients.producer({**self.kafka.transactional_producer(
            f"{group}.{settings.worker_id}", settings.transaction_timeout_s,
            max_message_bytes=self._outputs.largest_record_bytes), **errors})
        self._watchdog = Watchdog(WEDGED_GRACE_S, settings.on_wedged)
        self._inputs = None if self._reporter is None else InputTracker(
            self._consumer, stage.state_topic, settings.transaction_timeout_s, self._cut)
        self._inflow = None if needs.prepare is None else InputFlow(
            needs.prepare, needs.ready_for_input, self._consumer, stage.state_topic, self.counters)
        stage.bind(StageContext(stage.name, settings.shards, self._owned, dead_letter_topic,
                                settings.dead_letter_max_value_bytes, self._input_reader, self._routing,
                                self.counters))

    # -- lifecycle ---------------------------------------------------------------------------

    def _rocks_store(self, partition: int) -> PartitionStore:
        path = stage_dir(self.settings, self.stage.name) / f"shard-{partition:04d}"
        return shard_store(self._needs, path, self.settings.shards, self.settings.rocksdb_block_cache_mb,
                           self.settings.rocksdb_memtable_mb)

    def stop(self, *_: Any) -> None:
        """Finish the current batch, commit it, and leave the group (SIGTERM, SIGINT)."""
        self._stopping = True
        self.lifecycle.stopping()
        self._watchdog.request_stop()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self, idle_exit_s: float | None = None, observer: EngineObserver | None = None) -> None:
        """Process batches until :meth:`stop`, or until no record arrived for ``idle_exit_s``."""
        self._watchdog.start()
        self._init_transactions()
        if observer is not None:
            observer.started(self)
        self._subscribe()
        try:
            while not self._stopping:
                done = self.step()
                if done == "batch" and observer is not None:
                    observer.batch_done(self)
                elif done == "idle" and self._idle(idle_exit_s):
                    break
        except BaseException as error:
            cause = self._cause(error)
            self._close_after_failure(observer, cause or error)
            self.lifecycle.stopped(cause or error)
            if cause is not None:
                raise cause from error
            raise
        if observer is not None:
            observer.stopped(self)
        self.close()
        self.lifecycle.stopped(None)

    def start(self) -> None:
        """What :meth:`run` does first: fence this worker's predecessor, join the group. For a
        caller that drives the engine :meth:`step` by :meth:`step` (the state-machine tests)."""
        self._watchdog.start()
        self._init_transactions()
        self._subscribe()

    def _init_transactions(self) -> None:
        timeout_s = self.settings.transaction_timeout_s * 2
        self._watchdog.transactional("init_transactions", timeout_s,
                                     lambda: self._producer.init_transactions(timeout_s))

    def _subscribe(self) -> None:
        topics = [*self.stage.route_topics, self.stage.state_topic]
        self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)
        self._last_activity = time.monotonic()
        self.lifecycle.joining()

    def step(self) -> Step:
        """One turn of the loop: consume, and run the batch (``"batch"``); with nothing consumed,
        report input positions that moved (``"report"``), else ``"idle"``."""
        self.lifecycle.turned()
        if self._watch is not None:
            self._watch.check()
        batch = self._consume()
        if batch or (self._inflow is not None and self._inflow.holding):
            self._run_batch(batch)
            self._last_activity = time.monotonic()
            return "batch"
        if self._report_moved_positions():
            return "report"
        return "idle"

    def _close_after_failure(self, observer: EngineObserver | None, error: BaseException) -> None:
        """Clean up after an error without letting a second error (a fenced producer's flush, a
        closed store) replace the first one in the worker's last words; the same error again (a
        full disk fails the stores' closing flushes too) is not worth a word."""
        try:
            if observer is not None:
                observer.stopped(self)
            self.close()
        except Exception as again:  # noqa: BLE001 - the original error is re-raised by the caller
            if type(again) is type(error) and isinstance(error, StreamsError):
                log.debug("clean-up after the failure: %s", again)
            else:
                log.exception("clean-up after the failure above also failed")

    def _cause(self, error: BaseException) -> StreamsError | None:
        """What a Kafka failure was, when it is the cluster's doing (:mod:`streams.runtime.access`)."""
        return None if self._watch is None else self._watch.cause_of(error, self._producer)

    def _idle(self, idle_exit_s: float | None) -> bool:
        """Idle time counts from the last batch or the last assignment, never from start-up."""
        if idle_exit_s is None or not self._assigned:
            return False
        return time.monotonic() - self._last_activity > idle_exit_s

    def close(self) -> None:
        """Leave the group, close the clients and the stores."""
        self._watchdog.request_stop()  # a close that wedges exits; it never restarts the worker
        try:
            with self._watchdog.guard("close", self.settings.transaction_timeout_s):
                self._consumer.close()
                self._producer.flush(10)
                if self._input_reader is not None:
                    self._input_reader.close()
            stores, self._stores = list(self._stores.values()), {}
            close_all(stores)
        finally:
            self._watchdog.close()

    # -- rebalance ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._assignment_check is not None:
            self._assignment_check()
        if self._cut is not None:
            self._cut.assigned(partitions)
        owned = tuple(sorted({*self.assignment, *((tp.topic, tp.partition) for tp in partitions)}))
        self.lifecycle.assigned_now(owned)
        opened = {tp.partition: self._store_factory(tp.partition) for tp in partitions
                  if tp.topic == self.stage.state_topic and tp.partition not in self._stores}
        result = recover(self.kafka, opened, self.changelog_topic, clients=self._clients,
                         watcher=self.lifecycle)
        self.lifecycle.recovered(result.total, result.seconds)
        self.counters.recovered_records += result.total
        for partition, store in opened.items():
            self._identities.opened(partition, store)
        self._stores.update(opened)
        if self._inputs is not None:
            self._inputs.assigned(partitions)
        self.assignment = owned
        self._assigned = True
        self._last_activity = time.monotonic()

    @property
    def stores(self) -> dict[int, PartitionStore]:
        """The shard stores this worker owns now (for measurements)."""
        return self._stores

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self.assignment = tuple(item for item in self.assignment if item not in revoked)
        self.lifecycle.revoked(revoked)
        if self._inputs is not None:
            self._inputs.revoked(revoked)
        if self._inflow is not None:
            self._inflow.revoked(revoked)
        if self._cut is not None:
            self._cut.revoked(revoked)
        shards = [tp.partition for tp in partitions if tp.topic == self.stage.state_topic]
        self._identities.revoked(shards)
        if self._needs.revoked is not None:
            self._needs.revoked(shards)
        for shard in shards:
            store = self._stores.pop(shard, None)
            if store is not None:
                store.close()

    def _report_moved_positions(self) -> bool:
        """With no input to process: report input positions that moved (a new assignment) in a
        transaction of their own. Whether one was committed."""
        if self._reporter is None or self._inputs is None:
            return False
        positions = self._inputs.after([])
        if positions is None:
            return False
        self._producer.begin_transaction()
        try:
            self._produce(self._reporter(positions, {}))
            self._commit_transaction()
        except KafkaException as error:
            self._abort([], error)
            return False
        self._inputs.committed(positions)
        return True

    # -- the four steps of a batch -------------------------------------------------------------

    def _consume(self) -> list[Message]:
        """What the client has fetched already, at once; only when that is nothing, wait up to
        ``batch_max_wait_s`` for a batch to fill. A call with a timeout returns early only once
        ``batch_max_messages`` records are in, which large records (pages of 200 KB: a few hundred
        fill the client's fetch queue) never reach: every batch of pages waited the whole timeout."""
        if self._inflow is not None:
            self._inflow.resume_if_ready()
        limit = self.settings.batch_max_messages
        messages = self._consumer.consume(limit, timeout=0)
        if not messages:
            messages = self._consumer.consume(limit, timeout=self.settings.batch_max_wait_s)
        batch = []
        state_topic = self.stage.state_topic
        by_topic = self.counters.consumed_by_topic
        for message in messages:
            error = message.error()
            if error is None:
                topic = message.topic() or ""
                if topic == state_topic and message.partition() not in self._stores:
                    continue  # fetched before its partition was revoked: not ours to process
                batch.append(message)
                by_topic[topic] = by_topic.get(topic, 0) + 1
            elif error.fatal():
                raise RuntimeFailure(f"consumer: {error}")
            elif error.code() != KafkaError._PARTITION_EOF:
                if self._watch is not None:
                    self._watch.consumer_error(error)  # raises when the cluster caused it
                log.warning("consumer: %s", error)
        return batch if self._cut is None else self._cut.within(batch)

    def _run_batch(self, batch: list[Message]) -> None:
        """Steps 2 to 4 for a consumed batch: in one transaction, or in several when it runs long.

        The broker aborts a transaction left open past ``transaction_timeout_s`` and fences the
        producer, so a batch of slow records (large pages: seconds each) would fail on every retry.
        Past a third of the timeout, the records processed so far are committed and the rest of
        the batch goes on in a new transaction, leaving the last record and the commit the rest.
        """
        batch = self._prepare(batch)
        budget_s, start, batch_began = self.settings.transaction_timeout_s / 3, 0, time.perf_counter()
        while start < len(batch):
            began = time.perf_counter()
            self._producer.begin_transaction()
            try:
                states, done = self._process_until(batch, start, began + budget_s)
                part = batch[start:start + done]
                positions = self._inputs.after(part) if self._inputs is not None else None
                if self._reporter is not None:
                    self._produce(self._reporter(positions, states))
                changelog_ends = self._commit(part, states)
            except KafkaException as error:
                self._abort(batch[start:], error)
                return
            self._apply(states, changelog_ends)
            if positions is not None and self._inputs is not None:
                self._inputs.committed(positions)
            self._identities.committed()
            if self._routing is not None:
                self._routing.committed()
            self.counters.batches += 1
            self.counters.consumed += len(part)
            self.lifecycle.turned()  # a long batch commits in parts: each one is a sign of life
            start += done
        # The metrics observe the whole batch, every part of it.
        self.counters.last_batch_s = time.perf_counter() - batch_began
        self.counters.last_batch_oldest_ms = oldest_timestamp_ms(batch[:start])

    def _prepare(self, batch: list[Message]) -> list[Message]:
        """The records to process: for a preparing stage, its shard records, then the input records
        it prepared in the last batch (:mod:`streams.runtime.inflow`)."""
        return batch if self._inflow is None else self._inflow.arrange(batch)

    def _process_until(self, batch: list[Message], start: int,
                       deadline: float | None) -> tuple[dict[int, BatchState], int]:
        """Process ``batch`` from ``start`` until its end or, after at least one record, until
        ``deadline`` (``time.perf_counter``); return the states and how many records were done."""
        states = self._owned.begin()
        state_topic = self.stage.state_topic
        routing = self._routing
        done = 0
        for message in batch[start:]:
            if done and deadline is not None and time.perf_counter() > deadline:
                break
            done += 1
            try:
                if message.topic() == state_topic:
                    state = self._owned.state(message.partition() or 0)
                    assert state is not None  # _consume dropped records of shards not owned
                    emits = self.stage.process(message, state)
                    self._outputs.check(emits)
                else:
                    emits = self.stage.route(message)
                    if emits:  # most routed URLs are repeats answered at routing: nothing to emit
                        self._outputs.check(emits)
                    if routing is not None:
                        routing.accept_record()  # only once its output is sure to be produced
            except RecordRejected as rejected:
                if routing is not None:
                    routing.refuse_record()
                emits = [self._outputs.dead_letter(message, rejected.reason, rejected.detail)]
            except StreamsError:
                raise  # the worker's configuration or state is wrong: stop, say why
            except Exception as error:  # noqa: BLE001 - a poison record must not stop the stage
                if routing is not None:
                    routing.refuse_record()
                log.exception("processing failed at %s[%s]@%s", message.topic(), message.partition(),
                              message.offset())
                emits = [self._outputs.dead_letter(message, "processing_error", repr(error))]
            if emits:
                self._produce(emits)
        return states, done

    def _produce(self, emits: list[Emit]) -> None:
        produce = self._producer.produce
        by_topic = self.counters.emitted_by_topic
        for emit in emits:
            by_topic[emit.topic] = by_topic.get(emit.topic, 0) + 1
            try:
                if emit.partition is None:
                    produce(emit.topic, emit.value, emit.key)
                else:
                    produce(emit.topic, emit.value, emit.key, partition=emit.partition)
            except BufferError:
                produce_when_room(self._producer, self.settings.transaction_timeout_s, emit.topic,
                                  emit.value, emit.key, emit.partition)
        self.counters.emitted += len(emits)

    def _commit(self, batch: list[Message], states: dict[int, BatchState]) -> dict[int, int]:
        """Changelog, offsets and outputs in one transaction; returns each shard's changelog end."""
        changelog_ends: dict[int, int] = {}

        def remember(err: KafkaError | None, msg: Message) -> None:
            partition, offset = msg.partition(), msg.offset()
            if err is None and partition is not None and offset is not None:
                changelog_ends[partition] = offset

        for partition, state in states.items():
            items = list(state.writes.items())
            for index, (key, value) in enumerate(items):
                on_delivery = remember if index == len(items) - 1 else None
                try:
                    self._producer.produce(self.changelog_topic, value, key, partition=partition,
                                           on_delivery=on_delivery)
                except BufferError:
                    produce_when_room(self._producer, self.settings.transaction_timeout_s,
                                      self.changelog_topic, value, key, partition, on_delivery)
        timeout_s = self.settings.transaction_timeout_s
        offsets, group = self._offsets(batch), self._consumer.consumer_group_metadata()
        send = self._producer.send_offsets_to_transaction
        self._watchdog.transactional("send_offsets_to_transaction", timeout_s,
                                     lambda: send(offsets, group, timeout_s))
        self._commit_transaction()
        self._producer.poll(0)  # serve any delivery report commit_transaction left queued
        self.lifecycle.committed([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        return changelog_ends

    def _commit_transaction(self) -> None:
        timeout_s = self.settings.transaction_timeout_s
        self._watchdog.transactional("commit_transaction", timeout_s,
                                     lambda: self._producer.commit_transaction(timeout_s))

    @staticmethod
    def _offsets(batch: list[Message]) -> list[TopicPartition]:
        # A partition's records are in offset order: the last one seen gives its next offset.
        last = {(message.topic(), message.partition()): message.offset() for message in batch}
        return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]  # type: ignore[arg-type,operator]

    def _apply(self, states: dict[int, BatchState], changelog_ends: dict[int, int]) -> None:
        for partition, state in states.items():
            if state.writes:
                state.store.apply(state.writes, changelog_ends.get(partition))

    def _abort(self, batch: list[Message], error: KafkaException) -> None:
        """An abortable error: drop the batch's state, abort, rewind to the batch's first offsets."""
        kafka_error: KafkaError = error.args[0]
        if not kafka_error.txn_requires_abort():
            raise RuntimeFailure(f"transaction failed: {kafka_error}") from error
        log.warning("aborting batch of %d: %s", len(batch), kafka_error)
        self._identities.aborted()
        if self._routing is not None:
            self._routing.aborted()
        timeout_s = self.settings.transaction_timeout_s
        self._watchdog.transactional("abort_transaction", timeout_s,
                                     lambda: self._producer.abort_transaction(timeout_s))
        self.counters.aborted_batches += 1
        if self._watch is not None and kafka_error.code() in SUSPECT:
            cause = self._watch.diagnose()  # aborted already: nothing of the batch committed
            if cause is not None:
                raise cause from error
        if self._inflow is not None:
            self._inflow.rewind(batch)  # the input records held for the next batch too
        else:
            for (topic, partition), offset in first_offsets(batch).items():
                self._consumer.seek(TopicPartition(topic, partition, offset))
