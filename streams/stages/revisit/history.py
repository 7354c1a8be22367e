"""What the revisit stage keeps per URL, and its compact, versioned byte encoding.

One :class:`FetchHistory` per canonical URL fingerprint: the validators and content digests of the
stored copy (what the next fetch is compared with), the current interval and change-rate estimate,
and a window of the most recent :class:`Observation` (the time since the fetch before, whether a
change was seen, and how long before the fetch the server says the page last changed). The
estimators (:mod:`streams.stages.revisit.estimators`) need exactly those three numbers per fetch; older
fetches fall out of the window so that an estimate follows a page whose rate drifts.

Encoding (format version 3, big-endian ``struct``; 77 bytes plus 9 per observation plus the
validators, digests and number buckets): a fixed header, then the ETag, Last-Modified and content
type strings (``H`` length, 0xFFFF for none), the body and text digests (``B`` length, 0xFF for
none), the observations, the wording digest (:mod:`streams.pages.changes`), the number buckets and,
when there are some, what the page has learned of them (:mod:`streams.stages.revisit.numbers`: each
bucket's counts of still and moved comparisons, two masks and whether a probe is due). ``None``
numbers are NaN (floats) or -1 (integers). The version byte comes first so that a later format can
read this one: :func:`decode_history` reads version 1 (without the wording digest) and 2 (without
the numbers, and with a wording digest that masked digits only, not month and weekday names:
``legacy_wording``), the missing parts as absent, so that
:func:`streams.stages.revisit.signals.detect_change` compares once without them; it refuses a
version it does not know instead of misreading it. Histories are written in version 3.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Final

from streams.errors import StateError

FORMAT_VERSION: Final = 3
READABLE_VERSIONS: Final = (1, 2, 3)
_HEADER: Final = struct.Struct(">BhddddqQBIIHHh")
_OBSERVATION: Final = struct.Struct(">ffB")
_TEXT_LENGTH: Final = struct.Struct(">H")
_NUMBER_MASKS: Final = struct.Struct(">IIB")
_NO_TEXT: Final = 0xFFFF
_NO_BYTES: Final = 0xFF
_COUNTER_MAX: Final = 0xFFFF
_NAN: Final = float("nan")


@dataclass(frozen=True, slots=True)
class Observation:
    """One fetch compared with the one before it.

    ``interval_s``: seconds since the previous fetch; ``changed``: whether the page changed in
    between; ``modified_age_s``: on a change, seconds from the server's Last-Modified to the fetch
    (``None`` when the server gave none, or one outside the interval).
    """

    interval_s: float
    changed: bool
    modified_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class FetchHistory:
    """Everything the stage remembers about one URL (times are seconds since the Unix epoch)."""

    first_fetch_s: float
    last_fetch_s: float
    interval_s: float
    status: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None       # media type essence, for per-type interval bounds
    content_length: int | None = None
    body_digest: bytes | None = None
    text_digest: bytes | None = None
    simhash: int | None = None
    rate_per_s: float | None = None      # change-rate estimate (Poisson, changes per second)
    fetches: int = 1
    changes: int = 0
    lm_agreements: int = 0               # Last-Modified moved exactly when the content did
    lm_disagreements: int = 0            # it moved without a change, or stayed through one
    rate_bin: int = -1                   # allocation histogram bin the page is counted in
    observations: tuple[Observation, ...] = field(default=())
    wording_digest: bytes | None = None  # the change text with numbers masked (format 2)
    number_buckets: bytes | None = None  # the change text's numbers by context (format 3)
    number_tallies: bytes | None = None  # per bucket: still and moved counts (streams.stages.revisit.numbers)
    numbers_steady: int = 0              # buckets that hold content
    numbers_churn: int = 0               # buckets that move at every fetch
    numbers_probing: bool = False        # the next fetch is the probe of a suspect
    legacy_wording: bool = False         # read from format 1 or 2: its wording digest masked fewer words

    def last_change_s(self) -> float | None:
        """When a change was last seen: the fetch that found it (None when none of the fetches the
        window keeps found one)."""
        at = self.last_fetch_s
        for observation in reversed(self.observations):
            if observation.changed:
                return at
            at -= observation.interval_s
        return None

    @property
    def last_modified_trusted(self) -> bool:
        """Whether this server's Last-Modified follows the content (not, e.g., the time of the response).

        Dynamic pages often send the time of the response as Last-Modified; its "age" then says
        nothing about change. It is trusted after two agreements and with at most one disagreement
        per ten comparisons.
        """
        return self.lm_agreements >= 2 and self.lm_disagreements * 10 <= self.lm_agreements


def encode_history(history: FetchHistory) -> bytes:
    """The bytes stored for ``history`` (format :data:`FORMAT_VERSION`)."""
    header = _HEADER.pack(
        FORMAT_VERSION, -1 if history.status is None else history.status,
        history.first_fetch_s, history.last_fetch_s, history.interval_s, _float(history.rate_per_s),
        -1 if history.content_length is None else history.content_length,
        history.simhash or 0, history.simhash is not None,
        min(history.fetches, 0xFFFFFFFF), min(history.changes, 0xFFFFFFFF),
        min(history.lm_agreements, _COUNTER_MAX), min(history.lm_disagreements, _COUNTER_MAX),
        history.rate_bin)
    parts = [header, _text(history.etag), _text(history.last_modified), _text(history.content_type),
             _bytes(history.body_digest), _bytes(history.text_digest),
             bytes([len(history.observations)])]
    parts.extend(_OBSERVATION.pack(o.interval_s, _float(o.modified_age_s), o.changed)
                 for o in history.observations)
    parts.append(_bytes(history.wording_digest))
    parts.append(_bytes(history.number_buckets))
    if history.number_buckets is not None:
        parts.append(_bytes(history.number_tallies))
        parts.append(_NUMBER_MASKS.pack(history.numbers_steady, history.numbers_churn,
                                        history.numbers_probing))
    return b"".join(parts)


def decode_history(raw: bytes) -> FetchHistory:
    """Inverse of :func:`encode_history`; raises :class:`StateError` on another version or bad bytes."""
    if not raw or raw[0] not in READABLE_VERSIONS:
        found = raw[0] if raw else "empty"
        raise StateError(f"revisit history format {found}, this worker reads "
                         f"{' and '.join(map(str, READABLE_VERSIONS))}")
    try:
        return _decode(memoryview(raw))
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise StateError(f"revisit history unreadable: {error}") from error


def _decode(view: memoryview) -> FetchHistory:
    (_, status, first_s, last_s, interval_s, rate, length, simhash, has_simhash,
     fetches, changes, agreements, disagreements, rate_bin) = _HEADER.unpack_from(view, 0)
    offset = _HEADER.size
    etag, offset = _read_text(view, offset)
    last_modified, offset = _read_text(view, offset)
    content_type, offset = _read_text(view, offset)
    body_digest, offset = _read_bytes(view, offset)
    text_digest, offset = _read_bytes(view, offset)
    count = view[offset]
    offset += 1
    observations = []
    for _ in range(count):
        interval, age, changed = _OBSERVATION.unpack_from(view, offset)
        observations.append(Observation(interval, bool(changed), _optional(age)))
        offset += _OBSERVATION.size
    wording_digest = number_buckets = number_tallies = None
    masks = (0, 0, False)
    if view[0] >= 2:
        wording_digest, offset = _read_bytes(view, offset)
    if view[0] >= 3:
        number_buckets, offset = _read_bytes(view, offset)
        if number_buckets is not None:
            number_tallies, offset = _read_bytes(view, offset)
            masks = _NUMBER_MASKS.unpack_from(view, offset)
    return FetchHistory(
        legacy_wording=view[0] < 3 and wording_digest is not None,
        first_fetch_s=first_s, last_fetch_s=last_s, interval_s=interval_s,
        status=None if status < 0 else status, etag=etag, last_modified=last_modified,
        content_type=content_type, content_length=None if length < 0 else length, body_digest=body_digest,
        text_digest=text_digest, simhash=simhash if has_simhash else None,
        rate_per_s=_optional(rate), fetches=fetches,
        changes=changes, lm_agreements=agreements, lm_disagreements=disagreements,
        rate_bin=rate_bin, observations=tuple(observations), wording_digest=wording_digest,
        number_buckets=number_buckets, number_tallies=number_tallies, numbers_steady=masks[0],
        numbers_churn=masks[1], numbers_probing=bool(masks[2]))


def _float(value: float | None) -> float:
    return _NAN if value is None else value


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else value


def _text(value: str | None) -> bytes:
    if value is None:
        return _TEXT_LENGTH.pack(_NO_TEXT)
    data = value.encode("utf-8", "surrogatepass")
    if len(data) >= _NO_TEXT:
        raise ValueError(f"a validator of {len(data)} bytes is too long to store")
    return _TEXT_LENGTH.pack(len(data)) + data


def _read_text(view: memoryview, offset: int) -> tuple[str | None, int]:
    (length,) = _TEXT_LENGTH.unpack_from(view, offset)
    offset += _TEXT_LENGTH.size
    if length == _NO_TEXT:
        return None, offset
    return bytes(view[offset: offset + length]).decode("utf-8", "surrogatepass"), offset + length


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return bytes([_NO_BYTES])
    if len(value) >= _NO_BYTES:
        raise ValueError(f"a digest of {len(value)} bytes is too long to store")
    return bytes([len(value)]) + value


def _read_bytes(view: memoryview, offset: int) -> tuple[bytes | None, int]:
    length = view[offset]
    offset += 1
    if length == _NO_BYTES:
        return None, offset
    return bytes(view[offset: offset + length]), offset + length
