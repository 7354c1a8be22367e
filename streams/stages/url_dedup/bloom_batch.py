"""Many fingerprints into a :class:`~streams.stages.url_dedup.bloom.BloomFilter` at once, with numpy.

:meth:`BloomFilter.add <streams.stages.url_dedup.bloom.BloomFilter.add>` costs 1.5-2 µs per key
compiled: each of its ``k`` probes reads and writes one byte of a ``bytearray`` through the generic
item protocol, boxing the index. Replaying a changelog adds every key of a shard, so for a restore
that was as much CPU as reading the record from Kafka. Here the probes of a whole chunk are
computed as arrays (the same double hashing, in unsigned 64-bit arithmetic: every intermediate of
the module docstring of :mod:`~streams.stages.url_dedup.bloom` stays under 2^64 for any filter
under 2^63 bits), and the bits set with one ``bitwise_or.at``: about a tenth of the cost per key.

The result is exactly that of adding the keys one by one, in order: the same bits, and the same
``set_bits`` and ``count_items``. The last two depend on the order: a key counts as new when one
of its bits was unset at the time it was added, and a bit unset before the chunk may have been set
by an earlier key of the same chunk. So a key with a bit unset before the chunk that no other key
of the chunk probes is new; a key whose every such bit is probed by other keys of the chunk too is
new only when it is the first (in order) to probe one of them. Only those shared bits are sorted
by owner, about a thousand in a chunk of 20,000 keys.

Not compiled (``setup.py``): numpy does the work, per chunk, not per key.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

# Declared an alias: the compiled build type-checks without numpy installed (numpy is then Any).
U64: TypeAlias = npt.NDArray[np.uint64]


def probes(fingerprints: bytes, size_bits: int, word_mod: int, hash_count: int) -> U64:
    """The bit positions of each 16-byte fingerprint of ``fingerprints`` (concatenated), key by key:
    row *i* holds key *i*'s ``hash_count`` probes, ``(h1 + j·h2') mod m``."""
    words = np.frombuffer(fingerprints, dtype=">u4").astype(np.uint64).reshape(-1, 4)
    m, word = np.uint64(size_bits), np.uint64(word_mod)
    position = ((words[:, 0] % m) * word + words[:, 1]) % m
    step = ((words[:, 2] % m) * word + (words[:, 3] | np.uint64(1))) % m
    found = np.empty((words.shape[0], hash_count), dtype=np.uint64)
    found[:, 0] = position
    for probe in range(1, hash_count):
        position = position + step
        position = np.where(position >= m, position - m, position)
        found[:, probe] = position
    return found


def add_probes(bits: bytearray, found: U64) -> tuple[int, int]:
    """Set the bits of ``found`` (rows of :func:`probes`) in ``bits``; ``(bits newly set, keys that
    set at least one)``, as adding the rows one by one in order would count them."""
    count, hash_count = found.shape
    flat = found.ravel()
    array: Any = np.frombuffer(bits, dtype=np.uint8)
    unset = ~_are_set(array, flat)
    candidates = flat[unset]  # the bits unset before the chunk, key by key
    if not candidates.size:
        return 0, 0
    owners = np.flatnonzero(unset) // hash_count
    ordered = np.sort(candidates)
    repeated_at = ordered[1:] == ordered[:-1]
    repeated = ordered[1:][repeated_at]
    new = np.zeros(count, dtype=np.bool_)
    if repeated.size:
        _set_sorted(array, repeated)  # now a candidate's bit is set only when another key shares it
        shared = _are_set(array, candidates)
        new[owners[~shared]] = True
        positions, holders = candidates[shared], owners[shared]
        order = np.argsort(positions, kind="stable")  # per position, its holders stay in key order
        by_position = positions[order]
        first = np.ones(by_position.size, dtype=np.bool_)
        first[1:] = by_position[1:] != by_position[:-1]
        new[holders[order][first]] = True
    else:
        new[owners] = True
    _set_sorted(array, ordered)
    del array  # the bytearray may be resized again once no view of it is left
    return int(ordered.size - np.count_nonzero(repeated_at)), int(np.count_nonzero(new))


def _are_set(array: Any, positions: U64) -> npt.NDArray[np.bool_]:
    masks = np.left_shift(np.uint8(1), (positions & np.uint64(7)).astype(np.uint8))
    found: npt.NDArray[np.bool_] = (array[(positions >> np.uint64(3)).astype(np.intp)] & masks) != 0
    return found


def _set_sorted(array: Any, ordered: U64) -> None:
    """Set the bits at ``ordered`` (ascending, repeats allowed): the masks of each byte OR-ed
    together first, so each byte is written once."""
    byte_index = (ordered >> np.uint64(3)).astype(np.intp)
    masks = np.left_shift(np.uint8(1), (ordered & np.uint64(7)).astype(np.uint8))
    starts = np.flatnonzero(np.concatenate(([True], byte_index[1:] != byte_index[:-1])))
    array[byte_index[starts]] |= np.bitwise_or.reduceat(masks, starts)
