"""What the URL seen-set keeps for a fingerprint (a *seen mark*), and which marks a forget selects.

A mark stands for "this URL was emitted to new-urls, at this time". Format 2 (written since URLs
can be forgotten and expire): the byte ``0xFF``, the time the URL was marked seen in milliseconds
since the Unix epoch (8 bytes, big-endian, signed), then the URL as the set hashed it
(:func:`~streams.urls.canonical.scoped`: its crawl's name, a space and the canonical URL, or the URL
alone) in UTF-8. Format 1, written before, is the scoped URL alone (or nothing, in Bloom-only mode).
``0xFF`` never begins a UTF-8 string, so the first byte tells the formats apart and a format-1 mark
is read as it is, with no time: no state is migrated. A format-1 mark has no time for expiry to
count from; the stage stamps it the first time it finds it with expiry on (:func:`stamped`).

A forget (:class:`Selection`) names URLs by their fingerprints, or by host, URL prefix and time
seen, within one crawl; the pure matching is here, the forgetting itself in
:mod:`streams.stages.url_dedup.forgetting`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from streams import records
from streams.urls import canonical

TIMED: Final = 0xFF
_HEAD: Final = struct.Struct(">Bq")  # 0xFF, seen at (ms)
MS_PER_DAY: Final = 86_400_000


def mark(scoped_url: str, seen_at_ms: int) -> bytes:
    """A format-2 mark of ``scoped_url`` seen at ``seen_at_ms``."""
    return _HEAD.pack(TIMED, seen_at_ms) + scoped_url.encode()


def seen_at_ms(value: bytes) -> int | None:
    """When the mark's URL was marked seen; None for a format-1 mark."""
    if len(value) >= _HEAD.size and value[0] == TIMED:
        return int(_HEAD.unpack_from(value)[1])
    return None


def scoped_url(value: bytes) -> str | None:
    """The scoped URL a mark keeps; None when it keeps none (Bloom-only mode) or is unreadable."""
    body = value[_HEAD.size:] if value[:1] == bytes([TIMED]) else value
    if not body:
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def stamped(value: bytes, at_ms: int) -> bytes:
    """A format-1 mark given a time (``at_ms``); a format-2 mark as it is."""
    if seen_at_ms(value) is not None:
        return value
    return _HEAD.pack(TIMED, at_ms) + value


def rfc3339_ms(at_ms: int) -> str:
    """``at_ms`` as the records write times (:func:`streams.records.rfc3339`)."""
    return records.rfc3339(datetime.fromtimestamp(at_ms / 1000, UTC))


@dataclass(frozen=True)
class Expiry:
    """Marks older than ``after_ms`` are no longer seen (``[url_dedup] forget_after_days``); 0: never."""

    after_ms: int = 0

    @classmethod
    def of_days(cls, days: float | None) -> Expiry:
        return cls(0 if not days or days <= 0 else max(1, round(days * MS_PER_DAY)))

    def expired(self, value: bytes, now_ms: int) -> bool:
        """Whether the mark ``value`` has expired at ``now_ms`` (a format-1 mark never has: it has no
        time; the stage stamps it when it meets it)."""
        if not self.after_ms:
            return False
        at = seen_at_ms(value)
        return at is not None and now_ms - at >= self.after_ms


@dataclass(frozen=True)
class Selection:
    """The marks one forget lets go, in one crawl (``crawl``, the unnamed one when empty).

    Either ``keys`` (the fingerprints of the URLs named), or any of ``host`` (the canonical URL's
    host, exactly), ``prefix`` (the canonical URL starts with it) and ``seen_before_ms`` (marked
    seen before then; a format-1 mark has no time and is not selected by it), all of which must hold.
    """

    keys: frozenset[bytes] = field(default_factory=frozenset)
    host: str | None = None
    prefix: str | None = None
    seen_before_ms: int | None = None
    crawl: str = ""

    def __post_init__(self) -> None:
        scanned = (self.host, self.prefix, self.seen_before_ms)
        if self.keys and any(each is not None for each in scanned):
            raise ValueError("a forget names URLs, or selects them by host, prefix and time: not both")
        if not self.keys and all(each is None for each in scanned):
            raise ValueError("a forget selects nothing: name URLs, a host, a prefix or a time")

    @property
    def by_keys(self) -> bool:
        return bool(self.keys)

    def matches(self, key: bytes, value: bytes) -> bool:
        """Whether the mark ``value`` of fingerprint ``key`` is selected."""
        if self.keys:
            return key in self.keys
        scoped = scoped_url(value)
        if scoped is None:
            return False
        crawl, url = canonical.unscoped(scoped)
        if crawl != self.crawl:
            return False
        if self.host is not None and canonical.host_of(url) != self.host:
            return False
        if self.prefix is not None and not url.startswith(self.prefix):
            return False
        if self.seen_before_ms is not None:
            at = seen_at_ms(value)
            return at is not None and at < self.seen_before_ms
        return True

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"crawl": self.crawl}
        if self.keys:
            found["keys"] = sorted(key.hex() for key in self.keys)
        for name in ("host", "prefix", "seen_before_ms"):
            if getattr(self, name) is not None:
                found[name] = getattr(self, name)
        return found

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> Selection:
        """Raises ``ValueError`` (or ``KeyError``, ``TypeError``) for what :meth:`to_json` cannot write."""
        keys = frozenset(bytes.fromhex(key) for key in found.get("keys", ()))
        if any(len(key) != 16 for key in keys):
            raise ValueError("a fingerprint is 16 bytes")
        before = found.get("seen_before_ms")
        return cls(keys, _text(found.get("host")), _text(found.get("prefix")),
                   None if before is None else int(before), str(found.get("crawl") or ""))


def _text(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, not {value!r}")
    return value
