"""Records of the shared topics: decode and validate input, encode output, build dead letters.

Every topic record is one JSON object (RFC 8259) whose shape is fixed by a JSON Schema (draft-07) file
in ``schemas/``, named after :class:`RecordKind` (the package carries them as ``streams/schemas``,
read with importlib.resources, so an installed package needs no checkout). Those files are the
contract with the crawler's other tools, so this module reads them rather than restating them: the
schemas are compiled once, lazily, with fastjsonschema (which generates Python code from *our*
schema files only; record data is only ever parsed by orjson, never evaluated).

A bad input record is not an error of the worker: :func:`decode` turns every problem into
:class:`~streams.errors.RecordRejected` with a short reason code, and the runtime writes a
:func:`dead_letter` and goes on. The reason codes are ``empty``, ``too_large``, ``invalid_utf8``,
``invalid_json`` (also for nesting deeper than :data:`MAX_JSON_DEPTH`), ``not_an_object``,
``unsupported_schema_version`` and ``schema``.

Timestamps are RFC 3339 section 5.6 ``date-time`` strings, checked for a real calendar date too;
:func:`rfc3339` writes them in UTC with ``Z``. Fields with ``contentEncoding: base64`` are checked by
decoding them (RFC 4648 section 4), which fastjsonschema does after the schema's alphabet pattern.
"""

from __future__ import annotations

import base64
import enum
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Final

import fastjsonschema
import orjson
import pybase64

from streams.errors import ConfigError, RecordRejected
from streams.plain import plain_checker

SCHEMA_VERSION: Final = 1
SCHEMA_DIR: Final[Traversable] = resources.files("streams") / "schemas"
DEFAULT_MAX_RECORD_BYTES: Final = 16 * 1024 * 1024
DEFAULT_DEAD_LETTER_VALUE_BYTES: Final = 512 * 1024
DEAD_LETTER_KEY_BYTES: Final = 16 * 1024
MAX_DETAIL_CHARS: Final = 2000
# orjson reads up to 1,024 levels of nesting but writes only 254 (its recursion limit), and stages
# write input fields back out (the URL stage passes a frontier record's fields on): a record nested
# deeper could be read but never passed on. No record format here nests more than three levels.
MAX_JSON_DEPTH: Final = 128

_UTF8_BOM: Final = b"\xef\xbb\xbf"
# RFC 3339 section 5.6, ASCII digits only (Python's \d would also accept other scripts' digits).
_RFC3339: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
_JSON_TYPE_NAMES: Final = {list: "an array", str: "a string", int: "a number", float: "a number",
                           bool: "a boolean", type(None): "null"}


class RecordKind(enum.Enum):
    """The record format of each shared topic; the value is the stem of its schema file."""

    FRONTIER_URL = "frontier_url"
    NEW_URL = "new_url"
    FETCHED_PAGE = "fetched_page"
    UNIQUE_PAGE = "unique_page"
    PAGE_VERDICT = "page_verdict"
    REVISIT_UPDATE = "revisit_update"
    DEAD_LETTER = "dead_letter"

    @property
    def schema_path(self) -> Traversable:
        """The JSON Schema file describing this kind of record."""
        return SCHEMA_DIR / f"{self.value}.schema.json"


# --- timestamps ------------------------------------------------------------------------------------


