"""``python -m streams reshard``: move a stage's state from M shards to N, in Kafka, where it lives.

A stage's shard count is fixed for the life of a *generation* of its state: state partitioned by
shard cannot be reread under another count. A reshard makes the next generation from the current
one, with the workers stopped (they drained, :mod:`streams.runtime.drain`), in named steps:

1. :func:`_begin`: read the current generation (:mod:`streams.runtime.generations`) and mark the
   reshard under way, naming the generation it writes. From here on no worker starts, and a worker
   that joined the group meanwhile stops at its assignment. An earlier attempt that was killed left
   its generation half-written: it is abandoned (its topics deleted) and this one writes the next.
2. :func:`_wait_until_stopped`: the stage's group must empty (a drained worker's membership lapses
   within its session timeout); then :func:`_check_drained`: no record of the old shard topic may
   be undecided (read_committed from the group's offsets to the end). Either failing refuses the
   reshard and puts the current generation back, unchanged.
3. :func:`_copy_state`: every live entry of the old changelog, partition by partition, goes to the
   new changelog's partition the stage's :class:`~streams.runtime.moves.StateMove` gives it; the
   stage's identity entries go to every new shard. The new shard topic starts empty. A state built
   with another identity than this build's (other settings, an older version) is refused, unless
   the plan asks for the store's ``rewrite``, which makes its entries this build's: the URL stage's
   migration to new canonicalization settings is a reshard to the same shard count that asks for
   it.
4. :func:`_switch`: the generations record names the new generation and its shard count: the one
   commit point. Workers started with ``shards=N`` rebuild their local stores from the new changelog
   (a worker's stores of an earlier generation are removed, :mod:`streams.runtime.runner`). The old
   generation's topics are deleted after the switch unless kept.

Killed anywhere before the switch, the old generation is intact and current (workers refuse to
start only while the mark says a reshard is under way); run again, the reshard starts over with a
fresh generation. Killed after it, the reshard is done. The consumer group, and with it every input
offset, is the same for all generations: input that arrived during the stop waits in the input
topics for the new workers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.errors import ReshardRefused, RuntimeFailure, StateError
from streams.runtime.generations import Generation, read_generation, write_generation
from streams.runtime.kafka_io import KafkaConfig, partition_count, pending_records, read_from
from streams.runtime.moves import Placed, StateMove, StateRewrite
from streams.runtime.store_spec import StoreSpec
from streams.runtime.tables import TablesMove
from streams.runtime.topic_admin import COMPACTED, Replication, TopicSpec, ensure_topics
from streams.topics import Topics

log = logging.getLogger(__name__)

Step = Callable[[str], None]  # told the name of each step as it begins (the CLI prints them)


@dataclass(frozen=True)
class ReshardPlan:
    """One reshard: which stage of which application, to how many shards, with what its topics need."""

    topics: Topics
    app_id: str
    stage: str
    shards: int
    topic_config: Mapping[str, str] = field(default_factory=dict)  # e.g. max.message.bytes
    replication: Replication | None = None  # None: the cluster's defaults
    wait_s: float = 60.0  # for the group to empty
    keep_old: bool = False
    internal: tuple[str, ...] = ("shards",)  # the names of the stage's internal topics
    # A state built with another identity is rewritten by the store's rewrite (a stage's migration,
    # asked for by name: url-dedup-migrate); False refuses it, so a reshard run with the wrong
    # settings changes nothing.
    rewrite: bool = False

    def internal_topics(self, topics: Topics) -> list[str]:
        return [topics.internal(self.app_id, self.stage, name) for name in self.internal]


@dataclass
class ReshardReport:
    stage: str
    from_generation: int
    from_shards: int
    to_generation: int
    to_shards: int
    entries_read: int = 0
    entries_written: int = 0
    rewritten: str | None = None  # the store's rewrite ran: what it says it did
    per_table: str | None = None  # the store's tables were moved: what each wrote
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def copy_s_per_million(self) -> float:
        return self.seconds.get("copy", 0.0) / max(self.entries_read, 1) * 1e6


def reshard(kafka: KafkaConfig, plan: ReshardPlan, store: StoreSpec,
            step: Step | None = None) -> ReshardReport:
    """Move the stage's state to ``plan.shards`` shards; see the module docstring for the steps."""
    store.move(1, 1)  # refuses a store that declares no way to move its state, before anything
    tell = step or (lambda name: None)
    began = time.monotonic()
    tell("begin")
    current, target = _begin(kafka, plan)
    report = ReshardReport(plan.stage, current.number, current.shards, target, plan.shards)
    old = plan.topics.at_generation(plan.stage, current.number)
    new = plan.topics.at_generation(plan.stage, target)
    group = plan.topics.group(plan.app_id, plan.stage)
    try:
        tell("wait until stopped")
        _wait_until_stopped(kafka, group, plan.wait_s)
        tell("check drained")
        for internal in plan.internal_topics(old):
            _check_drained(kafka, group, internal)
    except ReshardRefused:
        write_generation(kafka, _generations_topic(plan), current, plan.replication)
        raise
    report.seconds["stop checks"] = time.monotonic() - began
    tell("copy")
    copied = time.monotonic()
    _create_topics(kafka, plan, new)
    try:
        state_copy = _copy_state(kafka, old.changelog(plan.app_id, plan.stage),
                                 new.changelog(plan.app_id, plan.stage), store, current.shards, plan.shards,
                                 plan.rewrite)
        report.entries_read, report.entries_written, report.rewritten, report.per_table = state_copy
    except (ReshardRefused, StateError):
        _delete_topics(kafka, [*plan.internal_topics(new), new.changelog(plan.app_id, plan.stage)])
        write_generation(kafka, _generations_topic(plan), current, plan.replication)
        raise
    report.seconds["copy"] = time.monotonic() - copied
    tell("switch")
    _switch(kafka, plan, Generation(target, plan.shards))
    if not plan.keep_old:
        _delete_topics(kafka, [*plan.internal_topics(old), old.changelog(plan.app_id, plan.stage)])
    report.seconds["total"] = time.monotonic() - began
    return report


