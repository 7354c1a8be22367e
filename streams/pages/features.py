"""Weighted text features for SimHash: Unicode word tokens, shingled, hashed to 64 bits, in numpy.

SimHash (Charikar 2002, "Similarity estimation techniques from rounding algorithms") needs a set of
features with weights; near-duplicate web pages are found by comparing shingles, runs of ``n``
consecutive tokens (Broder, Glassman, Manasse, Zweig 1997, "Syntactic clustering of the Web").

Tokens (``FEATURES_VERSION`` 2):

* Text is folded one code point at a time: NFKC then case folding, kept only when the result is a
  single code point (so full-width ``Ａ`` is ``a`` and half-width ``ｶ`` is ``カ``; ``ß`` stays).
* A *word* is a maximal run of letters, marks and numbers (Unicode general categories L, M, N;
  marks are included so Devanagari or Thai words do not break at vowel signs). Everything else
  separates words.
* Scripts written without spaces between words (Han, Hiragana, Katakana, Bopomofo, Thai, Lao,
  Khmer, Myanmar) are cut into overlapping character n-grams (``cjk_ngram_chars``, 3 by default:
  bigrams are the usual unit for Chinese and Japanese retrieval without a segmenter, but as single
  features trigrams are more specific and found copies as well on the labelled set), a run shorter
  than ``n`` being one token. Hangul is written with spaces and is tokenised as words.
* *Numbers are not features* (version 2): a token whose characters are all numbers (Unicode
  general category N: ``2009``, ``４２``, ``Ⅻ``) is left out of the SimHash features, unless every
  token of the text is one. Dates, counters, prices and ids are what changes most between copies of
  a page and between fetches of it, and each changed number moves the fingerprint like a changed
  word; leaving them out brings more person-judged copies under a shared block-table key
  (docs/near-duplicates.md has the figures).
  :func:`text_tokens` still returns every token (the sketch of :mod:`streams.pages.sketch` keeps
  numbers: they are content), with a mask of the numbers.

A token's hash is a polynomial over its code points modulo 2^64, finished with MurmurHash3's 64-bit
finaliser (Appleby, ``fmix64``); a shingle's hash combines its tokens' hashes the same way. All of
it runs as whole-array numpy operations, because Python work per token would dominate: a
``re.findall(r"\\w+")`` alone costs more than this module and the SimHash together, before any
hash is taken (docs/near-duplicates.md, "Hashing in numpy", has the timings).
The polynomial is not collision resistant against a chosen input; an adversary who makes two
tokens collide merges two features of one page, which moves its SimHash by little.

Weights: the shingle's term frequency (``weighting="tf"``, the default). On the labelled set of
testing/neardup_set.py it found more near-duplicates than ``1 + floor(log2(tf))`` (``"log_tf"``,
computed exactly with ``frexp``) or plain presence (``"binary"``), with no false positives for any of
them (docs/near-duplicates.md has the figures). Weights are integers held as float64, so the
SimHash sums are exact in any summation order.

Changing anything here changes every fingerprint: bump ``FEATURES_VERSION`` and treat stored
fingerprints as another space. Character classes come from the running Python's Unicode database
(:data:`unicodedata.unidata_version`); characters a newer version assigns can tokenise differently.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt

FEATURES_VERSION = 2
DEFAULT_SHINGLE_WORDS = 2
DEFAULT_CJK_NGRAM_CHARS = 3

Weighting = Literal["log_tf", "tf", "binary"]
U64Array: TypeAlias = npt.NDArray[np.uint64]
F64Array: TypeAlias = npt.NDArray[np.float64]
IntArray: TypeAlias = npt.NDArray[np.intp]
BoolArray: TypeAlias = npt.NDArray[np.bool_]

SEPARATOR, WORD, GRAM = 0, 1, 2
# Scripts written without spaces between words (Unicode block ranges, inclusive).
NO_SPACE_RANGES = (
    (0x0E00, 0x0EFF),    # Thai, Lao
    (0x1000, 0x109F),    # Myanmar
    (0x1780, 0x17FF),    # Khmer
    (0x3005, 0x3007),    # ideographic iteration mark, closing mark, number zero
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x3100, 0x312F),    # Bopomofo
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),    # CJK Unified Ideographs
    (0xF900, 0xFAFF),    # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF),  # Supplementary and Tertiary Ideographic Planes
)
_BMP = 0x10000
_CHAR_MULTIPLIER = np.uint64(0x100000001B3)      # odd (the 64-bit FNV prime)
_SHINGLE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd (2^64 / golden ratio)
_LENGTH_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_MAX_POWER = 1023  # characters past the 1024th of a token share one multiplier (junk tokens only)
_POWERS = np.array([pow(int(_CHAR_MULTIPLIER), i, 1 << 64) for i in range(_MAX_POWER + 1)], dtype=np.uint64)
_EMPTY_U64: U64Array = np.zeros(0, dtype=np.uint64)
_EMPTY_BOOL: BoolArray = np.zeros(0, dtype=np.bool_)
PIECE_CHARS = 1 << 20  # token_hashes works on about this many characters at a time
_CACHED_POWERS = 1 << 17  # characters of a piece whose power tables are kept (2 MB)


def feature_hashes(text: str, *, shingle_words: int = DEFAULT_SHINGLE_WORDS,
                   cjk_ngram_chars: int = DEFAULT_CJK_NGRAM_CHARS,
                   weighting: Weighting = "tf") -> tuple[U64Array, F64Array]:
    """The distinct shingle hashes of ``text`` (sorted) and their weights, ready for SimHash.

    A text with fewer tokens than ``shingle_words`` is one shingle of all its tokens; a text with
    no token has no features (both arrays empty).
    """
    if cjk_ngram_chars < 1:
        raise ValueError("shingle_words and cjk_ngram_chars must be >= 1")
    tokens, numbers = text_tokens(text, cjk_ngram_chars=cjk_ngram_chars)
    return tokens_features(tokens, numbers, shingle_words=shingle_words, weighting=weighting)


def tokens_features(tokens: U64Array, numbers: BoolArray, *, shingle_words: int = DEFAULT_SHINGLE_WORDS,
                    weighting: Weighting = "tf") -> tuple[U64Array, F64Array]:
    """:func:`feature_hashes` from :func:`text_tokens`' output (so a caller that also sketches the
    tokens hashes the text once): numbers left out unless all tokens are numbers, then shingled."""
    if shingle_words < 1:
        raise ValueError("shingle_words and cjk_ngram_chars must be >= 1")
    if numbers.any() and not numbers.all():
        tokens = tokens[~numbers]
    features, counts = np.unique(shingle_hashes(tokens, shingle_words), return_counts=True)
    return features, _weights(counts, weighting)


def token_hashes(text: str, *, cjk_ngram_chars: int = DEFAULT_CJK_NGRAM_CHARS,
                 piece_chars: int = PIECE_CHARS) -> U64Array:
    """The 64-bit hash of every token of ``text``, in text order (numbers included)."""
    return text_tokens(text, cjk_ngram_chars=cjk_ngram_chars, piece_chars=piece_chars)[0]


def text_tokens(text: str, *, cjk_ngram_chars: int = DEFAULT_CJK_NGRAM_CHARS,
                piece_chars: int = PIECE_CHARS) -> tuple[U64Array, BoolArray]:
    """The 64-bit hash of every token of ``text`` in text order, and which tokens are numbers.

    A number is a token whose characters (folded) are all of Unicode general category N. The arrays
    per character take tens of bytes a character, so a long text would take hundreds of megabytes
    at once (docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis, measured"); it is
    hashed in pieces of about ``piece_chars``, each cut just before a separator: no token crosses a
    cut, so the hashes are the same as in one piece (tests/stages/test_hostile_unit.py).
    """
    if piece_chars < 1:
        raise ValueError("piece_chars must be >= 1")
    if len(text) <= piece_chars:
        return _piece_hashes(text, cjk_ngram_chars)
    pieces, start = [], 0
    while start < len(text):
        end = _next_separator(text, start + piece_chars)
        pieces.append(_piece_hashes(text[start:end], cjk_ngram_chars))
        start = end
    hashes = np.concatenate([piece_hashes for piece_hashes, _ in pieces])
    return hashes, np.concatenate([numbers for _, numbers in pieces])


def _next_separator(text: str, position: int) -> int:
    """The first index from ``position`` whose character separates tokens, else ``len(text)``."""
    window = 4096
    while position < len(text):
        _, kinds = _classify(text[position:position + window])
        found = np.flatnonzero(kinds == SEPARATOR)
        if found.size:
            return position + int(found[0])
        position, window = position + window, window * 2
    return len(text)


def _piece_hashes(text: str, cjk_ngram_chars: int) -> tuple[U64Array, BoolArray]:
    starts, ends, codes, _ = _spans(text, cjk_ngram_chars)
    if starts.size == 0:
        return _EMPTY_U64, _EMPTY_BOOL
    hashes = _span_hashes(codes, starts, ends)
    numbers = np.concatenate((np.zeros(1, dtype=np.intp), np.cumsum(_number_chars(codes), dtype=np.intp)))
    return hashes, numbers[ends] - numbers[starts] == ends - starts  # every character a number


def token_spans(text: str, *, cjk_ngram_chars: int = DEFAULT_CJK_NGRAM_CHARS) -> list[tuple[int, int]]:
    """Each token as ``(start, end)`` code point offsets into ``text`` (for tests and debugging)."""
    starts, ends, _, _ = _spans(text, cjk_ngram_chars)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def shingle_hashes(tokens: U64Array, shingle_words: int) -> U64Array:
    """The hash of every run of ``shingle_words`` consecutive tokens (one run if there are fewer)."""
    if tokens.size == 0:
        return _EMPTY_U64
    width = min(shingle_words, int(tokens.size))
    count = tokens.size - width + 1
    combined = tokens[:count].copy()
    for offset in range(1, width):
        combined = combined * _SHINGLE_MULTIPLIER + tokens[offset:offset + count]
    return fmix64(combined)


def fmix64(values: U64Array) -> U64Array:
    """MurmurHash3's 64-bit finaliser (Appleby): every input bit affects every output bit."""
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xFF51AFD7ED558CCD)
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xC4CEB9FE1A85EC53)
    return values ^ (values >> np.uint64(33))


