"""Bloom filters over URL fingerprints: a fixed-size one and a scalable one, in Python.

A Bloom filter (Bloom 1970, "Space/time trade-offs in hash coding with allowable errors") answers
"definitely new" for a URL without touching the exact fingerprint store, for about 9.6 bits per URL
at a 1% false-positive rate; only "possibly seen" needs the store. It has no false negatives.

Keys are the stage's 16-byte fingerprints (128-bit MurmurHash3 of the canonical URL), already
uniformly distributed, so nothing is hashed again here: the two 64-bit halves ``h1, h2`` of the
fingerprint drive double hashing, probe ``i`` being ``(h1 + i*h2) mod m`` (Kirsch & Mitzenmacher
2006, "Less hashing, same performance: building a better Bloom filter": two hash values are enough
for the usual false-positive rate asymptotically). ``h2`` is forced odd and ``m`` is a multiple of
64, so ``h2 mod m`` is never 0 and ``m / gcd(h2, m)`` is a multiple of 64: for ``k <= 64`` the
``k`` probes are always distinct bits, no degenerate cycle.

Why the arithmetic looks the way it does: the module is compiled with mypyc (``setup.py``), which
keeps an integer in a machine word, and multiplies two of them without allocating, only while they
stay under 2^62 and both factors under 2^30. A 64-bit half is over that, so the fingerprint is read
as four 32-bit words, ``h1 = a·2^32 + b`` and ``h2 = c·2^32 + d``, and ``h1 mod m`` is computed as
``((a mod m)·(2^32 mod m) + b) mod m`` (the same value; factors under 2^30 for filters of up to
2^30 bits, 128 MiB, and merely slower beyond). The probes then advance by one addition and a
conditional subtraction; masks are shifts. ``add`` tests and sets in one pass.

The sizing formulas live in :func:`bloom_size` only. Serialized forms are a small versioned header,
the bits, and a CRC32, never pickle, so a truncated or corrupted state file fails loudly with
:class:`BloomFormatError` instead of silently answering "new" for URLs already seen.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from typing import Final

from streams.errors import ConfigError, StateError

_WORDS: Final = struct.Struct(">IIII")  # h1 = a·2^32 + b, h2 = c·2^32 + d (see the module docstring)
_CRC: Final = struct.Struct(">I")
_LENGTH: Final = struct.Struct(">Q")
_CHUNK_BYTES: Final = 1 << 20
WORD_BITS: Final = 64
MAX_HASH_COUNT: Final = 64
BATCH_MIN_KEYS: Final = 256  # add_all: under this, numpy's cost per call is more than it saves
_BATCH_MAX_BITS: Final = 1 << 62  # add_all's unsigned 64-bit probes stay exact under this

BLOOM_MAGIC: Final = b"UBLF"
SCALABLE_MAGIC: Final = b"USBF"
FORMAT_VERSION: Final = 1
# magic, version, hash_count, size_bits, count_items, capacity_items, false_positive_rate
_BLOOM_HEADER: Final = struct.Struct(">4sHHQQQd")
# magic, version, growth_factor, slice_count, initial_capacity_items, false_positive_rate,
# tightening_ratio
_SCALABLE_HEADER: Final = struct.Struct(">4sHHIQdd")


class BloomFormatError(StateError):
    """Serialized Bloom filter bytes are truncated, corrupted, or of an unknown format or version."""


def bloom_size(capacity_items: int, false_positive_rate: float) -> tuple[int, int]:
    """Bits ``m`` and hash count ``k`` for ``capacity_items`` keys at ``false_positive_rate``.

    The optimal sizes for a Bloom filter (Bloom 1970; derivation e.g. in Broder & Mitzenmacher 2004,
    "Network applications of Bloom filters: a survey"): ``m = -n·ln(p) / (ln 2)^2`` and
    ``k = (m/n)·ln 2``. ``m`` is rounded up to whole 64-bit words (the probe argument in the module
    docstring needs it), ``k`` is computed from that ``m``, rounded to nearest, at least 1, at most
    64. Raises :class:`ConfigError` for a capacity below 1 or a rate outside (0, 1).
    """
    _require(capacity_items >= 1, f"capacity_items must be >= 1, got {capacity_items}")
    _require(0.0 < false_positive_rate < 1.0, f"false_positive_rate must be in (0, 1): {false_positive_rate}")
    ideal_bits = -capacity_items * math.log(false_positive_rate) / (math.log(2) ** 2)
    size_bits = max(WORD_BITS, math.ceil(ideal_bits / WORD_BITS) * WORD_BITS)
    hash_count = min(MAX_HASH_COUNT, max(1, round(size_bits / capacity_items * math.log(2))))
    return size_bits, hash_count


class BloomFilter:
    """A fixed-size Bloom filter over 16-byte fingerprints, stored in a ``bytearray``.

    ``count_items`` counts the adds that set at least one bit (the filter's own view of "new"); it
    undercounts the distinct keys added by the false positives met on the way. ``set_bits`` is a
    running popcount kept by :meth:`add`, so :meth:`fill_ratio` is O(1).
    """

    __slots__ = ("_bits", "_size_bits", "_word_mod", "_hash_count", "_count_items", "_set_bits",
                 "capacity_items", "false_positive_rate")

    def __init__(self, capacity_items: int, false_positive_rate: float) -> None:
        size_bits, hash_count = bloom_size(capacity_items, false_positive_rate)
        self._setup(size_bits, hash_count, capacity_items, false_positive_rate)

    @classmethod
    def from_size(cls, size_bits: int, hash_count: int) -> BloomFilter:
        """Raw ``m`` (multiple of 64) and ``k`` (1..64); nominal capacity ``m·ln 2 / k`` (where ``k`` is
        optimal), nominal false-positive rate ``2^-k`` (the rate there: half the bits set)."""
        _require(size_bits >= WORD_BITS and not size_bits % WORD_BITS,
                 f"size_bits must be a positive multiple of 64, got {size_bits}")
        _require(1 <= hash_count <= MAX_HASH_COUNT, f"hash_count must be in 1..64, got {hash_count}")
        capacity_items = max(1, int(size_bits * math.log(2) / hash_count))
        bloom = cls._blank()
        bloom._setup(size_bits, hash_count, capacity_items, 0.5**hash_count)
        return bloom

    @classmethod
    def _blank(cls) -> BloomFilter:
        """The smallest filter (one 64-bit word), for the other constructors to set up again:
        ``cls.__new__(cls)`` does not build a class compiled with mypyc (``setup.py``)."""
        return cls(1, 0.5)

    def _setup(self, size_bits: int, hash_count: int, capacity_items: int, rate: float,
               bits: bytearray | None = None) -> None:
        self._bits = bytearray(size_bits // 8) if bits is None else bits
        self._size_bits = size_bits
        self._word_mod = (1 << 32) % size_bits
        self._hash_count = hash_count
        self._count_items = 0
        self._set_bits = 0
        self.capacity_items = capacity_items
        self.false_positive_rate = rate

    @property
    def size_bits(self) -> int:
        return self._size_bits

    @property
    def hash_count(self) -> int:
        return self._hash_count

    @property
    def size_bytes(self) -> int:
        """Bytes of the bit array (the object itself adds about 100 bytes)."""
        return len(self._bits)

    @property
    def count_items(self) -> int:
        return self._count_items

    @property
    def set_bits(self) -> int:
        return self._set_bits

    def add(self, fp: bytes) -> bool:
        """Insert ``fp``; True if it was possibly present already (all its bits were set).

        One pass over the ``k`` bits, testing and setting. ``fp`` must be exactly 16 bytes
        (``struct.error`` otherwise; the check is the unpacking itself, free on the hot path).
        """
        a, b, c, d = _WORDS.unpack(fp)
        bits, size_bits = self._bits, self._size_bits
        position, step = self._start_and_step(a, b, c, d)
        new_bits = 0
        remaining = self._hash_count
        while remaining:
            index = position >> 3
            mask = 1 << (position & 7)
            byte = bits[index]
            if not byte & mask:
                bits[index] = byte | mask
                new_bits += 1
            position += step
            if position >= size_bits:
                position -= size_bits
            remaining -= 1
        if new_bits:
            self._set_bits += new_bits
            self._count_items += 1
            return False
        return True

    def add_all(self, fps: list[bytes]) -> None:
        """:meth:`add` for each fingerprint, in order, without the answers: from
        :data:`BATCH_MIN_KEYS` keys on, all at once with numpy (:mod:`~streams.stages.url_dedup.bloom_batch`,
        the same bits and counts), for a changelog's chunks and a worker's batches."""
        batched = len(fps) >= BATCH_MIN_KEYS and self._size_bits <= _BATCH_MAX_BITS
        joined = b"".join(fps) if batched else b""  # a worker's small batches are not joined for nothing
        if not joined or len(joined) != _WORDS.size * len(fps):
            add = self.add
            for fp in fps:
                add(fp)
            return
        from streams.stages.url_dedup import bloom_batch

        found = bloom_batch.probes(joined, self._size_bits, self._word_mod, self._hash_count)
        new_bits, new_keys = bloom_batch.add_probes(self._bits, found)
        self._set_bits += new_bits
        self._count_items += new_keys

    def add_many(self, fps: Iterable[bytes]) -> list[bool]:
        """:meth:`add` for each fingerprint, in order."""
        add = self.add
        return [add(fp) for fp in fps]

    def __contains__(self, fp: bytes) -> bool:
        a, b, c, d = _WORDS.unpack(fp)
        return self._contains_words(a, b, c, d)

    def _start_and_step(self, a: int, b: int, c: int, d: int) -> tuple[int, int]:
        """The first probe ``h1 mod m`` and the step ``(h2 | 1) mod m`` (module docstring)."""
        size_bits, word = self._size_bits, self._word_mod
        return ((a % size_bits) * word + b) % size_bits, ((c % size_bits) * word + (d | 1)) % size_bits

    def _contains_words(self, a: int, b: int, c: int, d: int) -> bool:
        bits, size_bits = self._bits, self._size_bits
        position, step = self._start_and_step(a, b, c, d)
        remaining = self._hash_count
        while remaining:
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
            position += step
            if position >= size_bits:
                position -= size_bits
            remaining -= 1
        return True

    def contains_many(self, fps: Iterable[bytes]) -> list[bool]:
        """``fp in self`` for each fingerprint, in order."""
        return [fp in self for fp in fps]

    def fill_ratio(self) -> float:
        """Share of bits set, from the running popcount (O(1))."""
        return self._set_bits / self._size_bits

    def estimated_false_positive_rate(self) -> float:
        """``fill_ratio ** k``: the chance that ``k`` independent uniform probes all hit set bits."""
        return self.fill_ratio() ** self._hash_count

    def recount_set_bits(self) -> int:
        """Popcount of the whole bit array, O(m), in 1 MiB chunks: a check, not for the hot path."""
        view = memoryview(self._bits)
        return sum(int.from_bytes(view[at:at + _CHUNK_BYTES], "little").bit_count()
                   for at in range(0, len(view), _CHUNK_BYTES))

    def to_bytes(self) -> bytes:
        """Header, bits, CRC32 of both (see :func:`BloomFilter.from_bytes`)."""
        header = _BLOOM_HEADER.pack(BLOOM_MAGIC, FORMAT_VERSION, self._hash_count, self._size_bits,
                                    self._count_items, self.capacity_items, self.false_positive_rate)
        crc = zlib.crc32(self._bits, zlib.crc32(header))
        return b"".join((header, self._bits, _CRC.pack(crc)))

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> BloomFilter:
        """The filter :meth:`to_bytes` wrote; :class:`BloomFormatError` if the bytes are not exactly that.

        The set-bit count is recounted from the bits rather than trusted from the file.
        """
        header_size = _BLOOM_HEADER.size
        if len(data) < header_size + _CRC.size:
            raise BloomFormatError(f"Bloom filter truncated: {len(data)} bytes, shorter than its header")
        magic, version, hash_count, size_bits, count_items, capacity_items, false_positive_rate = (
            _BLOOM_HEADER.unpack_from(data))
        _check_magic_version(magic, version, BLOOM_MAGIC, "Bloom filter")
        if (size_bits < WORD_BITS or size_bits % WORD_BITS or not 1 <= hash_count <= MAX_HASH_COUNT
                or capacity_items < 1 or not 0.0 < false_positive_rate < 1.0):
            raise BloomFormatError(f"Bloom filter header invalid: m={size_bits} k={hash_count}")
        bits_end = header_size + size_bits // 8
        if len(data) != bits_end + _CRC.size:
            problem = "truncated" if len(data) < bits_end + _CRC.size else "has trailing bytes"
            raise BloomFormatError(f"Bloom filter {problem}: {len(data)} bytes, header says {bits_end + 4}")
        _check_crc(data, "Bloom filter")
        bloom = cls._blank()
        bloom._setup(size_bits, hash_count, capacity_items, false_positive_rate,
                     bytearray(memoryview(data)[header_size:bits_end]))
        bloom._count_items = count_items
        bloom._set_bits = bloom.recount_set_bits()
        return bloom


class ScalableBloomFilter:
    """A Bloom filter that grows, keeping its compounded false-positive rate under a target.

    Almeida, Baquero, Preguiça & Hutchison 2007, "Scalable Bloom Filters": a list of fixed slices,
    slice ``i`` sized for ``c·s^i`` items at rate ``p0·r^i``. A key is present if any slice has it;
    the overall rate is ``1 - Π(1 - p0·r^i) <= Σ p0·r^i = p0 / (1 - r)``, so ``p0 = P·(1 - r)`` keeps
    it under the target ``P`` however many slices are added. A new slice starts when the current
    one has taken its capacity in (new) items, so each slice is used at its design point.

    One deliberate change to the paper: slice 0 is a plain filter at the target ``P`` itself, and
    only the slices added past the configured capacity tighten (``P·(1 - r)·r^(i-1)`` for ``i >= 1``).
    An operator who sizes the capacity right gets exactly the configured rate at the optimal
    1.44·log2(1/P) bits per item (1.2 bytes at 1 %), instead of paying for a first slice at
    ``P·(1 - r)``; past the capacity the overall rate stays below ``P + P = 2P``.

    Defaults, after the paper's discussion: growth factor ``s = 2`` (memory grows in steps of about
    the size so far, so at most about half of it is unused, and the number of slices, hence of
    lookups per key, stays ``log2`` of the growth; the paper suggests ``s = 4`` when growth by
    orders of magnitude is expected); tightening ratio ``r = 0.85``, the middle of the 0.8-0.9 range
    the paper finds best: a smaller ``r`` makes later slices much bigger per item, a larger one
    shrinks ``p0`` and so makes every slice bigger.
    """

    def __init__(self, initial_capacity_items: int, false_positive_rate: float, growth_factor: int = 2,
                 tightening_ratio: float = 0.85) -> None:
        self._configure(initial_capacity_items, false_positive_rate, growth_factor, tightening_ratio)
        self._grow()

    def _configure(self, capacity_items: int, rate: float, growth: int, ratio: float) -> None:
        _require(capacity_items >= 1, f"initial_capacity_items must be >= 1, got {capacity_items}")
        _require(0.0 < rate < 1.0, f"false_positive_rate must be in (0, 1), got {rate}")
        _require(2 <= growth <= 0xFFFF, f"growth_factor must be an integer in 2..65535, got {growth}")
        _require(0.0 < ratio < 1.0, f"tightening_ratio must be in (0, 1), got {ratio}")
        self.initial_capacity_items = capacity_items
        self.false_positive_rate = rate
        self.growth_factor = growth
        self.tightening_ratio = ratio
        self._slices: list[BloomFilter] = []
        self._newest_first: list[BloomFilter] = []
        self._older_newest_first: list[BloomFilter] = []

    def slice_parameters(self, index: int) -> tuple[int, float]:
        """Capacity ``c·s^i``; rate ``P`` for slice 0, ``P·(1 - r)·r^(i-1)`` for the ones after it."""
        capacity_items = self.initial_capacity_items * self.growth_factor**index
        if index == 0:
            return capacity_items, self.false_positive_rate
        first_extra_rate = self.false_positive_rate * (1.0 - self.tightening_ratio)
        return capacity_items, first_extra_rate * self.tightening_ratio ** (index - 1)

    def _grow(self) -> BloomFilter:
        capacity_items, rate = self.slice_parameters(len(self._slices))
        return self._append(BloomFilter(capacity_items, rate))

    def _append(self, bloom: BloomFilter) -> BloomFilter:
        self._slices.append(bloom)
        self._newest_first = self._slices[::-1]
        self._older_newest_first = self._newest_first[1:]
        return bloom

    @property
    def slices(self) -> tuple[BloomFilter, ...]:
        return tuple(self._slices)

    @property
    def size_bytes(self) -> int:
        return sum(bloom.size_bytes for bloom in self._slices)

    @property
    def count_items(self) -> int:
        return sum(bloom.count_items for bloom in self._slices)

    def add(self, fp: bytes) -> bool:
        """Insert ``fp`` into the current slice unless some slice may have it; True if it may have."""
        current = self._slices[-1]
        if current._count_items >= current.capacity_items:
            current = self._grow()
        older = self._older_newest_first
        if older:
            a, b, c, d = _WORDS.unpack(fp)
            for bloom in older:
                if bloom._contains_words(a, b, c, d):
                    return True
        return current.add(fp)

    def add_many(self, fps: Iterable[bytes]) -> list[bool]:
        """:meth:`add` for each fingerprint, in order."""
        add = self.add
        return [add(fp) for fp in fps]

    def __contains__(self, fp: bytes) -> bool:
        a, b, c, d = _WORDS.unpack(fp)
        for bloom in self._newest_first:  # noqa: SIM110 - a plain loop, any() over a generator is slower
            if bloom._contains_words(a, b, c, d):
                return True
        return False

    def contains_many(self, fps: Iterable[bytes]) -> list[bool]:
        """``fp in self`` for each fingerprint, in order."""
        return [fp in self for fp in fps]

    def fill_ratio(self) -> float:
        """Share of bits set in the current (newest) slice, the one that takes new items."""
        return self._slices[-1].fill_ratio()

    def overall_fill_ratio(self) -> float:
        """Share of bits set over all slices."""
        return sum(bloom.set_bits for bloom in self._slices) / sum(bloom.size_bits for bloom in self._slices)

    def estimated_false_positive_rate(self) -> float:
        """``1 - Π(1 - fp_i)`` with each slice's rate from its actual fill (slices are independent)."""
        pass_probability = 1.0
        for bloom in self._slices:
            pass_probability *= 1.0 - bloom.estimated_false_positive_rate()
        return 1.0 - pass_probability

    def to_bytes(self) -> bytes:
        """Header, each slice as length + :meth:`BloomFilter.to_bytes`, CRC32 of all of it."""
        parts = [_SCALABLE_HEADER.pack(SCALABLE_MAGIC, FORMAT_VERSION, self.growth_factor, len(self._slices),
                                       self.initial_capacity_items, self.false_positive_rate,
                                       self.tightening_ratio)]
        for bloom in self._slices:
            encoded = bloom.to_bytes()
            parts += (_LENGTH.pack(len(encoded)), encoded)
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> ScalableBloomFilter:
        """The filter :meth:`to_bytes` wrote; :class:`BloomFormatError` if the bytes are not exactly that."""
        if len(data) < _SCALABLE_HEADER.size + _CRC.size:
            raise BloomFormatError(f"scalable Bloom filter truncated: {len(data)} bytes, less than a header")
        magic, version, growth_factor, slice_count, initial_capacity_items, rate, ratio = (
            _SCALABLE_HEADER.unpack_from(data))
        _check_magic_version(magic, version, SCALABLE_MAGIC, "scalable Bloom filter")
        _check_crc(data, "scalable Bloom filter")
        crc_at = len(data) - _CRC.size
        try:  # a one-word filter first (cls.__new__ does not build a mypyc-compiled class), then the header's
            sbf = cls(1, rate, growth_factor, ratio)
            sbf._configure(initial_capacity_items, rate, growth_factor, ratio)
        except ConfigError as error:
            raise BloomFormatError(f"scalable Bloom filter header invalid: {error}") from error
        offset = _SCALABLE_HEADER.size
        for index in range(slice_count):
            if offset + _LENGTH.size > crc_at:
                raise BloomFormatError(f"scalable Bloom filter truncated in slice {index} of {slice_count}")
            (length,) = _LENGTH.unpack_from(data, offset)
            offset += _LENGTH.size
            bloom = BloomFilter.from_bytes(memoryview(data)[offset:min(offset + length, crc_at)])
            if (bloom.capacity_items, bloom.false_positive_rate) != sbf.slice_parameters(index):
                raise BloomFormatError(f"scalable Bloom filter slice {index} does not match the header")
            sbf._append(bloom)
            offset += length
        if offset != crc_at or not sbf._slices:
            raise BloomFormatError("scalable Bloom filter has trailing bytes or no slices")
        return sbf


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_magic_version(magic: bytes, version: int, expected_magic: bytes, what: str) -> None:
    if magic != expected_magic:
        raise BloomFormatError(f"not a {what}: magic {magic!r}, expected {expected_magic!r}")
    if version != FORMAT_VERSION:
        raise BloomFormatError(f"{what} format version {version} unsupported (this code: {FORMAT_VERSION})")


def _check_crc(data: bytes | memoryview, what: str) -> None:
    crc_at = len(data) - _CRC.size
    if _CRC.unpack_from(data, crc_at)[0] != zlib.crc32(memoryview(data)[:crc_at]):
        raise BloomFormatError(f"{what} corrupted or truncated: CRC32 mismatch")