def _generations_topic(plan: ReshardPlan) -> str:
    return plan.topics.generations_topic(plan.app_id, plan.stage)


def current_shards(kafka: KafkaConfig, topics: Topics, app_id: str, stage: str) -> int:
    """The shard count of the stage's current state (a reshard to it rewrites the state in place)."""
    return _current(kafka, topics, app_id, stage).shards


def _current(kafka: KafkaConfig, topics: Topics, app_id: str, stage: str) -> Generation:
    """The generations record, or generation 0 with its changelog's partition count."""
    found = read_generation(kafka, topics.generations_topic(app_id, stage))
    if found is not None:
        return found
    changelog = topics.changelog(app_id, stage, 0)
    partitions = partition_count(kafka, changelog)
    if partitions is None:
        raise ReshardRefused(f"{stage} of {app_id} has no state yet ({changelog} does not exist): "
                             "start its workers instead")
    return Generation(0, partitions)


def _begin(kafka: KafkaConfig, plan: ReshardPlan) -> tuple[Generation, int]:
    """The current generation, and the one this reshard writes (marked under way before returning)."""
    found = _current(kafka, plan.topics, plan.app_id, plan.stage)
    current = Generation(found.number, found.shards)
    target = max(found.number, found.moving_to or 0) + 1
    if found.moving_to is not None:
        abandoned = plan.topics.at_generation(plan.stage, found.moving_to)
        log.warning("an earlier reshard to generation %d did not finish: abandoning it", found.moving_to)
        _delete_topics(kafka, [*plan.internal_topics(abandoned),
                               abandoned.changelog(plan.app_id, plan.stage)])
    write_generation(kafka, _generations_topic(plan),
                     Generation(current.number, current.shards, target, plan.shards), plan.replication)
    return current, target


def _wait_until_stopped(kafka: KafkaConfig, group: str, wait_s: float) -> None:
    """Until the group has no member; a stopped static member lapses after its session timeout."""
    admin = AdminClient(kafka.admin())
    deadline = time.monotonic() + wait_s
    while True:
        description = admin.describe_consumer_groups([group])[group].result(timeout=30)
        members = [member.group_instance_id or member.member_id for member in description.members]
        if not members:
            return
        if time.monotonic() > deadline:
            raise ReshardRefused(f"group {group} still has members after {wait_s:.0f} s "
                                 f"({', '.join(members)}): "
                                 "stop the stage's workers first (run them with --drain until they exit)")
        time.sleep(1.0)


def _check_drained(kafka: KafkaConfig, group: str, shard_topic: str) -> None:
    """Every record of the shard topic is decided: nothing committed lies past the group's offsets."""
    count = partition_count(kafka, shard_topic)
    if count is None:
        return
    undecided = pending_records(kafka, group, shard_topic, count)
    if undecided:
        raise ReshardRefused(f"{undecided} records of {shard_topic} are not decided yet: run the stage's "
                             "workers with --drain until they exit, then reshard")