def fold_and_kind(char: str) -> tuple[int, int]:
    """The folded code point of one character and its kind (``SEPARATOR``, ``WORD`` or ``GRAM``)."""
    folded = unicodedata.normalize("NFKC", char).casefold()
    if len(folded) != 1:
        lowered = char.lower()
        folded = lowered if len(lowered) == 1 else char
    code = ord(folded)
    if unicodedata.category(folded)[0] not in "LMN":
        return code, SEPARATOR
    if any(low <= code <= high for low, high in NO_SPACE_RANGES):
        return code, GRAM
    return code, WORD


# --- internals ------------------------------------------------------------------------------------


@functools.cache
def _bmp_tables() -> tuple[U64Array, npt.NDArray[np.uint8]]:
    """Folded code point and kind of every Basic Multilingual Plane code point, as
    :func:`fold_and_kind` gives them (built once per process; a test holds every entry to it).

    Why not call :func:`fold_and_kind` 65,536 times: that took a tenth of a second, paid by every
    process that analyses pages, about what it takes to analyse 40 of them. NFKC and case folding
    run once over all the code points joined by NUL, which splits them back apart: NUL is a starter
    that composes with nothing and that no other character's NFKC or case folding contains, so no
    normalisation crosses it (UAX #15), and case folding maps each character on its own. Only the
    characters whose folding is not one code point take the slow path."""
    chars = list(map(chr, range(1, _BMP)))
    folded_texts = unicodedata.normalize("NFKC", "\x00".join(chars)).casefold().split("\x00")
    codes = [0, *(ord(folded) if len(folded) == 1 else fold_and_kind(char)[0]
                  for char, folded in zip(chars, folded_texts, strict=True))]
    folded_codes = np.array(codes, dtype=np.uint64)
    categories = _bmp_categories()
    kinds = np.full(_BMP, SEPARATOR, dtype=np.uint8)
    for code in np.flatnonzero(folded_codes >= _BMP).tolist():  # none in Unicode 15; kept exact
        kinds[code] = fold_and_kind(chr(code))[1]
    bmp = folded_codes < _BMP
    lmn = np.zeros(_BMP, dtype=np.bool_)
    lmn[bmp] = np.isin(categories[folded_codes[bmp]], np.frombuffer(b"LMN", dtype=np.uint8))
    in_ranges = np.zeros(_BMP, dtype=np.bool_)
    for low, high in NO_SPACE_RANGES:
        in_ranges |= (folded_codes >= low) & (folded_codes <= high)
    kinds[bmp & lmn] = WORD
    kinds[bmp & lmn & in_ranges] = GRAM
    return folded_codes, kinds


