"""The near-duplicate decision: a 32-byte minwise sketch of each page's word pairs, checked on the
candidates the SimHash block tables return.

Why a second check. A 64-bit SimHash (Charikar 2002) within k bits is a cheap index (Manku, Jain and
Das Sarma, WWW 2007; :mod:`streams.pages.blocks`), but a poor decision on real pages: on the 125
person-judged ClueWeb pairs of bench/clueweb_bench.py, some pairs judged "different content on the
same site template" lie closer than many pairs judged "the same content" (docs/near-duplicates.md,
"The decision on real pages", has the counts). Henzinger ("Finding near-duplicate web pages: a
large-scale evaluation of algorithms", SIGIR 2006) found the same on 1.6 billion pages (neither
shingling nor SimHash precise on pages of one site) and proposed combining them: SimHash finds
candidates, shingle resemblance decides. Here the block tables bring up the candidates (any stored
page sharing a table key, accepted up to ``radius`` bits), and the decision is the estimated
resemblance of the two pages' word pairs, with their sizes.

The sketch (:func:`sketch_tokens`). Broder's resemblance (Broder, "On the resemblance and
containment of documents", 1997) of the two sets of word 2-shingles, ``J = |A ∩ B| / |A ∪ B|``,
estimated by minwise hashing in its compact forms:

* *One permutation hashing* (Li, Owen and Zhang, NIPS 2012): one hash per shingle; its top 8 bits
  choose one of :data:`SLOTS` = 256 bins and a bin keeps its smallest hash, so a sketch costs one
  hash and one sort of the shingles instead of 256 hashes each. The chance that two sets' bins hold
  the same minimum is ``J``.
* *Densification* (Shrivastava, "Optimal densification for fast and accurate minwise hashing",
  ICML 2017): a page with fewer shingles than bins leaves bins empty; an empty bin ``i`` takes the
  value of the first non-empty bin in a fixed pseudo-random sequence ``h(i, 1), h(i, 2), ...``, the
  same for every page, which keeps the match probability at ``J``.
* *b-bit minwise hashing* (Li and König, "b-Bit minwise hashing", WWW 2010): only the lowest bit
  of each bin is kept. Two bins then agree with probability ``P = J + (1 - J) / 2``, so
  ``J = 2 P - 1`` is estimated from the share of the 256 bits that agree. At a fixed 32 bytes, one
  bit per bin estimated best on the judged pairs, better than fewer bins of more bits each
  (docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis, measured"), as Li and König
  found for high resemblance. Its standard deviation is
  ``sqrt(P (1 - P) / 256) / (1/2)``: 0.037 at J = 0.8.

The sketch also keeps the number of distinct shingles, so that the two pages' sizes can be compared
(:func:`length_ratio`): two pages of one template with different content share the template's
shingles, and their sizes differ by what their contents differ; copies of one page have nearly
the same size.

The decision (:func:`is_near_duplicate`, :data:`DEFAULT_RULE`): within ``radius`` bits, estimated
resemblance at least ``min_resemblance`` and sizes within ``min_length_ratio``. The defaults were
chosen on the judged pairs by repeated stratified cross-validation and checked on the labelled set
of testing/neardup_set.py (bench/clueweb_bench.py, REPORT and docs give the figures). Exact copies
(equal text digests) are decided before, by the digest.

Everything a check needs travels with a page: :meth:`Sketch.encode` is :data:`SKETCH_BYTES` = 36
bytes (32 of bins, 4 of shingle count), for the probe record and for each stored entry. The sketch
is computed from the same tokens as the SimHash (:func:`streams.pages.features.text_tokens`), numbers
included. Changing anything here changes every sketch: bump :data:`SKETCH_VERSION`.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from streams.pages.features import fmix64, shingle_hashes

SKETCH_VERSION: Final = 1
SHINGLE_WORDS: Final = 2
SLOTS: Final = 256
SLOT_BITS: Final = 8  # log2(SLOTS): a shingle's bin is the top 8 bits of its hash
BINS_BYTES: Final = SLOTS // 8
SKETCH_BYTES: Final = BINS_BYTES + 4
MAX_SHINGLES: Final = 0xFFFFFFFF

SEED: Final = 0x243F6A8885A308D3  # the sketch's hashes are not the SimHash's: pi's first 64 bits
_PROBE_STEP: Final = np.uint64(0x9E3779B97F4A7C15)  # odd (2^64 / golden ratio)
_MAX_ROUNDS: Final = 64
_HEAD: Final = struct.Struct(">I")
U64Array: TypeAlias = npt.NDArray[np.uint64]


@dataclass(frozen=True, slots=True)
class Sketch:
    """``bins``: the lowest bit of each of the 256 bins' minimum (bit ``i`` of the big-endian integer
    is bin ``i``), 32 bytes; ``shingles``: the number of distinct shingles (saturating at 2^32 - 1)."""

    bins: bytes
    shingles: int

    def __post_init__(self) -> None:
        if len(self.bins) != BINS_BYTES or not 0 <= self.shingles <= MAX_SHINGLES:
            raise ValueError(f"not a sketch: {len(self.bins)} bytes of bins, {self.shingles} shingles")

    def encode(self) -> bytes:
        """:data:`SKETCH_BYTES` bytes: the shingle count (big-endian) then the bins."""
        return _HEAD.pack(self.shingles) + self.bins

    @classmethod
    def decode(cls, raw: bytes) -> Sketch:
        if len(raw) != SKETCH_BYTES:
            raise ValueError(f"a sketch is {SKETCH_BYTES} bytes, not {len(raw)}")
        return cls(bytes(raw[_HEAD.size:]), _HEAD.unpack_from(raw)[0])


@dataclass(frozen=True, slots=True)
class PageSignature:
    """What the decision reads of a page: its SimHash (the tables' key) and its sketch."""

    simhash: int
    sketch: Sketch


@dataclass(frozen=True)
class NearDuplicateRule:
    """When a candidate from the block tables is a near-duplicate (:func:`is_near_duplicate`).

    * ``radius`` (10): SimHashes at most this many bits apart. The block tables only bring up pages
      sharing a table key, all within their ``k`` and some further (the default 10 tables of 2 of 5
      blocks: a page 6 bits away shares a key with probability 0.34 for random bit positions); a
      random stored page sharing a 26-bit key is within 10 of the other 38 bits with probability
      0.001, so nearly every record read is for a real candidate.
    * ``min_resemblance`` (0.65): estimated Jaccard resemblance of the word 2-shingles.
    * ``min_length_ratio`` (0.96): the smaller page has at least this share of the larger page's
      distinct shingles.

    Chosen on the 125 judged ClueWeb pairs (bench/clueweb_bench.py) by cross-validation over a
    grid of rules; 0.65 is the strict end of a plateau of equal scores (a lower threshold would only
    admit more different pages of equal size elsewhere), and 10 bits keeps records read for random
    key-sharers rare. docs/near-duplicates.md has the grid, the folds and the figures.
    """

    radius: int = 10
    min_resemblance: float = 0.65
    min_length_ratio: float = 0.96

    def __post_init__(self) -> None:
        if not (0 <= self.radius <= 64 and 0.0 <= self.min_resemblance <= 1.0
                and 0.0 <= self.min_length_ratio <= 1.0):
            raise ValueError(f"near-duplicate rule out of range: {self}")


DEFAULT_RULE: Final = NearDuplicateRule()


def empty_sketch() -> Sketch:
    """The sketch of a text without tokens: all bits 0, no shingles."""
    return Sketch(bytes(BINS_BYTES), 0)


def sketch_tokens(tokens: U64Array, shingle_words: int = SHINGLE_WORDS, seed: int = SEED) -> Sketch:
    """The sketch of a text's token hashes (:func:`streams.pages.features.text_tokens`, in text
    order): its distinct ``shingle_words``-shingles, one permutation hashed into 256 bins, empty bins
    densified, one bit kept per bin (see the module docstring). A text with fewer tokens than a
    shingle is one shingle; a text without tokens has an empty sketch (all bits 0, no shingles).
    Sketches compare only if made with the same ``seed`` (:data:`SEED`; the benchmark varies it to
    see how much a threshold depends on one seed's estimation errors)."""
    if tokens.size == 0:
        return Sketch(bytes(BINS_BYTES), 0)
    return sketch_shingles(shingle_hashes(tokens, shingle_words), seed)


def sketch_shingles(shingles: U64Array, seed: int = SEED) -> Sketch:
    """The sketch of a set of 64-bit shingle hashes (their order and repetitions do not matter).

    Each hash is mixed again with ``seed`` (:func:`fmix64`), so that its bins do not follow the
    bits the SimHash reads; the hashes are sorted (``np.sort``, cheaper here than ``np.unique``:
    docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis, measured"), and a bin's
    minimum is its first hash, found by one ``searchsorted``.
    """
    if shingles.size == 0:
        return Sketch(bytes(BINS_BYTES), 0)
    hashed = np.sort(fmix64(shingles ^ np.uint64(seed)))
    distinct = 1 + int(np.count_nonzero(hashed[1:] != hashed[:-1]))
    bins = (hashed >> np.uint64(64 - SLOT_BITS)).astype(np.intp)
    every = np.arange(SLOTS)
    first = np.minimum(np.searchsorted(bins, every), hashed.size - 1)  # each bin's smallest hash, if any
    filled = bins[first] == every
    minima = np.where(filled, hashed[first], np.uint64(0))
    values = minima if filled.all() else _densified(minima, filled)
    bits = (values & np.uint64(1)).astype(np.uint8)
    return Sketch(np.packbits(bits).tobytes(), min(distinct, MAX_SHINGLES))


def _densified(minima: U64Array, filled: npt.NDArray[np.bool_]) -> U64Array:
    """Each empty bin takes the value of the first filled bin along its own fixed pseudo-random
    sequence of bins (Shrivastava 2017); after :data:`_MAX_ROUNDS` tries (a page of very few
    shingles), of the next filled bin after it, cyclically. The same for every page."""
    values = minima.copy()
    empty = np.flatnonzero(~filled)
    tries = _probe_sequences()[empty]  # (empty bins, rounds): the bins each one tries, in order
    hits = filled[tries]
    found = hits.any(axis=1)
    firsts = hits.argmax(axis=1)
    values[empty[found]] = minima[tries[found, firsts[found]]]
    rest = empty[~found]
    if rest.size:
        full = np.flatnonzero(filled)
        values[rest] = minima[full[np.searchsorted(full, rest) % full.size]]
    return values


@functools.cache
def _probe_sequences() -> npt.NDArray[np.intp]:
    """Row ``i``: the bins an empty bin ``i`` tries, ``h(i, 1), ..., h(i, 64)``, each the top 8 bits of
    ``fmix64(i * golden + attempt)``. Built once."""
    attempts = np.arange(1, _MAX_ROUNDS + 1, dtype=np.uint64)
    bins = np.arange(SLOTS, dtype=np.uint64)[:, None] * _PROBE_STEP + attempts[None, :]
    return (fmix64(bins) >> np.uint64(64 - SLOT_BITS)).astype(np.intp)


def matching_bins(a: Sketch, b: Sketch) -> int:
    """How many of the 256 one-bit bins agree (0 to 256)."""
    return SLOTS - (int.from_bytes(a.bins, "big") ^ int.from_bytes(b.bins, "big")).bit_count()


def resemblance(a: Sketch, b: Sketch) -> float:
    """Estimated Jaccard resemblance of the two shingle sets: ``2 P - 1`` for the share ``P`` of
    agreeing bins (Li and König 2010, b = 1), at least 0. Symmetric; 1.0 for equal sketches."""
    return _resemblance(matching_bins(a, b))


def length_ratio(a: Sketch, b: Sketch) -> float:
    """The smaller distinct shingle count over the larger (1.0 when both are empty)."""
    return _ratio(a.shingles, b.shingles)


def _resemblance(agreeing_bins: int) -> float:
    return max(0.0, 2.0 * agreeing_bins / SLOTS - 1.0)


def _ratio(shingles: int, other_shingles: int) -> float:
    low, high = sorted((shingles, other_shingles))
    return low / high if high else 1.0


def is_near_duplicate(query: PageSignature, stored: PageSignature, distance: int,
                      rule: NearDuplicateRule = DEFAULT_RULE) -> bool:
    """Whether ``stored``, a candidate the block tables returned for ``query`` with its SimHash
    ``distance`` bits away, holds the same content (the module docstring says why and how).

    Equal text digests (exact copies) are decided before this, by the digest alone.
    """
    query_bits = (query.sketch.shingles, int.from_bytes(query.sketch.bins, "big"))
    stored_bits = (stored.sketch.shingles, int.from_bytes(stored.sketch.bins, "big"))
    return agreement(query_bits, stored_bits, distance, rule) is not None


SketchBits = tuple[int, int]  # a sketch as (distinct shingles, its bins as one integer)


def sketch_bits(encoded: bytes) -> SketchBits:
    """An encoded sketch (:meth:`Sketch.encode`) read as numbers, without building a :class:`Sketch`:
    what the stage's probe compares, once per candidate."""
    return _HEAD.unpack_from(encoded)[0], int.from_bytes(encoded[_HEAD.size:], "big")


def agreement(query: SketchBits, stored: SketchBits, distance: int,
              rule: NearDuplicateRule = DEFAULT_RULE) -> int | None:
    """:func:`is_near_duplicate` on sketches read by :func:`sketch_bits`: how many bins agree when
    ``stored`` is a near copy of ``query`` (what ranks it, :func:`match_rank`), else None."""
    if distance > rule.radius:
        return None
    if _ratio(query[0], stored[0]) < rule.min_length_ratio:
        return None
    agreeing = SLOTS - (query[1] ^ stored[1]).bit_count()
    if _resemblance(agreeing) < rule.min_resemblance:
        return None
    return agreeing


def match_rank(query: PageSignature, stored: PageSignature, distance: int) -> tuple[int, int]:
    """How good a near-duplicate match is, smaller first: more agreeing bins, then fewer differing
    SimHash bits. A probe keeps the best of its candidates and the gather step the best of the
    replies: exact copies first, then this, then the earliest page."""
    return (-matching_bins(query.sketch, stored.sketch), distance)
