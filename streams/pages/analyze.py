"""One fetched-page record in, its digests and SimHash out: everything the page stage computes offline.

:func:`analyze_page` reads a validated ``fetched_page`` record (as :func:`streams.records.decode`
returns it: header names lower-cased, repeated fields joined), decides whether the page is one to
compare at all, decodes the body (:mod:`streams.pages.decode`), extracts its main text
(:mod:`streams.pages.extract`), digests it, and fingerprints it (:mod:`streams.pages.features`,
:mod:`streams.pages.simhash`). It imports neither Kafka nor RocksDB.

Pages not compared, with their :class:`Skipped` reason:

* ``head_request``: ``method`` is ``HEAD``; there is no body to compare.
* ``no_response``: ``status`` is null (the fetcher received no response).
* ``status:<code>``: any status but 2xx, and 206 (a partial body is not the page). Error pages
  (404, 5xx) are mostly a site's one template and would all match each other; 3xx and 304 carry
  no page (the revisit stage reads 304s). An absent ``status`` is read as 200.
* whatever :func:`streams.pages.decode.decode_page` skips (``empty_body``, ``binary_body``,
  ``content_type:<type>``; an absent body is an empty one).
* ``no_text``: no word in the page's main text, nor in its full text (the extractor falls back to
  it), so nothing to fingerprint; all such pages would otherwise share one SimHash.

A ``body_base64`` that is not valid base64 raises :class:`streams.errors.RecordRejected`
(``schema``, from :func:`streams.records.body_bytes`): the record is broken, not the page, and
becomes a dead letter.

Digests are BLAKE2b with 16-byte output (RFC 7693), not 128-bit MurmurHash3 as for URLs: the stage
takes an equal text digest as an exact copy without comparing texts, and MurmurHash3 admits
seed-independent multicollisions (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012,
and their hash-flooding attacks), so one crafted page could pass for another. BLAKE2b's cost is
small beside extraction's (docs/decisions/0002-compiled-hot-path.md, "Page parsing and analysis,
measured").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from streams import records
from streams.errors import ConfigError
from streams.pages.blocks import BlockDesign, block_design
from streams.pages.decode import Skipped, decode_page
from streams.pages.extract import extract_text
from streams.pages.features import Weighting, text_tokens, tokens_features
from streams.pages.simhash import BITS, from_hex, simhash64, to_hex
from streams.pages.sketch import Sketch, sketch_tokens

DIGEST_BYTES = 16


@dataclass(frozen=True)
class PageSettings:
    """How pages are fingerprinted and compared (the ``[content_seen]`` settings of the stage).

    Every field changes the fingerprints or the block tables: stored state is only valid for the
    values it was built with. Defaults were measured on the labelled set of testing/neardup_set.py
    (docs/near-duplicates.md gives the alternatives' figures).

    * ``hamming_threshold`` (3): pages whose SimHashes differ in at most this many of 64 bits are
      near-duplicates (Manku, Jain and Das Sarma 2007 use 3 for 64 bits). The block tables are
      built for this distance, so every stored page within it shares a table key with the page and
      is always found (pigeonhole, :mod:`streams.pages.blocks`).
    * ``expected_pages`` (10,000,000): pages stored over all partitions together; sizes the block
      design (:func:`streams.pages.blocks.choose_blocks`: 10 tables for 10^7 at 3 bits).
    * ``shingle_words`` (1) and ``weighting`` (``log_tf``): the SimHash features are single words
      weighted 1 + log2 of their count. On the labelled set at k = 3 they keep pages of different
      clusters apart with no false positive; 2-word shingles with plain term frequency keep
      unrelated pages further apart but miss more small edits, and single words with plain term
      frequency let unrelated pages come within a few bits (docs/near-duplicates.md, "Why these
      defaults").
    * ``cjk_ngram_chars`` (3): characters per token in scripts written without spaces (Chinese,
      Japanese, Thai...): overlapping trigrams, more specific than bigrams as single-token features
      and finding CJK copies nearly as well as the others on the labelled set.
    * ``min_main_chars`` (200): a main text shorter than this is replaced by the page's full text.
    """

    hamming_threshold: int = 3
    expected_pages: int = 10_000_000
    shingle_words: int = 1
    weighting: Weighting = "log_tf"
    cjk_ngram_chars: int = 3
    min_main_chars: int = 200

    def __post_init__(self) -> None:
        checks = {
            "hamming_threshold": 0 <= self.hamming_threshold < BITS,
            "weighting": self.weighting in ("tf", "log_tf", "binary"),
            "expected_pages": self.expected_pages >= 1,
            "shingle_words": self.shingle_words >= 1,
            "cjk_ngram_chars": self.cjk_ngram_chars >= 1,
            "min_main_chars": self.min_main_chars >= 0,
        }
        for name, valid in checks.items():
            if not valid:
                raise ConfigError(f"page setting {name} out of range: {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True)
class PageAnalysis:
    """What the stage keeps of a page.

    ``text_digest``: BLAKE2b-128 of the normalised main text (UTF-8), equal for exact copies of
    the content whatever their markup, host or encoding; ``simhash``: 64-bit SimHash of the main
    text; ``text_chars``: its length in code points; ``media``, ``charset``, ``charset_source``: as
    :class:`streams.pages.decode.DecodedPage` says; ``sketch``: the minwise sketch of the main
    text's word pairs that decides near-duplicates among the SimHash's candidates
    (:mod:`streams.pages.sketch`), None when not asked for. The raw body's digest is the revisit stage's
    (:func:`digest` of :func:`streams.records.raw_body`), not computed here: the page stage never
    reads it, and it cost a twentieth of a page's analysis. ``payload_sha1``: the SHA-1 of the
    payload (a WARC payload digest), when an analysis process computed it for the page stage's
    ``payload_digests`` beside the rest; None otherwise.
    """

    text_digest: bytes
    simhash: int
    text_chars: int
    media: str
    charset: str
    charset_source: str
    sketch: Sketch | None = None
    payload_sha1: bytes | None = None


def analyze_page(record: Mapping[str, Any], settings: PageSettings,
                 body: bytes | str | None = None, *, sketch: bool = True) -> PageAnalysis | Skipped:
    """Digests, SimHash and sketch of a fetched page, or why it is not compared (see the module
    docstring).

    ``body`` is the record's body when the caller already read it (:func:`streams.records.body_bytes`),
    so a large base64 body is decoded once. ``sketch=False`` leaves the sketch out (a caller that
    only compares SimHashes, such as the revisit stage, saves its cost).
    """
    skipped = skip_reason(record)
    if skipped is not None:
        return Skipped(skipped)
    body = records.body_bytes(record) if body is None else body
    decoded = decode_page(body, record.get("content_type"), record.get("headers") or {})
    if isinstance(decoded, Skipped):
        return decoded
    text = extract_text(decoded, min_main_chars=settings.min_main_chars, full_text=False).main_text
    tokens, numbers = text_tokens(text, cjk_ngram_chars=settings.cjk_ngram_chars)
    hashes, weights = tokens_features(tokens, numbers, shingle_words=settings.shingle_words,
                                      weighting=settings.weighting)
    if hashes.size == 0:
        return Skipped("no_text")
    return PageAnalysis(text_digest=digest(text.encode("utf-8")), simhash=simhash64(hashes, weights),
                        text_chars=len(text), media=decoded.media, charset=decoded.charset,
                        charset_source=decoded.charset_source,
                        sketch=sketch_tokens(tokens) if sketch else None)


def digest(data: bytes) -> bytes:
    """BLAKE2b with a 16-byte digest (RFC 7693)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def design_for(settings: PageSettings) -> BlockDesign:
    """The block design for ``hamming_threshold`` and ``expected_pages``, computed once per pair."""
    return _design(settings.hamming_threshold, settings.expected_pages)


@functools.lru_cache(maxsize=16)
def _design(hamming_threshold: int, expected_pages: int) -> BlockDesign:
    return block_design(hamming_threshold, expected_pages)


def skip_reason(record: Mapping[str, Any]) -> str | None:
    """Why a record carries no page to compare (the module docstring's first three reasons), or None."""
    if record.get("method", "GET") == "HEAD":
        return "head_request"
    status = record.get("status", 200)
    if status is None:
        return "no_response"
    if not 200 <= status < 300 or status == 206:
        return f"status:{status}"
    return None


# -- the analysis in a child process (streams.runtime.parallel) -------------------------------------

def analysis_to_json(found: PageAnalysis | Skipped) -> bytes:
    """What a child sends back: the analysis, or why the page is not compared."""
    if isinstance(found, Skipped):
        return orjson.dumps({"skipped": found.reason})
    return orjson.dumps({**dataclasses.asdict(found), "text_digest": found.text_digest.hex(),
                         "simhash": to_hex(found.simhash),
                         "sketch": None if found.sketch is None else found.sketch.encode().hex(),
                         "payload_sha1": None if found.payload_sha1 is None else found.payload_sha1.hex()})


def analysis_from_json(raw: bytes) -> PageAnalysis | Skipped | str:
    """:func:`analysis_to_json` read back; a child's failure (``{"error"}``) as its text."""
    loaded = orjson.loads(raw)
    if "error" in loaded:
        error: str = loaded["error"]
        return error
    if "skipped" in loaded:
        return Skipped(loaded["skipped"])
    sketch, payload_sha1 = loaded.get("sketch"), loaded.get("payload_sha1")
    return PageAnalysis(**{**loaded, "text_digest": bytes.fromhex(loaded["text_digest"]),
                           "simhash": from_hex(loaded["simhash"]),
                           "sketch": None if sketch is None else Sketch.decode(bytes.fromhex(sketch)),
                           "payload_sha1": None if payload_sha1 is None else bytes.fromhex(payload_sha1)})