@functools.cache
def _bmp_categories() -> npt.NDArray[np.uint8]:
    """The first letter of the general category of every Basic Multilingual Plane code point."""
    initials = "".join(unicodedata.category(chr(code))[0] for code in range(_BMP))
    return np.frombuffer(initials.encode("ascii"), dtype=np.uint8)


@functools.lru_cache(maxsize=4096)
def _astral(code: int) -> tuple[int, int]:
    return fold_and_kind(chr(code))


@functools.cache
def _bmp_numbers() -> BoolArray:
    """Whether each Basic Multilingual Plane code point is a number (category N), built once."""
    numbers: BoolArray = _bmp_categories() == ord("N")
    return numbers


def _number_chars(codes: U64Array) -> BoolArray:
    """Whether each folded code point of :func:`_classify` is a number (Unicode general category N)."""
    table = _bmp_numbers()
    astral = codes >= _BMP
    if not astral.any():
        return table[codes]
    numbers = table[np.where(astral, 0, codes)]
    for index in np.flatnonzero(astral).tolist():
        numbers[index] = unicodedata.category(chr(int(codes[index])))[0] == "N"
    return numbers


def _classify(text: str) -> tuple[U64Array, npt.NDArray[np.uint8]]:
    """Folded code points (as uint64, ready for hashing) and kinds of every character of ``text``."""
    raw = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    folded_table, kind_table = _bmp_tables()
    if raw.size == 0 or int(raw.max()) < _BMP:
        return folded_table[raw], kind_table[raw]
    astral = raw >= _BMP
    clipped = np.where(astral, 0, raw)
    codes, kinds = folded_table[clipped], kind_table[clipped]
    for index in np.flatnonzero(astral).tolist():
        codes[index], kinds[index] = _astral(int(raw[index]))
    return codes, kinds


