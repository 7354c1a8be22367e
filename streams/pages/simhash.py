"""64-bit SimHash fingerprints (Charikar 2002), their Hamming distance and their record format.

Charikar, "Similarity estimation techniques from rounding algorithms" (STOC 2002), section 3: for
weighted features with random f-bit hashes, keep one counter per bit, add a feature's weight where
its hash has a 1 and subtract it where it has a 0; bit ``i`` of the fingerprint is set when counter
``i`` ends positive. Two documents' fingerprints then differ in each bit with probability
``theta / pi``, ``theta`` the angle between their weighted feature vectors, so the expected Hamming
distance is ``64 * theta / pi`` and near-duplicates are fingerprints a few bits apart (Manku, Jain
and Das Sarma, WWW 2007: f = 64, k = 3).

The counters are one matrix product: the hashes' bits as a ``(features, 64)`` 0/1 matrix
(``np.unpackbits`` of their little-endian bytes, so column ``i`` is bit ``i``) times the weights;
bit ``i`` is set when the weight on its 1s exceeds half the total. The weights from
:mod:`streams.pages.features` are integers, so the sums are exact and the fingerprint does not
depend on the summation order of the machine's BLAS, nor on taking the product
:data:`ROWS_AT_ONCE` features at a time (the product converts the matrix to float64, 512 bytes a
feature, so a large page's matrix in one piece would take hundreds of megabytes; in these parts it
stays tens: docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis, measured").

Records carry a fingerprint as 16 lowercase hex digits, most significant first (:func:`to_hex`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BITS = 64
HEX_DIGITS = BITS // 4
_HEX = frozenset("0123456789abcdef")
ROWS_AT_ONCE = 1 << 16


def simhash64(hashes: npt.NDArray[np.uint64], weights: npt.NDArray[np.float64]) -> int:
    """Charikar's SimHash of features ``hashes`` (uint64) with ``weights``; 0 when there are none.

    Bit ``i`` is 1 iff ``sum(w for 1-bits) - sum(w for 0-bits) > 0``; a tie gives 0.
    """
    if hashes.shape != weights.shape:
        raise ValueError(f"{hashes.shape[0]} hashes but {weights.shape[0]} weights")
    if hashes.size == 0:
        return 0
    ones_weight = np.zeros(BITS)
    for start in range(0, hashes.size, ROWS_AT_ONCE):
        octets = hashes[start:start + ROWS_AT_ONCE].astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
        ones_weight += weights[start:start + ROWS_AT_ONCE] @ np.unpackbits(octets, axis=1, bitorder="little")
    bits = (2.0 * ones_weight > weights.sum()).astype(np.uint8)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def hamming(a: int, b: int) -> int:
    """Number of bits in which two fingerprints differ."""
    return (a ^ b).bit_count()


def to_hex(fingerprint: int) -> str:
    """The record form: 16 lowercase hex digits, most significant first (``"00000000000000ff"``)."""
    if not 0 <= fingerprint < 1 << BITS:
        raise ValueError(f"not a 64-bit fingerprint: {fingerprint}")
    return f"{fingerprint:016x}"


def from_hex(text: str) -> int:
    """Inverse of :func:`to_hex`; only its exact form is accepted (16 lowercase hex digits)."""
    if len(text) != HEX_DIGITS or not _HEX.issuperset(text):
        raise ValueError(f"not 16 lowercase hex digits: {text!r}")
    return int(text, 16)
