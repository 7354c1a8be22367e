"""Block tables for finding fingerprints within k bits (Manku, Jain and Das Sarma, WWW 2007).

Manku, Jain and Das Sarma, "Detecting near-duplicates for web crawling" (WWW 2007), section 3.1:
split the 64 bits into ``b`` blocks. Two fingerprints that differ in at most ``k`` bits differ in
at most ``k`` blocks (pigeonhole), so they agree exactly on at least ``b - k`` blocks. Keep one
table for each choice of ``b - k`` blocks, ``C(b, b - k)`` tables, keyed by those blocks' bits
(about ``64 (b - k) / b`` bits): every fingerprint within ``k`` bits of a query shares the query's
key in at least one table, and the candidates found there are checked by Hamming distance
(:func:`near_matches`). With ``N`` random fingerprints stored, a table's bucket holds about
``N / 2^key_bits`` of them (:func:`expected_bucket_size`). More blocks mean longer keys and
smaller buckets but more tables; :func:`choose_blocks` takes the fewest tables whose buckets stay
O(1). For k = 3 that is 4 tables of 16-bit keys up to 2^16 fingerprints, 10 tables of 25-26 bits
up to 2^25 (the default ``expected_pages`` of 10^7 is 2^23.3), 20 tables of 31-33 bits up to 2^31;
Manku et al. chose the 20-table design for 8·10^9 (2^32.9) pages, accepting about 2^33/2^31 = 4
candidates per table (``max_bucket=4`` here reproduces that choice).

Keys are fixed-width big-endian bytes: one byte of table index, then the table's blocks' bits
packed together (most significant block first) in as many bytes as the longest key needs, so keys
of different tables never collide and sort by table. The masks and shifts are computed once per
design; :meth:`BlockDesign.keys` is a few integer operations per table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from streams.errors import ConfigError

BITS = 64
MAX_TABLES = 256  # the table index is one byte of the key

T = TypeVar("T", bound=Hashable)


def block_sizes(blocks: int) -> tuple[int, ...]:
    """Widths of the ``blocks`` blocks, most significant first; the first ``64 % blocks`` are a bit wider."""
    if not 1 <= blocks <= BITS:
        raise ConfigError(f"blocks must be in 1..{BITS}, got {blocks}")
    base, wider = divmod(BITS, blocks)
    return tuple(base + 1 if index < wider else base for index in range(blocks))


def min_key_bits(blocks: int, k: int) -> int:
    """The shortest table key of a design: its ``blocks - k`` narrowest blocks."""
    return sum(sorted(block_sizes(blocks))[: blocks - k])


def choose_blocks(k: int, expected: int, *, max_bucket: float = 1.0) -> int:
    """Fewest blocks ``b`` (so fewest tables ``C(b, b - k)``) keeping buckets at most ``max_bucket``.

    The smallest ``b > k`` with ``expected / 2^min_key_bits(b, k) <= max_bucket``, that is
    ``min_key_bits >= log2(expected / max_bucket)`` (Manku et al. 2007, section 3.1). Raises
    :class:`ConfigError` when even the first fitting design needs more than 256 tables.
    """
    if not 0 <= k < BITS:
        raise ConfigError(f"hamming threshold must be in 0..{BITS - 1}, got {k}")
    if expected < 1 or max_bucket <= 0:
        raise ConfigError(f"expected fingerprints must be >= 1 and max_bucket > 0: {expected}, {max_bucket}")
    needed = math.log2(expected / max_bucket)
    for blocks in range(k + 1, BITS + 1):
        if min_key_bits(blocks, k) >= needed:
            if math.comb(blocks, blocks - k) > MAX_TABLES:
                break
            return blocks
    raise ConfigError(f"no block design for k={k} and {expected} fingerprints within {MAX_TABLES} tables")


@dataclass(frozen=True)
class BlockDesign:
    """``blocks`` blocks, Hamming threshold ``k``: ``C(blocks, blocks - k)`` tables of block indexes."""

    blocks: int
    k: int
    tables: tuple[tuple[int, ...], ...] = field(init=False)
    key_bytes: int = field(init=False)  # width of every key, table index byte included
    _extract: tuple[tuple[tuple[int, int, int], ...], ...] = field(init=False, repr=False, compare=False)
    _prefixes: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.k < self.blocks <= BITS:
            raise ConfigError(f"need 0 <= k < blocks <= {BITS}, got k={self.k}, blocks={self.blocks}")
        tables = tuple(itertools.combinations(range(self.blocks), self.blocks - self.k))
        if len(tables) > MAX_TABLES:
            raise ConfigError(f"{len(tables)} tables, over the limit of {MAX_TABLES}")
        sizes = block_sizes(self.blocks)
        lows = [BITS - sum(sizes[: index + 1]) for index in range(self.blocks)]  # lowest bit of each block
        extract = tuple(_runs_of(table, sizes, lows) for table in tables)
        key_bytes = 1 + math.ceil(max(sum(sizes[i] for i in table) for table in tables) / 8)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "key_bytes", key_bytes)
        object.__setattr__(self, "_extract", extract)
        prefixes = tuple(index << 8 * (key_bytes - 1) for index in range(len(tables)))
        object.__setattr__(self, "_prefixes", prefixes)

    def key_bits(self, table: int) -> int:
        """Bits of fingerprint in table ``table``'s keys."""
        sizes = block_sizes(self.blocks)
        return sum(sizes[index] for index in self.tables[table])

    def keys(self, fingerprint: int) -> list[bytes]:
        """One key per table: table index byte, then the table's blocks of ``fingerprint``, big-endian."""
        width = self.key_bytes
        keys = []
        for prefix, runs in zip(self._prefixes, self._extract, strict=True):
            key = prefix
            for shift, mask, out_shift in runs:
                key |= ((fingerprint >> shift) & mask) << out_shift
            keys.append(key.to_bytes(width, "big"))
        return keys