def _runs(mask: npt.NDArray[np.bool_]) -> tuple[IntArray, IntArray]:
    """Start and end (exclusive) of each maximal run of True in ``mask``: the places where the mask,
    padded with False, changes, which alternate between starts and ends."""
    padded = np.zeros(mask.size + 2, dtype=np.bool_)
    padded[1:-1] = mask
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return edges[0::2], edges[1::2]


def _spans(text: str, gram_chars: int) -> tuple[IntArray, IntArray, U64Array, npt.NDArray[np.uint8]]:
    """Token starts and ends in text order, with the folded codes and kinds they index."""
    codes, kinds = _classify(text)
    word_starts, word_ends = _runs(kinds == WORD)
    if not (kinds == GRAM).any():
        return word_starts, word_ends, codes, kinds
    gram_starts, gram_ends = _gram_spans(*_runs(kinds == GRAM), gram_chars)
    starts = np.concatenate((word_starts, gram_starts))
    order = np.argsort(starts, kind="stable")
    return starts[order], np.concatenate((word_ends, gram_ends))[order], codes, kinds


def _gram_spans(run_starts: IntArray, run_ends: IntArray, gram_chars: int) -> tuple[IntArray, IntArray]:
    """Overlapping ``gram_chars``-grams of each run; a shorter run is one span of its own."""
    lengths = run_ends - run_starts
    per_run = np.maximum(lengths - gram_chars + 1, 1)
    run_of_gram = np.repeat(np.arange(run_starts.size), per_run)
    first_of_run = np.cumsum(per_run) - per_run
    starts = run_starts[run_of_gram] + (np.arange(run_of_gram.size) - first_of_run[run_of_gram])
    ends = np.minimum(starts + gram_chars, run_ends[run_of_gram])
    return starts, ends


