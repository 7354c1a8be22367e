"""Restore from nothing in processes of their own (streams/runtime/restore.py) builds, for every
stage's store, exactly what the worker's in-process recovery builds from the same changelog: the same
keys and values, the same changelog offset and metadata, and for the URL stage the same Bloom filter
snapshot. The changelog has what real ones have: keys written again and again, tombstones (deleted
keys, some written again after), keys of other shapes than the stage's data keys (its metadata
keys), an aborted transaction that must leave nothing, and more records a partition than one
write batch holds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams import config, registry
from streams.runtime import restore
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import APPLY_CHUNK, recover
from streams.runtime.restore import ShardOpener, restore_cold
from streams.runtime.store import FORMAT_VERSION_KEY, PartitionStore, close_all
from testing import harness as h

pytestmark = pytest.mark.kafka

SHARDS = 3
RECORDS = APPLY_CHUNK + 5_000  # a partition's replay spans two write batches
Changelog = dict[int, dict[bytes, bytes]]  # partition -> what its store must hold


def _opener(stage: str, directory: Path) -> ShardOpener:
    spec = registry.spec(stage)
    settings_type = spec.settings_type()
    runtime = config.RuntimeSettings()
    built = spec.build(settings_type() if settings_type else None, runtime)
    return ShardOpener(built.store().open, directory, SHARDS, 8, 8)


def _records(seed: int) -> list[tuple[bytes, bytes | None]]:
    """Fingerprint-sized keys (most written more than once, some deleted, some written again after),
    and keys of other lengths, in one partition's order."""
    rng = random.Random(seed)
    keys = [rng.randbytes(16) for _ in range(RECORDS // 3)] + [b"meta:%d" % n for n in range(20)]
    keys += [rng.randbytes(rng.choice((1, 7, 12, 31))) for _ in range(200)]
    return [(key, None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 60)))
            for key in rng.choices(keys, k=RECORDS)]


def _produce(kafka: KafkaConfig, topic: str) -> Changelog:
    """Each partition's records in transactions of 1,000, one more transaction aborted in each."""
    producer = Producer(kafka.transactional_producer(h.fresh_name("restore-test"), 60))
    producer.init_transactions(30)
    expected: Changelog = {}
    for partition in range(SHARDS):
        records, held = _records(partition), expected.setdefault(partition, {})
        for start in range(0, len(records), 1_000):
            producer.begin_transaction()
            for key, value in records[start:start + 1_000]:
                producer.produce(topic, value, key, partition)
                if value is None:
                    held.pop(key, None)
                else:
                    held[key] = value
            producer.commit_transaction(30)
        producer.begin_transaction()
        for key, _ in records[:500]:
            producer.produce(topic, b"aborted", key, partition)
        producer.flush(30)
        producer.abort_transaction(30)
    return expected


def _state(stores: dict[int, PartitionStore]) -> dict[int, object]:
    return {shard: (dict(store.items()), store.changelog_offset(), store.get_meta(FORMAT_VERSION_KEY),
                    store.get_meta("bloom_removed")) for shard, store in stores.items()}


def _built(opener: ShardOpener, kafka: KafkaConfig, topic: str) -> dict[int, object]:
    """Open the shards as the worker does, recover what is left, close them; what they hold then."""
    stores = {shard: opener(shard) for shard in range(SHARDS)}
    try:
        recover(kafka, stores, topic)
    finally:
        close_all(stores.values())
    stores = {shard: opener(shard) for shard in range(SHARDS)}
    try:
        return _state(stores)
    finally:
        close_all(stores.values())


@pytest.mark.parametrize("stage", [spec.name for spec in registry.ALL])
def test_a_restore_in_processes_builds_what_recovery_in_the_worker_builds(
        kafka: KafkaConfig, prefix: str, tmp_path: Path, stage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = f"{prefix}{stage}.changelog"
    h.create_topics(kafka, [topic], SHARDS)
    expected = _produce(kafka, topic)
    in_worker = _built(_opener(stage, tmp_path / "recovered"), kafka, topic)

    monkeypatch.setattr(restore, "PARALLEL_MIN_OFFSETS", 0)
    opener = _opener(stage, tmp_path / "restored")
    result = restore_cold(kafka, opener, range(SHARDS), topic, processes=2)
    assert sorted(result.records) == list(range(SHARDS)), "the shards were not restored in processes"
    restored = _built(opener, kafka, topic)

    assert restored == in_worker
    for shard, (items, offset, _, _) in in_worker.items():  # type: ignore[misc]
        assert items == expected[shard] and offset is not None
    snapshots = [[(tmp_path / where / f"shard-{shard:04d}" / "bloom.snapshot") for shard in range(SHARDS)]
                 for where in ("recovered", "restored")]  # the URL stage's filters, written on closing
    if snapshots[0][0].exists():
        assert [path.read_bytes() for path in snapshots[0]] == [path.read_bytes() for path in snapshots[1]]