def _runs_of(table: tuple[int, ...], sizes: tuple[int, ...],
             lows: list[int]) -> tuple[tuple[int, int, int], ...]:
    """``(shift, mask, out_shift)`` per run of adjacent blocks of ``table``, packed toward bit 0."""
    runs: list[tuple[int, int]] = []  # (low bit, width) of each run, most significant first
    for index in table:
        if runs and runs[-1][0] == lows[index] + sizes[index]:
            low, width = runs[-1]
            runs[-1] = (lows[index], width + sizes[index])
        else:
            runs.append((lows[index], sizes[index]))
    packed, out_shift = [], sum(width for _, width in runs)
    for low, width in runs:
        out_shift -= width
        packed.append((low, (1 << width) - 1, out_shift))
    return tuple(packed)


def block_design(k: int, expected: int, *, max_bucket: float = 1.0) -> BlockDesign:
    """The design :func:`choose_blocks` picks for threshold ``k`` and ``expected`` fingerprints."""
    return BlockDesign(choose_blocks(k, expected, max_bucket=max_bucket), k)


def expected_bucket_size(design: BlockDesign, stored: int) -> float:
    """Mean fingerprints per probed bucket with ``stored`` random fingerprints: ``N / 2^key_bits``."""
    return sum(stored / (1 << design.key_bits(t)) for t in range(len(design.tables))) / len(design.tables)


def near_matches(fingerprint: int, candidates: Iterable[tuple[int, T]], k: int) -> list[tuple[T, int]]:
    """Distinct candidate items within ``k`` bits of ``fingerprint``, nearest first, as ``(item, distance)``.

    ``candidates`` are ``(fingerprint, item)`` pairs, as the buckets of several tables return them
    (the same item may come from several tables); equal distances keep the candidates' order.
    """
    found: dict[T, int] = {}
    for stored, item in candidates:
        if item not in found:
            distance = (stored ^ fingerprint).bit_count()
            if distance <= k:
                found[item] = distance
    return sorted(found.items(), key=lambda pair: pair[1])


class BlockIndex(Generic[T]):
    """An in-memory set of block tables: ``key -> [(fingerprint, item), ...]`` in one dict.

    The reference for the stage's RocksDB tables and the index of the quality benchmark.
    """

    def __init__(self, design: BlockDesign) -> None:
        self.design = design
        self._buckets: dict[bytes, list[tuple[int, T]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, fingerprint: int, item: T) -> None:
        entry = (fingerprint, item)
        for key in self.design.keys(fingerprint):
            bucket = self._buckets.get(key)
            if bucket is None:
                self._buckets[key] = [entry]
            else:
                bucket.append(entry)
        self._count += 1

    def candidates(self, fingerprint: int) -> list[tuple[int, T]]:
        """Every entry sharing a key with ``fingerprint`` (an item once per table it shares)."""
        found: list[tuple[int, T]] = []
        for key in self.design.keys(fingerprint):
            found.extend(self._buckets.get(key, ()))
        return found

    def near(self, fingerprint: int) -> list[tuple[T, int]]:
        """Stored items within ``design.k`` bits, nearest first (:func:`near_matches`)."""
        return near_matches(fingerprint, self.candidates(fingerprint), self.design.k)
