"""Which partition a keyed record goes to: Kafka's default partitioner, computed here.

Every producer of this project uses librdkafka's ``murmur2_random`` partitioner
(:data:`~streams.runtime.kafka_io.PARTITIONER`), which for a non-null key is the Java client's
default: ``(murmur2(key) & 0x7fffffff) % partitions`` with Kafka's ``Utils.murmur2`` (MurmurHash2,
Austin Appleby, 32-bit, seed ``0x9747b28c``). Computing it here lets a router know a record's
shard before producing it (the URL stage answers repeats of a shard it owns from that shard's
committed store, see :mod:`streams.url_dedup`), and setting the partition explicitly keeps the
record exactly where the producer's partitioner would have put it, so state built either way
agrees. ``tests/test_partitioner.py`` checks Kafka's own test vectors and, against the broker,
the partitions librdkafka chooses.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value.

    Written out in one function, masking once per step where the masks commute with the XORs: the
    URL stage computes it for every fingerprint it routes, and the helper calls of the textbook form
    were half of its cost (tests/test_partitioner.py holds Kafka's test vectors)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for k in struct.unpack(f"<{whole // 4}I", data[:whole]) if whole else ():
        k = (k * _M) & _MASK
        h = ((h * _M) ^ ((k ^ (k >> 24)) * _M)) & _MASK
    rest = data[whole:]
    if rest:
        for index in range(len(rest) - 1, -1, -1):
            h ^= rest[index] << (8 * index)
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's ``murmur2_random``) gives ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
