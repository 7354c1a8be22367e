"""Which partition a keyed record goes to: Kafka's default partitioner, computed here.

Every producer of this project uses librdkafka's ``murmur2_random`` partitioner
(:data:`~streams.runtime.kafka_io.PARTITIONER`), which for a non-null key is the Java client's
default: ``(murmur2(key) & 0x7fffffff) % partitions`` with Kafka's ``Utils.murmur2`` (MurmurHash2,
Austin Appleby, 32-bit, seed ``0x9747b28c``). Computing it here lets the runtime know a record's
shard before producing it (a record of a shard this worker owns is decided at once,
:mod:`streams.runtime.local_path`), and setting the partition explicitly keeps the record exactly
where the producer's partitioner would have put it, so state built either way agrees.
``tests/kafka/test_partitioner.py`` checks Kafka's own test vectors and, against the broker, the
partitions librdkafka chooses.
"""

from __future__ import annotations

import struct
from typing import Final

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_M_LOW: Final = _M & 0xFFFF
_M_HIGH: Final = _M >> 16
_MASK: Final = 0xFFFFFFFF
_WORDS: Final = tuple(struct.Struct(f"<{count}I") for count in range(17))  # keys of up to 64 bytes


def _times_m(value: int) -> int:
    """``(value * m) mod 2^32`` for a 32-bit ``value``, multiplying 16-bit halves only.

    The plain product reaches 2^62; code compiled with mypyc (``setup.py``) multiplies machine
    words only when both factors are under 2^30, and otherwise falls back to arbitrary-precision
    objects: murmur2 was 12 % of a URL worker's time that way. With ``value = vh * 2^16 + vl`` and
    ``m = mh * 2^16 + ml``, the ``vh * mh`` term vanishes modulo 2^32, and only the low 16 bits of
    the cross terms survive the shift."""
    low, high = value & 0xFFFF, value >> 16
    return (low * _M_LOW + (((low * _M_HIGH + high * _M_LOW) & 0xFFFF) << 16)) & _MASK


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value (tests/kafka/test_partitioner.py holds Kafka's
    test vectors). The URL stage computes it for every fingerprint it routes."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    count = length // 4
    words = _WORDS[count] if count < len(_WORDS) else struct.Struct(f"<{count}I")
    for k in words.unpack_from(data):
        k = _times_m(k)
        h = _times_m(h) ^ _times_m(k ^ (k >> 24))
    whole = count * 4
    if whole < length:
        for index in range(length - whole - 1, -1, -1):
            h ^= data[whole + index] << (8 * index)
        h = _times_m(h)
    h ^= h >> 13
    h = _times_m(h)
    return h ^ (h >> 15)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's ``murmur2_random``) gives ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