def _span_hashes(codes: U64Array, starts: IntArray, ends: IntArray) -> U64Array:
    """:func:`_segment_hashes` of any spans, overlapping or not, from prefix sums.

    Why: the direct sum takes about eight passes over every character of every token; here one
    running sum ``P[j] = sum(code[k] * M^k, k < j)`` over the piece gives each span's sum as
    ``(P[end] - P[start]) * M^-start``, all modulo 2^64, where the odd multiplier ``M`` has an
    inverse. The same numbers, so the same hashes (a property test holds them equal); a span longer
    than ``_MAX_POWER + 1`` characters, whose powers the direct sum caps, takes the direct sum."""
    lengths = ends - starts
    powers, inverses = _power_tables(codes.size)
    prefix = np.zeros(codes.size + 1, dtype=np.uint64)
    np.cumsum(codes * powers[:codes.size], out=prefix[1:])
    sums = (prefix[ends] - prefix[starts]) * inverses[starts]
    hashes = fmix64(sums + lengths.astype(np.uint64) * _LENGTH_MIX)
    if lengths.size and int(lengths.max()) > _MAX_POWER + 1:
        long = lengths > _MAX_POWER + 1
        hashes[long] = _segment_hashes(codes, starts[long], ends[long])
    return hashes


def _power_tables(size: int) -> tuple[U64Array, U64Array]:
    """``M^k`` and ``M^-k`` modulo 2^64 for ``k`` below ``size`` at least; the tables of pieces up to
    :data:`_CACHED_POWERS` characters are kept (a few megabytes), larger ones made each time."""
    if size <= _CACHED_POWERS:
        return _cached_power_tables()
    return _make_power_tables(size)


@functools.cache
def _cached_power_tables() -> tuple[U64Array, U64Array]:
    return _make_power_tables(_CACHED_POWERS)


def _make_power_tables(size: int) -> tuple[U64Array, U64Array]:
    multiplier = int(_CHAR_MULTIPLIER)
    powers = np.full(size, _CHAR_MULTIPLIER, dtype=np.uint64)
    powers[0] = 1
    inverses = np.full(size, pow(multiplier, -1, 1 << 64), dtype=np.uint64)
    inverses[0] = 1
    return np.cumprod(powers), np.cumprod(inverses)  # uint64 products wrap modulo 2^64


def _segment_hashes(codes: U64Array, starts: IntArray, ends: IntArray) -> U64Array:
    """``fmix64(sum(code[s+i] * M^i) + length * L)`` for disjoint spans, by one ``reduceat``."""
    if starts.size == 0:
        return _EMPTY_U64
    lengths = ends - starts
    firsts = np.cumsum(lengths) - lengths  # where each span begins in the flattened arrays
    offsets = np.arange(int(lengths.sum())) - np.repeat(firsts, lengths)
    terms = codes[np.repeat(starts, lengths) + offsets] * _POWERS[np.minimum(offsets, _MAX_POWER)]
    sums = np.add.reduceat(terms, firsts)
    return fmix64(sums + lengths.astype(np.uint64) * _LENGTH_MIX)


def _weights(counts: npt.NDArray[np.intp], weighting: Weighting) -> F64Array:
    if weighting == "tf":
        return counts.astype(np.float64)
    if weighting == "binary":
        return np.ones(counts.size, dtype=np.float64)
    if weighting == "log_tf":
        return np.frexp(counts.astype(np.float64))[1].astype(np.float64)  # 1 + floor(log2(tf)), exact
    raise ValueError(f"unknown weighting {weighting!r}")
