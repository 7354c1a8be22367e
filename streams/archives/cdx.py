"""First captures from an archive's index: CDX (the Wayback Machine's space-separated lines) and
CDXJ (pywb's: SURT key, timestamp, a JSON object).

What a line gives is what a revisit needs to name an earlier capture: the original URL, its
14-digit timestamp (written back as the ``WARC-Date`` it stands for, W3C-DTF in UTC, as WARC 1.1
section 5.4 writes it: pywb turns ``WARC-Refers-To-Date`` back into the same timestamp to look the
capture up), and the payload digest. CDX fields are named by the file's `` CDX`` legend line
(``a`` original URL, ``b`` date, ``k`` digest, ``m`` MIME type, ``s`` status, per the Internet
Archive's CDX format); without one, the 11-field order pywb and OpenWayback write is assumed
(``N b a m s k r M S V g``), or the 9-field one (``N b a m s k r V g``). CDXJ names its fields
(``url``, ``digest``, ``mime``, ``status``).

Not captures to refer to, and so left out with their reason: revisit entries (``warc/revisit``:
their payload is elsewhere), lines without a digest or with one that is not SHA-1, and lines that
do not parse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import orjson

from streams.archives.payload import format_sha1, parse_sha1
from streams.archives.revisit import Capture

DEFAULT_LEGEND: Final = {11: "N b a m s k r M S V g", 9: "N b a m s k r V g"}


@dataclass(frozen=True, slots=True)
class Indexed:
    """A capture an index names, with its payload's SHA-1 (the key it is found by)."""

    sha1: bytes
    capture: Capture


@dataclass(frozen=True, slots=True)
class Unusable:
    """A line that names no capture to refer to, and why (counted in the import's summary)."""

    reason: str


def warc_date(timestamp: str) -> str | None:
    """A CDX timestamp (``YYYYMMDDhhmmss``, shorter ones padded as pywb pads them) as a W3C-DTF
    ``WARC-Date``; None when it is not digits."""
    digits = timestamp.strip()
    if not digits.isdigit() or not 4 <= len(digits) <= 14:
        return None
    padded = digits + "0101000000"[len(digits) - 4:] if len(digits) < 14 else digits
    y, mo, d, h, mi, s = padded[:4], padded[4:6], padded[6:8], padded[8:10], padded[10:12], padded[12:14]
    return f"{y}-{mo}-{d}T{h}:{mi}:{s}Z"


def index_lines(lines: Iterable[bytes]) -> Iterator[Indexed | Unusable]:
    """Each line of a CDX or CDXJ index as the capture it names, or why it names none."""
    legend: list[str] | None = None
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            continue
        if line.startswith(" CDX") or line.startswith("CDX "):
            legend = line.split()[1:]
            continue
        if line.startswith("!") or line.startswith("#"):
            continue
        fields = _cdxj(line) if _is_cdxj(line) else _cdx(line, legend)
        yield fields if isinstance(fields, Unusable) else _captured(*fields)


def _is_cdxj(line: str) -> bool:
    parts = line.split(" ", 2)
    return len(parts) == 3 and parts[2].startswith("{")


def _cdxj(line: str) -> tuple[str, str, str, str] | Unusable:
    """(URL, timestamp, digest, MIME type) of a CDXJ line."""
    _, timestamp, data = line.split(" ", 2)
    try:
        found = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Unusable("unparsable")
    if not isinstance(found, dict):
        return Unusable("unparsable")
    return (str(found.get("url", "")), timestamp, str(found.get("digest", "")), str(found.get("mime", "")))


def _cdx(line: str, legend: list[str] | None) -> tuple[str, str, str, str] | Unusable:
    values = line.split()
    names = legend or DEFAULT_LEGEND.get(len(values), "").split()
    if len(names) != len(values):
        return Unusable("unparsable")
    named = dict(zip(names, values, strict=True))
    return (named.get("a", ""), named.get("b", ""), named.get("k", ""), named.get("m", ""))


def _captured(url: str, timestamp: str, digest: str, mime: str) -> Indexed | Unusable:
    if mime == "warc/revisit":
        return Unusable("revisit")
    if not url or url == "-":
        return Unusable("no_url")
    date = warc_date(timestamp)
    if date is None:
        return Unusable("bad_timestamp")
    if not digest or digest == "-":
        return Unusable("no_digest")
    sha1 = parse_sha1(digest)
    if sha1 is None:
        return Unusable("not_sha1")
    return Indexed(sha1, Capture(url, date, None, format_sha1(sha1)))
