"""``python -m streams url-dedup-migrate``: re-fingerprint the URL seen-set for a new canonicalization.

A URL stage refuses to run on state built with another canonicalization version or profile (see
:mod:`streams.stages.url_dedup.stage`). This command moves the state over, in Kafka, where the state lives:

1. it checks that the stage's workers are stopped and its shard topic is drained (records routed
   under the old version carry old fingerprints and must be decided by the old version);
2. it reads the whole changelog (read_committed): each seen fingerprint with its canonical URL
   (and the name of its crawl, for a URL of a named crawl: :func:`~streams.urls.canonical.scoped`)
   and the time it was marked seen (:mod:`streams.stages.url_dedup.marks`), which the move keeps;
3. in one Kafka transaction it writes, for each URL, the new fingerprint (to the shard the new
   fingerprint routes to, by the same murmur2 partitioner) and a tombstone for the old one where
   they differ, and the new version key to every shard.

Workers then start with the new settings; their local stores catch up from the changelog like after
any restart (tombstones delete, the Bloom front filter is rebuilt). URLs are re-canonicalized from
their stored canonical form, so a move to a stricter profile or a newer version is exact; a move
that needs information a canonical form dropped (aggressive back to safe) cannot restore it.
Bloom-only state keeps no URLs and cannot be migrated: start it afresh under a new ``app_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streams.errors import ConfigError, RecordRejected
from streams.runtime.api import KafkaConfig
from streams.stages.url_dedup import marks
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.stages.url_dedup.stage import VERSION_KEY, state_version
from streams.urls import canonical


@dataclass
class MigrationReport:
    urls: int = 0
    moved: int = 0
    merged: int = 0      # distinct old fingerprints that became one new fingerprint
    rejected: int = 0    # stored URLs the new rules refuse (kept under their old fingerprint)


def _check_drained(kafka: KafkaConfig, group: str, shard_topic: str) -> None:
    consumer = Consumer(kafka.consumer(group))
    try:
        partitions = consumer.list_topics(shard_topic, timeout=30).topics[shard_topic].partitions
        for tp in consumer.committed([TopicPartition(shard_topic, p) for p in partitions], timeout=30):
            _, high = consumer.get_watermark_offsets(tp, timeout=30)
            if high > 0 and tp.offset < high - 1:
                raise ConfigError(f"{shard_topic}[{tp.partition}] still has undecided records "
                                  f"(committed {tp.offset}, end {high}): let the old workers drain it")
    finally:
        consumer.close()


def _read_state(kafka: KafkaConfig, changelog: str) -> tuple[dict[bytes, bytes], int]:
    """Every live fingerprint -> canonical URL in the changelog, and its partition count."""
    consumer = Consumer(kafka.consumer(f"{changelog}.migrate", **{"enable.partition.eof": True}))
    state: dict[bytes, bytes] = {}
    try:
        partitions = consumer.list_topics(changelog, timeout=30).topics[changelog].partitions
        consumer.assign([TopicPartition(changelog, p, 0) for p in partitions])
        open_partitions = set(partitions)
        while open_partitions:
            for message in consumer.consume(10_000, timeout=0.5):
                error, key = message.error(), message.key()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise ConfigError(f"reading {changelog}: {error}")
                    open_partitions.discard(message.partition())
                elif key is not None and len(key) == 16:
                    value = message.value()
                    if value is None:
                        state.pop(key, None)
                    else:
                        state[key] = value
    finally:
        consumer.close()
    return state, len(partitions)


def _moved(value: bytes, scoped: str) -> bytes:
    """The mark of a URL under its new fingerprint: its time kept (a mark of format 1 has none)."""
    at = marks.seen_at_ms(value)
    return scoped.encode() if at is None else marks.mark(scoped, at)


def migrate(kafka: KafkaConfig, group: str, shard_topic: str, changelog: str,
            settings: UrlDedupSettings, transaction_timeout_s: float = 900.0) -> MigrationReport:
    _check_drained(kafka, group, shard_topic)
    state, shards = _read_state(kafka, changelog)
    if state and not any(state.values()):
        raise ConfigError("this state keeps no URLs (Bloom-only mode) and cannot be re-fingerprinted")
    report = MigrationReport(urls=len(state))
    producer = Producer(kafka.transactional_producer(f"{group}.migrate", transaction_timeout_s))
    producer.init_transactions(60)
    producer.begin_transaction()
    written: set[bytes] = set()
    rules = settings.canonical()
    for old_key, value in state.items():
        scoped = marks.scoped_url(value)
        try:
            if scoped is None:
                raise RecordRejected("invalid_url", "a mark without its URL")
            crawl, url = canonical.unscoped(scoped)
            new_url = canonical.canonicalize(url, rules)
        except RecordRejected:
            report.rejected += 1
            continue
        new_key = canonical.fingerprint(new_url, crawl)
        if new_key in written:
            report.merged += 1
        elif new_key != old_key:
            producer.produce(changelog, _moved(value, canonical.scoped(new_url, crawl)), new_key)
            report.moved += 1
        written.add(new_key)
        if new_key != old_key and old_key not in written:
            producer.produce(changelog, None, old_key)
        producer.poll(0)
    for partition in range(shards):
        producer.produce(changelog, state_version(settings), VERSION_KEY, partition=partition)
    producer.commit_transaction(transaction_timeout_s)
    return report