def _create_topics(kafka: KafkaConfig, plan: ReshardPlan, new: Topics) -> None:
    ensure_topics(kafka, [
        *(TopicSpec(topic, plan.shards, plan.topic_config, fixed_partitions=True)
          for topic in plan.internal_topics(new)),
        TopicSpec(new.changelog(plan.app_id, plan.stage), plan.shards, {**COMPACTED, **plan.topic_config},
                  fixed_partitions=True),
    ], plan.replication)


def _copy_state(kafka: KafkaConfig, old_changelog: str, new_changelog: str, store: StoreSpec,
                old_shards: int, shards: int, rewrites: bool = False
                ) -> tuple[int, int, str | None, str | None]:
    """Each old partition's live entries, placed by the store's move (or its rewrite, for a state
    built with another identity); identity entries to every new shard. Returns (entries read,
    entries written, what the rewrite did, what the tables' moves wrote: None when none ran). A
    partition is read whole before its entries are placed (a compacted changelog may still hold a
    key's older values, and its tombstones)."""
    count = partition_count(kafka, old_changelog) or 0
    identity = store.identity.entries
    producer = _Writer(kafka, new_changelog)
    move: StateMove | None = None
    rewrite: StateRewrite | None = None
    read = 0
    for partition in range(count):
        live: dict[bytes, bytes | None] = {}
        for message in read_from(kafka, [TopicPartition(old_changelog, partition, -2)]):
            key = message.key()
            if key is not None:
                live[key] = message.value()
        if move is None and any(value is not None for value in live.values()):  # an empty one tells nothing
            where = f"{old_changelog}[{partition}]"
            rewrite = _rewrite_for(store, live, where, old_shards, shards) if rewrites else None
            move = rewrite or store.move(old_shards, shards)
        for key, value in live.items():
            if value is None:
                continue
            read += 1
            if key in identity:
                if value != identity[key] and rewrite is None:
                    raise StateError(f"{old_changelog}[{partition}] holds {key!r}={value!r}, this build "
                                     f"expects {identity[key]!r}: reshard with the settings it was "
                                     "built with")
                continue
            assert move is not None  # chosen above, for the first partition with live entries
            producer.write(move.place(partition, key, value))
    move = move or store.move(old_shards, shards)
    producer.write(move.finish())
    producer.write((shard, key, value) for shard in range(shards) for key, value in identity.items())
    producer.close()
    return (read, producer.written, None if rewrite is None else rewrite.summary(),
            move.summary() if isinstance(move, TablesMove) else None)


def _rewrite_for(store: StoreSpec, first: Mapping[bytes, bytes | None], where: str, old_shards: int,
                 shards: int) -> StateRewrite | None:
    """The store's rewrite when the identity entries of the first partition with live entries (every
    partition that decided a record holds them alike) are not this build's and it has one; else
    None (its layout moves it, or refuses it)."""
    identity = store.identity.entries
    if store.rewrite is None or all(first.get(key, value) == value for key, value in identity.items()):
        return None
    found = {key: first.get(key) for key in identity}
    log.info("%s was built with %s, this build with %s: rewriting it", where, found, dict(identity))
    return store.rewrite(old_shards, shards)


class _Writer:
    """Writes placed entries to the new changelog: idempotent, acks=all, every delivery checked."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        self._topic = topic
        self._producer = Producer(kafka.producer(**{"linger.ms": 50, "batch.size": 1_000_000,
                                                    "queue.buffering.max.messages": 1_000_000,
                                                    "compression.type": "lz4"}))
        self.written = 0
        self._failed: list[str] = []

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._failed.append(str(error))

    def write(self, entries: Iterable[Placed]) -> None:
        for shard, key, value in entries:
            while True:
                try:
                    self._producer.produce(self._topic, value, key, partition=shard,
                                           on_delivery=self._delivered)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.written += 1
            if self.written % 50_000 == 0:
                self._producer.poll(0)

    def close(self) -> None:
        if self._producer.flush(120) != 0 or self._failed:
            raise RuntimeFailure(f"writing {self._topic}: {len(self._failed)} entries failed "
                                 f"({self._failed[:1]}), or some were left unflushed: run the reshard again")


def _switch(kafka: KafkaConfig, plan: ReshardPlan, generation: Generation) -> None:
    write_generation(kafka, _generations_topic(plan), generation, plan.replication)
    log.info("%s of %s: generation %d with %d shards is current", plan.stage, plan.app_id,
             generation.number, generation.shards)


def _delete_topics(kafka: KafkaConfig, names: list[str]) -> None:
    admin = AdminClient(kafka.admin())  # held until every future is answered
    existing = [name for name in names if name in admin.list_topics(timeout=30).topics]
    if not existing:
        return
    for name, future in admin.delete_topics(existing, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as error:
            log.warning("could not delete %s: %s", name, error)