def rfc3339(dt: datetime) -> str:
    """Format ``dt`` as an RFC 3339 date-time in UTC with a ``Z`` suffix and milliseconds.

    The width is fixed (``2024-05-01T12:00:00.000Z``) so that the strings sort chronologically, and
    milliseconds match Kafka's record timestamps. A naive ``dt`` is taken to be UTC already.
    """
    utc = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 section 5.6 ``date-time`` into an aware datetime.

    Stricter than :meth:`datetime.fromisoformat`, which accepts many ISO 8601 forms RFC 3339 excludes.
    A leap second (``:60``, section 5.7) becomes the first instant of the next minute, and the
    "unknown local offset" ``-00:00`` (section 4.3) is read as UTC. Raises :class:`RecordRejected`
    (reason ``schema``) on anything else.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise RecordRejected("schema", f"not an RFC 3339 date-time: {text[:64]!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    micro = int((match.group(7) or "0")[:6].ljust(6, "0"))
    try:
        tz = UTC if match.group(8) else _offset(match.group(9), match.group(10), match.group(11))
        parsed = datetime(year, month, day, hour, minute, min(second, 59), micro, tzinfo=tz)
        return parsed + timedelta(seconds=1) if second == 60 else parsed
    except (ValueError, OverflowError) as error:
        raise RecordRejected("schema", f"not an RFC 3339 date-time: {text[:64]!r} ({error})") from error


def _offset(sign: str, hours: str, minutes: str) -> timezone:
    delta = timedelta(hours=int(hours), minutes=int(minutes))
    return timezone(-delta if sign == "-" else delta)


def _is_rfc3339(text: str) -> bool:
    """The ``date-time`` format check given to fastjsonschema: RFC 3339 and a real calendar date."""
    try:
        parse_rfc3339(text)
    except RecordRejected:
        return False
    return True


# --- schemas ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Codec:
    """What decoding one kind needs, all derived from its schema file once."""

    validate: Callable[[Any], Any]
    plainly_valid: Callable[[dict[str, Any]], bool]  # a shortcut past validate (streams/plain.py)
    integer_fields: tuple[str, ...]
    has_headers: bool


def load_schema(kind: RecordKind) -> dict[str, Any]:
    """Read the JSON Schema of ``kind`` from the package's ``schemas`` (a fresh copy on every call)."""
    try:
        loaded = orjson.loads(kind.schema_path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise ConfigError(f"schema {kind.schema_path} unreadable: {error}") from error
    if not isinstance(loaded, dict):
        raise ConfigError(f"schema {kind.schema_path} is not a JSON object")
    return loaded


@functools.cache
def _codec(kind: RecordKind) -> _Codec:
    """Compile the schema of ``kind`` on first use; later calls are a cache hit.

    ``date-time`` is checked by :func:`parse_rfc3339` (fastjsonschema's own regex accepts ``+0200``,
    which RFC 3339 does not). ``use_default=False`` keeps validation from writing into the record.
    """
    schema = load_schema(kind)
    try:
        validate = fastjsonschema.compile(_without_bulk_checks(schema), formats={"date-time": _is_rfc3339},
                                          use_default=False)
    except fastjsonschema.JsonSchemaDefinitionException as error:
        raise ConfigError(f"schema {kind.schema_path} invalid: {error}") from error
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    return _Codec(
        validate=validate,
        plainly_valid=plain_checker(schema),
        integer_fields=tuple(name for name, prop in properties.items() if _allows(prop, "integer")),
        has_headers="headers" in properties,
    )


def _without_bulk_checks(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema minus the base64 checks of body fields, which :func:`body_bytes` makes instead.

    A page body is often hundreds of kilobytes: fastjsonschema would run the pattern over it and
    decode it once to validate, and the stage would decode it again (about 1 ms per 250 kB body).
    The schema files keep both keywords, as the documentation of the format.
    """
    properties = {name: {key: value for key, value in prop.items()
                         if not ("contentEncoding" in prop and key in ("pattern", "contentEncoding"))}
                  for name, prop in schema.get("properties", {}).items()}
    return {**schema, "properties": properties}


def raw_body(body: bytes | str) -> bytes:
    """The bytes of a body as :func:`body_bytes` returns it (a ``body`` given as text: its UTF-8)."""
    return body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body


def body_bytes(record: Mapping[str, Any]) -> bytes | str:
    """A page record's body: the bytes of ``body_base64``, else the ``body`` text.

    Decoded as the standard library's ``base64.b64decode(..., validate=True)`` does (the alphabet
    only, padding as RFC 4648), but by pybase64 (SIMD: 0.007 against 0.31 ms for a 127 KB body
    here); the few texts pybase64 refuses and the standard library takes (excess ``=`` padding)
    are decoded by the latter. Raises :class:`RecordRejected` (reason ``schema``, as the schema's
    own check would) for bad base64.
    """
    encoded = record.get("body_base64")
    if encoded is None:
        text: str = record.get("body", "")
        return text
    try:
        return pybase64.b64decode(encoded, validate=True)
    except ValueError:  # binascii.Error is a ValueError
        pass
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError as error:
        raise RecordRejected("schema", f"data.body_base64 must be encoded by base64: {error}") from error


def _allows(prop: Mapping[str, Any], json_type: str) -> bool:
    declared = prop.get("type")
    return declared == json_type or (isinstance(declared, list) and json_type in declared)


# --- decode ----------------------------------------------------------------------------------------


def decode(kind: RecordKind, raw: bytes | None, *,
           max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> dict[str, Any]:
    """Parse and validate one record value of ``kind``; raise :class:`RecordRejected` if it is bad.

    Beyond the schema, the result is normalised so stages need not care how a producer wrote it:
    ``schema_version`` defaults to 1; integral numbers written as ``2.0`` (an integer for JSON Schema
    draft-06 and later) become ``int``; and for pages ``headers`` (default ``{}``) get lower-case
    names with repeated fields joined by ``", "`` (RFC 9110 sections 5.1 and 5.3; this loses the
    boundaries of ``Set-Cookie``, which RFC 6265 forbids folding, and no stage here needs them).
    No other exception escapes, whatever the bytes (only a broken ``schemas/`` raises ``ConfigError``).
    """
    return _decode(_codec(kind), raw, max_record_bytes)


class Decoder:
    """:func:`decode` for one kind and limit, bound once: for a stage's per-record path, where
    looking the schema up again (hashing the enum) cost a tenth of decoding a URL record. A class
    rather than a ``functools.partial``: compiled (``setup.py``), its call is a direct one."""

    def __init__(self, kind: RecordKind, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        self._codec = _codec(kind)
        self._max_record_bytes = max_record_bytes

    def __call__(self, raw: bytes | None) -> dict[str, Any]:
        return _decode(self._codec, raw, self._max_record_bytes)


def _decode(codec: _Codec, raw: bytes | None, max_record_bytes: int) -> dict[str, Any]:
    if not raw:
        raise RecordRejected("empty", "the record has no value" if raw is None else "the value is empty")
    if len(raw) > max_record_bytes:
        raise RecordRejected("too_large", f"{len(raw)} bytes, over the limit of {max_record_bytes}")
    record = _parse_object(raw)
    if not codec.has_headers and codec.plainly_valid(record):  # no nesting, nothing to normalise
        record.setdefault("schema_version", SCHEMA_VERSION)
        return record
    if _deeper_than(record, MAX_JSON_DEPTH):
        # RFC 8259 section 9 lets a parser limit nesting; orjson's own limit is reported the same way.
        raise RecordRejected("invalid_json", f"nested deeper than {MAX_JSON_DEPTH} levels")
    _check_version(record)
    try:
        codec.validate(record)
    except fastjsonschema.JsonSchemaValueException as error:
        raise RecordRejected("schema", _clip(error.message)) from error
    _normalise(record, codec)
    return record


def _parse_object(raw: bytes) -> dict[str, Any]:
    # RFC 8259 section 8.1: a parser MAY ignore a byte order mark; producers on Windows write one.
    data = memoryview(raw)[len(_UTF8_BOM):] if raw.startswith(_UTF8_BOM) else raw
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise _json_error(raw, error) from error
    if not isinstance(value, dict):
        found = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise RecordRejected("not_an_object", f"the top-level JSON value is {found}")
    return value


def _deeper_than(record: dict[str, Any], limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (the record itself is level 1).

    Iterative, and it visits containers only, so a 10 MB string costs nothing and a deep value no
    Python recursion.
    """
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(record, 1)]
    while stack:
        container, depth = stack.pop()
        for child in container.values() if isinstance(container, dict) else container:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _json_error(raw: bytes, error: orjson.JSONDecodeError) -> RecordRejected:
    """Tell bad UTF-8 (RFC 8259 section 8.1 requires it) from bad JSON; only on the error path."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return RecordRejected("invalid_utf8", f"byte offset {bad.start}: {bad.reason}")
    return RecordRejected("invalid_json", _clip(str(error)))


def _check_version(record: Mapping[str, Any]) -> None:
    """Refuse a record from a future (or bogus) format version before its fields are judged by ours."""
    version = record.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, int | float) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        detail = f"schema_version {_clip(repr(version), 40)}; this consumer reads {SCHEMA_VERSION}"
        raise RecordRejected("unsupported_schema_version", detail)


def _normalise(record: dict[str, Any], codec: _Codec) -> None:
    record.setdefault("schema_version", SCHEMA_VERSION)
    for name in codec.integer_fields:
        if type(record.get(name)) is float:
            record[name] = int(record[name])
    if codec.has_headers:
        record["headers"] = _normalise_headers(record.get("headers") or {})


def _normalise_headers(headers: Mapping[str, str | list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.items():
        text = value if isinstance(value, str) else ", ".join(value)
        key = name.lower()
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def _clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- encode ----------------------------------------------------------------------------------------


def encode(kind: RecordKind, record: Mapping[str, Any], *, validate: bool = False) -> bytes:
    """Serialise one output record of ``kind``, with ``schema_version`` set (and written first).

    The hot path does not validate: stages build their records from validated input. ``validate``
    decodes the bytes back against the schema (tests use it) and raises :class:`RecordRejected`.
    ``datetime`` values are written with :func:`rfc3339`.
    """
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    out.update(record)
    out["schema_version"] = SCHEMA_VERSION
    data = orjson.dumps(out, default=_json_default, option=orjson.OPT_PASSTHROUGH_DATETIME)
    if validate:
        decode(kind, data, max_record_bytes=len(data))
    return data


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return rfc3339(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# --- dead letters ----------------------------------------------------------------------------------


def dead_letter(*, reason: str, detail: str, stage: str, topic: str, partition: int, offset: int,
                key: bytes | None, value: bytes | None,
                max_value_bytes: int = DEFAULT_DEAD_LETTER_VALUE_BYTES,
                now: datetime | None = None) -> bytes:
    """Encode the dead letter of one rejected input record.

    The original key and value are kept base64-encoded (RFC 4648) so any bytes survive JSON; the value
    is cut to ``max_value_bytes`` and the key to :data:`DEAD_LETTER_KEY_BYTES`, with their original
    sizes recorded, so even a 10 MB record yields a dead letter well under the broker's default
    ``message.max.bytes`` (about 1 MB). Keep ``max_value_bytes`` under about 3/4 of the dead-letter
    topic's ``max.message.bytes`` (base64 grows data by 4/3).
    """
    key_fields = _kept_bytes("key", key, DEAD_LETTER_KEY_BYTES)
    value_fields = _kept_bytes("value", value, max_value_bytes)
    letter = {
        "reason": reason,
        "detail": _clip(detail),
        "stage": stage,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        **key_fields,
        **value_fields,
        "dead_lettered_at": rfc3339(now if now is not None else datetime.now(UTC)),
    }
    return encode(RecordKind.DEAD_LETTER, letter)


def _kept_bytes(name: str, data: bytes | None, limit: int) -> dict[str, Any]:
    size = len(data) if data is not None else 0
    kept = None if data is None else base64.b64encode(data[: max(0, limit)]).decode("ascii")
    return {f"{name}_base64": kept, f"{name}_size": size, f"{name}_truncated": size > max(0, limit)}
