"""Recovery's replay (streams/runtime/recovery.py) against a model of the changelog, on the in-memory
broker: a batch of the consumer is taken partition run by partition run, its ends of partitions in
their places, and what a store holds afterwards is the last write of each key (a tombstone deletes;
a record without a key is no state), at the offset of the partition's last keyed record, whatever
the write batches (``APPLY_CHUNK``) it was cut into."""

from __future__ import annotations

from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.runtime import recovery
from streams.runtime.clients import KafkaClients
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.recovery import recover
from streams.runtime.store import MemoryStore
from testing.memory_kafka import MemoryKafka

PARTITIONS = 3
records = st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.one_of(st.none(), st.binary(max_size=2)),
                             st.one_of(st.none(), st.binary(max_size=3))), max_size=120)


@settings(max_examples=80, deadline=None)
@given(records, st.integers(1, 8), st.sets(st.integers(0, PARTITIONS - 1)))
def test_a_replay_leaves_each_key_at_its_last_write_and_the_store_at_its_last_keyed_offset(
        written: list[tuple[int, bytes | None, bytes | None]], chunk: int, warm: set[int]) -> None:
    broker = MemoryKafka()
    broker.create_topic("changelog", PARTITIONS)
    model: dict[int, dict[bytes, bytes]] = {partition: {} for partition in range(PARTITIONS)}
    last_keyed: dict[int, int] = {}
    for partition, key, value in written:
        offset = broker.append("changelog", partition, key, value)
        if key is not None:
            last_keyed[partition] = offset
            if value is None:
                model[partition].pop(key, None)
            else:
                model[partition][key] = value
    stores = {partition: MemoryStore() for partition in range(PARTITIONS)}
    for partition in warm:  # a store that already holds its first record resumes after it
        first = next(((key, value) for p, key, value in written if p == partition), None)
        if first is not None and first[0] is not None and first[1] is not None:
            stores[partition].apply({first[0]: first[1]}, 0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recovery, "APPLY_CHUNK", chunk)
        recover(KafkaConfig("memory"), stores, "changelog", clients=cast(KafkaClients, broker))
    for partition, store in stores.items():
        assert dict(store.items()) == model[partition]
        assert store.changelog_offset() == last_keyed.get(partition)
