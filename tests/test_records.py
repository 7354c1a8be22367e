"""Tests of streams.records: the schema files, decode/encode, dead letters and timestamps."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import fastjsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import RecordRejected
from streams.records import (
    SCHEMA_DIR,
    SCHEMA_VERSION,
    RecordKind,
    body_bytes,
    dead_letter,
    decode,
    encode,
    load_schema,
    parse_rfc3339,
    rfc3339,
)

K = RecordKind
TS = "2024-05-01T12:00:00Z"
FP = "0123456789abcdef0123456789abcdef"
SIMHASH = "00ff00ff00ff00ff"
DIGEST = "ab" * 32

# The official draft-07 meta-schema (http://json-schema.org/draft-07/schema), tightened with
# additionalProperties: false so that a misspelt keyword in our schema files fails too.
_NON_NEG = {"type": "integer", "minimum": 0}
_SCHEMA_ARRAY = {"type": "array", "minItems": 1, "items": {"$ref": "#"}}
_STRING_ARRAY = {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": []}
_SIMPLE_TYPES = {"enum": ["array", "boolean", "integer", "null", "number", "object", "string"]}
_SCHEMA_MAP = {"type": "object", "additionalProperties": {"$ref": "#"}, "default": {}}
DRAFT_07: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "http://json-schema.org/draft-07/schema#",
    "title": "Core schema meta-schema",
    "type": ["object", "boolean"],
    "additionalProperties": False,
    "properties": {
        **{name: {"type": "string"} for name in
           ("$id", "$schema", "$ref", "$comment", "title", "description", "format", "contentMediaType",
            "contentEncoding")},
        "default": True, "const": True,
        "readOnly": {"type": "boolean", "default": False},
        "writeOnly": {"type": "boolean", "default": False},
        "examples": {"type": "array", "items": True},
        "multipleOf": {"type": "number", "exclusiveMinimum": 0},
        **{name: {"type": "number"}
           for name in ("maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum")},
        **{name: _NON_NEG for name in ("maxLength", "minLength", "maxItems", "minItems", "maxProperties",
                                      "minProperties")},
        "pattern": {"type": "string", "format": "regex"},
        **{name: {"$ref": "#"} for name in ("additionalItems", "contains", "additionalProperties",
                                            "propertyNames", "if", "then", "else", "not")},
        "items": {"anyOf": [{"$ref": "#"}, _SCHEMA_ARRAY], "default": True},
        "uniqueItems": {"type": "boolean", "default": False},
        "required": _STRING_ARRAY,
        "definitions": _SCHEMA_MAP, "properties": _SCHEMA_MAP, "patternProperties": _SCHEMA_MAP,
        "dependencies": {"type": "object",
                         "additionalProperties": {"anyOf": [{"$ref": "#"}, _STRING_ARRAY]}},
        "enum": {"type": "array", "items": True, "minItems": 1, "uniqueItems": True},
        "type": {"anyOf": [_SIMPLE_TYPES,
                           {"type": "array", "items": _SIMPLE_TYPES, "minItems": 1, "uniqueItems": True}]},
        **{name: _SCHEMA_ARRAY for name in ("allOf", "anyOf", "oneOf")},
    },
}

VALID: dict[RecordKind, list[dict[str, Any]]] = {
    K.FRONTIER_URL: [
        {"url": "http://example.com/"},
        {"url": "https://example.com/a?b=c", "source_url": "https://example.com/", "discovered_at": TS,
         "depth": 3, "schema_version": 1, "crawler_specific": {"x": [1, 2]}},
        {"url": "http://example.com/", "source_url": None, "discovered_at": None, "depth": None},
    ],
    K.NEW_URL: [
        {"schema_version": 1, "url": "http://Example.com:80/", "canonical": "http://example.com/",
         "fingerprint": FP, "host": "example.com", "source_url": None, "discovered_at": TS, "depth": 0},
    ],
    K.FETCHED_PAGE: [
        {"url": "http://example.com/"},
        {"url": "http://example.com/", "status": 200, "headers": {"Content-Type": "text/html"},
         "content_type": "text/html", "body": "<p>hi</p>", "fetched_at": "2024-05-01T12:00:00.5+02:00",
         "method": "GET"},
        {"url": "http://example.com/", "status": None, "body_base64": "aGk=", "method": "HEAD",
         "headers": {"Set-Cookie": ["a=1", "b=2"]}, "content_type": None},
    ],
    K.UNIQUE_PAGE: [
        {"schema_version": 1, "url": "http://example.com/", "status": 200, "body": "hi", "simhash": SIMHASH,
         "digest": DIGEST, "fetched_at": TS, "headers": {"etag": '"x"'}},
    ],
    K.PAGE_VERDICT: [
        {"schema_version": 1, "url": "http://e.com/", "verdict": "unique", "kind": None, "duplicate_of": None,
         "distance": None, "simhash": SIMHASH, "digest": DIGEST, "reason": None},
        {"schema_version": 1, "url": "http://e.com/2", "verdict": "duplicate", "kind": "near",
         "duplicate_of": "http://e.com/", "distance": 3, "simhash": SIMHASH, "digest": DIGEST},
        {"schema_version": 1, "url": "http://e.com/3", "verdict": "skipped", "reason": "empty_body"},
    ],
    K.REVISIT_UPDATE: [
        {"schema_version": 1, "url": "http://e.com/", "next_fetch_at": TS, "interval_s": 3600.5,
         "changed": True, "signal": "digest", "change_rate_estimate": 0.001,
         "conditional_headers": {"If-None-Match": '"abc"',
                                 "If-Modified-Since": "Wed, 01 May 2024 12:00:00 GMT"}},
        {"schema_version": 1, "url": "http://e.com/", "next_fetch_at": TS, "interval_s": 60, "changed": None,
         "change_rate_estimate": None, "conditional_headers": {}},
    ],
    K.DEAD_LETTER: [
        {"schema_version": 1, "reason": "invalid_json", "detail": "unexpected end", "stage": "url_dedup",
         "source_topic": "crawl.frontier", "source_partition": 3, "source_offset": 42, "key_base64": None,
         "value_base64": "e30=", "value_size": 2, "value_truncated": False, "dead_lettered_at": TS},
    ],
}


def _with(record_kind: RecordKind, /, **changes: Any) -> bytes:
    record = {**VALID[record_kind][0], **changes}
    return orjson.dumps({name: value for name, value in record.items() if value is not _DROP})


_DROP = object()

INVALID: list[tuple[str, RecordKind, bytes, str, str]] = [
    ("truncated json", K.FRONTIER_URL, b'{"url": "http://e.com/"', "invalid_json", "line 1"),
    ("trailing garbage", K.FRONTIER_URL, b'{"url": "x"} x', "invalid_json", ""),
    ("nan", K.FRONTIER_URL, b'{"url": "x", "depth": NaN}', "invalid_json", ""),
    ("too deep", K.FRONTIER_URL, b"[" * 2000 + b"]" * 2000, "invalid_json", "depth"),
    ("lone surrogate escape", K.FRONTIER_URL, b'{"url": "\\ud800"}', "invalid_json", "surrogate"),
    ("latin-1 bytes", K.FRONTIER_URL, b'{"url": "caf\xe9"}', "invalid_utf8", "byte offset 12"),
    ("array", K.FRONTIER_URL, b'["http://e.com/"]', "not_an_object", "array"),
    ("string", K.FRONTIER_URL, b'"http://e.com/"', "not_an_object", "string"),
    ("null", K.FRONTIER_URL, b"null", "not_an_object", "null"),
    ("url wrong type", K.FRONTIER_URL, _with(K.FRONTIER_URL, url=5), "schema", "data.url must be string"),
    ("url missing", K.FRONTIER_URL, _with(K.FRONTIER_URL, url=_DROP), "schema", "['url']"),
    ("url empty", K.FRONTIER_URL, _with(K.FRONTIER_URL, url=""), "schema", "data.url"),
    ("depth negative", K.FRONTIER_URL, _with(K.FRONTIER_URL, depth=-1), "schema", "data.depth"),
    ("depth fraction", K.FRONTIER_URL, _with(K.FRONTIER_URL, depth=1.5), "schema", "data.depth"),
    ("depth bool", K.FRONTIER_URL, _with(K.FRONTIER_URL, depth=True), "schema", "data.depth"),
    ("depth huge", K.FRONTIER_URL, _with(K.FRONTIER_URL, depth=2**40), "schema", "data.depth"),
    ("source_url number", K.FRONTIER_URL, _with(K.FRONTIER_URL, source_url=1), "schema", "data.source_url"),
    ("discovered_at prose", K.FRONTIER_URL, _with(K.FRONTIER_URL, discovered_at="yesterday"), "schema",
     "data.discovered_at"),
    ("discovered_at no zone", K.FRONTIER_URL, _with(K.FRONTIER_URL, discovered_at="2024-05-01T12:00:00"),
     "schema", "data.discovered_at"),
    ("discovered_at feb 30", K.FRONTIER_URL, _with(K.FRONTIER_URL, discovered_at="2024-02-30T00:00:00Z"),
     "schema", "data.discovered_at"),
    ("discovered_at epoch", K.FRONTIER_URL, _with(K.FRONTIER_URL, discovered_at=1714564800), "schema",
     "data.discovered_at"),
    ("version 2", K.FRONTIER_URL, _with(K.FRONTIER_URL, schema_version=2), "unsupported_schema_version", "2"),
    ("version 0.5", K.FRONTIER_URL, _with(K.FRONTIER_URL, schema_version=0.5), "unsupported_schema_version",
     ""),
    ("version string", K.FRONTIER_URL, _with(K.FRONTIER_URL, schema_version="1"), "schema",
     "data.schema_version"),
    ("new_url no version", K.NEW_URL, _with(K.NEW_URL, schema_version=_DROP), "schema", "schema_version"),
    ("new_url version 3", K.NEW_URL, _with(K.NEW_URL, schema_version=3), "unsupported_schema_version", ""),
    ("fingerprint upper", K.NEW_URL, _with(K.NEW_URL, fingerprint=FP.upper()), "schema", "data.fingerprint"),
    ("fingerprint short", K.NEW_URL, _with(K.NEW_URL, fingerprint=FP[:-1]), "schema", "data.fingerprint"),
    ("fingerprint newline", K.NEW_URL, _with(K.NEW_URL, fingerprint=FP + "\n"), "schema", "data.fingerprint"),
    ("host missing", K.NEW_URL, _with(K.NEW_URL, host=_DROP), "schema", "host"),
    ("new_url url missing", K.NEW_URL, _with(K.NEW_URL, url=_DROP), "schema", "url"),
    ("page url missing", K.FETCHED_PAGE, b'{"status": 200}', "schema", "['url']"),
    ("two bodies", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, body="a", body_base64="YQ=="), "schema",
     "data.body_base64"),
    ("status 600", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, status=600), "schema", "data.status"),
    ("status string", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, status="200"), "schema", "data.status"),
    ("header number", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, headers={"Age": 5}), "schema",
     "data.headers.Age"),
    ("header list of numbers", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, headers={"Age": [5]}), "schema",
     "data.headers.Age"),
    ("headers list", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, headers=[["a", "b"]]), "schema", "data.headers"),
    ("method post", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, method="POST"), "schema", "data.method"),
    ("fetched_at null", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, fetched_at=None), "schema", "data.fetched_at"),
    ("body bytes as list", K.FETCHED_PAGE, _with(K.FETCHED_PAGE, body=[104, 105]), "schema", "data.body"),
    ("unique no simhash", K.UNIQUE_PAGE, _with(K.UNIQUE_PAGE, simhash=_DROP), "schema", "simhash"),
    ("unique short simhash", K.UNIQUE_PAGE, _with(K.UNIQUE_PAGE, simhash=SIMHASH[1:]), "schema",
     "data.simhash"),
    ("unique digest upper", K.UNIQUE_PAGE, _with(K.UNIQUE_PAGE, digest="AB"), "schema", "data.digest"),
    ("unique no version", K.UNIQUE_PAGE, _with(K.UNIQUE_PAGE, schema_version=_DROP), "schema",
     "schema_version"),
    ("unique two bodies", K.UNIQUE_PAGE, _with(K.UNIQUE_PAGE, body_base64="aGk="), "schema",
     "data.body_base64"),
    ("verdict unknown", K.PAGE_VERDICT, _with(K.PAGE_VERDICT, verdict="maybe"), "schema", "data.verdict"),
    ("verdict kind", K.PAGE_VERDICT, _with(K.PAGE_VERDICT, kind="fuzzy"), "schema", "data.kind"),
    ("verdict distance", K.PAGE_VERDICT, _with(K.PAGE_VERDICT, distance=65), "schema", "data.distance"),
    ("verdict digest odd", K.PAGE_VERDICT, _with(K.PAGE_VERDICT, digest="abc"), "schema", "data.digest"),
    ("verdict url missing", K.PAGE_VERDICT, _with(K.PAGE_VERDICT, url=_DROP), "schema", "url"),
    ("interval zero", K.REVISIT_UPDATE, _with(K.REVISIT_UPDATE, interval_s=0), "schema", "data.interval_s"),
    ("changed string", K.REVISIT_UPDATE, _with(K.REVISIT_UPDATE, changed="yes"), "schema", "data.changed"),
    ("rate negative", K.REVISIT_UPDATE, _with(K.REVISIT_UPDATE, change_rate_estimate=-1), "schema",
     "data.change_rate_estimate"),
    ("conditional extra", K.REVISIT_UPDATE, _with(K.REVISIT_UPDATE, conditional_headers={"ETag": "x"}),
     "schema", "data.conditional_headers"),
    ("next_fetch_at missing", K.REVISIT_UPDATE, _with(K.REVISIT_UPDATE, next_fetch_at=_DROP), "schema",
     "next_fetch_at"),
    ("dead letter extra", K.DEAD_LETTER, _with(K.DEAD_LETTER, extra=1), "schema", "extra"),
    ("dead letter flag", K.DEAD_LETTER, _with(K.DEAD_LETTER, value_truncated="no"), "schema",
     "data.value_truncated"),
    ("dead letter reason", K.DEAD_LETTER, _with(K.DEAD_LETTER, reason="Bad Reason"), "schema", "data.reason"),
    ("dead letter offset", K.DEAD_LETTER, _with(K.DEAD_LETTER, source_offset="42"), "schema",
     "data.source_offset"),
]


# --- the schema files ------------------------------------------------------------------------------


def _subschemas(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for name, value in node.items():
            yield from _subschemas(value, f"{path}/{name}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _subschemas(value, f"{path}/{index}")


def test_every_kind_has_a_schema_file_and_every_file_a_kind() -> None:
    found = {path.name for path in SCHEMA_DIR.iterdir() if path.name.endswith(".json")}
    assert found == {kind.schema_path.name for kind in RecordKind}


@pytest.mark.parametrize("kind", list(RecordKind))
def test_schema_is_valid_draft_07(kind: RecordKind) -> None:
    schema = load_schema(kind)
    fastjsonschema.compile(DRAFT_07)(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["$id"].endswith(f"/{kind.value}.schema.json")
    assert schema["title"] and schema["description"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is (kind is not K.DEAD_LETTER)


@pytest.mark.parametrize("kind", list(RecordKind))
def test_every_property_has_a_description(kind: RecordKind) -> None:
    checked = 0
    for path, node in _subschemas(load_schema(kind)):
        properties = node.get("properties")
        if "/dependencies/" in path or path.endswith("/properties") or not isinstance(properties, dict):
            continue  # the body/body_base64 exclusion only forbids a field, it does not describe one
        for name, prop in properties.items():
            assert isinstance(prop, dict) and prop.get("description"), f"{kind.value}: {path}/{name}"
            checked += 1
    assert checked >= len(load_schema(kind)["properties"])


def test_unique_page_extends_fetched_page() -> None:
    fetched = load_schema(K.FETCHED_PAGE)["properties"]
    unique = load_schema(K.UNIQUE_PAGE)["properties"]
    for name, prop in fetched.items():
        if name != "schema_version":
            assert unique[name] == prop, name


# --- decode ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "record"), [(kind, record) for kind, rs in VALID.items() for record in rs])
def test_valid_records_decode_and_encode(kind: RecordKind, record: dict[str, Any]) -> None:
    decoded = decode(kind, orjson.dumps(record))
    assert decoded["schema_version"] == SCHEMA_VERSION
    assert {name: value for name, value in decoded.items() if name not in ("headers", "schema_version")} == {
        name: value for name, value in record.items() if name not in ("headers", "schema_version")}
    assert decode(kind, encode(kind, decoded, validate=True)) == decoded


@pytest.mark.parametrize(("name", "kind", "raw", "reason", "detail"), INVALID,
                         ids=[case[0] for case in INVALID])
def test_invalid_records_are_rejected(name: str, kind: RecordKind, raw: bytes, reason: str,
                                      detail: str) -> None:
    with pytest.raises(RecordRejected) as caught:
        decode(kind, raw)
    assert caught.value.reason == reason
    assert detail in caught.value.detail


@pytest.mark.parametrize("encoded", ["a!b=", "YQ=", "YQ==\n", "Y Q=="])
def test_bad_base64_body_is_rejected_when_the_body_is_read(encoded: str) -> None:
    """The schema's base64 checks run in body_bytes, once, not in decode (bodies are large)."""
    record = decode(K.FETCHED_PAGE, _with(K.FETCHED_PAGE, body_base64=encoded))
    with pytest.raises(RecordRejected) as rejected:
        body_bytes(record)
    assert (rejected.value.reason, rejected.value.detail.split(":")[0]) == (
        "schema", "data.body_base64 must be encoded by base64")


_BASE64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _respelled_base64(case: tuple[bytes, str]) -> str:
    """Valid base64 with padding added, or its last characters cut."""
    raw, change = case
    encoded = base64.b64encode(raw).decode()
    return encoded[:int(change)] if change.startswith("-") else encoded + change


@settings(max_examples=2000)
@given(st.one_of(st.binary(max_size=64).map(lambda raw: base64.b64encode(raw).decode()),
                 st.tuples(st.binary(max_size=64), st.sampled_from(["", "=", "==", "===", "-1", "-2"])).map(
                     _respelled_base64),
                 st.text(alphabet=_BASE64_ALPHABET + "-_ \n!", max_size=24), st.text(max_size=8)))
def test_body_bytes_decodes_base64_as_the_standard_library(encoded: str) -> None:
    """body_bytes uses pybase64 (SIMD) for speed: the standard library's decoding, or its refusal,
    whatever the text (pybase64 alone refused ``00000000=``, which the standard library takes)."""
    try:
        expected: bytes | None = base64.b64decode(encoded, validate=True)
    except ValueError:
        expected = None
    try:
        found: bytes | None = body_bytes({"body_base64": encoded})  # type: ignore[assignment]
    except RecordRejected:
        found = None
    assert found == expected


@pytest.mark.parametrize(("fields", "expected"), [
    ({"body_base64": "aGk="}, b"hi"), ({"body": "hi"}, "hi"), ({}, ""),
])
def test_body_bytes(fields: dict[str, str], expected: bytes | str) -> None:
    assert body_bytes({"url": "http://example.com/", **fields}) == expected


@pytest.mark.parametrize("raw", [None, b""])
def test_empty_value(raw: bytes | None) -> None:
    with pytest.raises(RecordRejected) as caught:
        decode(K.FRONTIER_URL, raw)
    assert caught.value.reason == "empty"


def test_too_large_is_refused_before_parsing() -> None:
    with pytest.raises(RecordRejected) as caught:
        decode(K.FRONTIER_URL, b"not json at all" * 10, max_record_bytes=100)
    assert caught.value.reason == "too_large"
    assert decode(K.FRONTIER_URL, b'{"url":"x"}', max_record_bytes=11)["url"] == "x"


def test_byte_order_mark_is_ignored() -> None:
    assert decode(K.FRONTIER_URL, b'\xef\xbb\xbf{"url": "x"}')["url"] == "x"


def test_schema_version_defaults_to_1_and_unknown_fields_are_kept() -> None:
    decoded = decode(K.FRONTIER_URL, b'{"url": "x", "extra": {"a": 1}}')
    assert decoded == {"url": "x", "extra": {"a": 1}, "schema_version": 1}


def test_integral_floats_become_ints() -> None:
    decoded = decode(K.FRONTIER_URL, b'{"url": "x", "depth": 2.0, "schema_version": 1.0}')
    assert type(decoded["depth"]) is int and type(decoded["schema_version"]) is int


def test_header_names_are_lower_cased_and_repeats_joined() -> None:
    raw = orjson.dumps({"url": "x", "headers": {"Content-Type": "text/html", "Vary": ["Accept", "Cookie"],
                                                "VARY": "Origin", "X-Empty": []}})
    assert decode(K.FETCHED_PAGE, raw)["headers"] == {
        "content-type": "text/html", "vary": "Accept, Cookie, Origin", "x-empty": ""}
    assert decode(K.FETCHED_PAGE, b'{"url": "x"}')["headers"] == {}


def test_detail_is_bounded() -> None:
    raw = orjson.dumps({**VALID[K.DEAD_LETTER][0], "k" * 100_000: 1})
    with pytest.raises(RecordRejected) as caught:
        decode(K.DEAD_LETTER, raw)
    assert len(caught.value.detail) <= 2000


# --- properties ------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=20,
)


def _decode_or_reject(kind: RecordKind, raw: bytes) -> dict[str, Any] | None:
    try:
        record = decode(kind, raw)
    except RecordRejected as rejected:
        assert rejected.reason in {"empty", "too_large", "invalid_utf8", "invalid_json", "not_an_object",
                                   "schema", "unsupported_schema_version"}
        return None
    # Whatever is accepted can be written back out and is still valid.
    assert decode(kind, encode(kind, record, validate=True)) == record
    return record


@settings(deadline=None)
@given(kind=st.sampled_from(RecordKind), raw=st.binary(max_size=300))
def test_decode_of_arbitrary_bytes_only_rejects(kind: RecordKind, raw: bytes) -> None:
    _decode_or_reject(kind, raw)


@settings(deadline=None)
@given(kind=st.sampled_from(RecordKind), value=JSON_VALUES, ascii_only=st.booleans())
def test_decode_of_arbitrary_json_only_rejects(kind: RecordKind, value: Any, ascii_only: bool) -> None:
    _decode_or_reject(kind, json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


@settings(deadline=None)
@given(kind=st.sampled_from(RecordKind), data=st.data(), value=JSON_VALUES)
def test_decode_of_valid_record_with_one_field_replaced_only_rejects(kind: RecordKind, data: st.DataObject,
                                                                     value: Any) -> None:
    record = dict(data.draw(st.sampled_from(VALID[kind])))
    record[data.draw(st.sampled_from([*load_schema(kind)["properties"], "other"]))] = value
    _decode_or_reject(kind, json.dumps(record).encode())


FRONTIER_RECORDS = st.fixed_dictionaries(
    {"url": st.text(min_size=1)},
    optional={
        "source_url": st.none() | st.text(),
        "discovered_at": st.none() | st.datetimes(timezones=st.just(UTC)).map(rfc3339),
        "depth": st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    },
)


@given(FRONTIER_RECORDS)
def test_frontier_round_trip(record: dict[str, Any]) -> None:
    data = encode(K.FRONTIER_URL, record, validate=True)
    assert decode(K.FRONTIER_URL, data) == {**record, "schema_version": 1}


# --- encode ----------------------------------------------------------------------------------------


def test_encode_puts_the_current_version_first() -> None:
    data = encode(K.FRONTIER_URL, {"url": "x", "schema_version": 7})
    assert data.startswith(b'{"schema_version":1,')
    assert orjson.loads(data) == {"schema_version": 1, "url": "x"}


def test_encode_writes_datetimes_as_rfc3339_utc() -> None:
    record = {"url": "x", "discovered_at": datetime(2024, 5, 1, 14, tzinfo=timezone(timedelta(hours=2)))}
    assert decode(K.FRONTIER_URL, encode(K.FRONTIER_URL, record, validate=True))["discovered_at"] == (
        "2024-05-01T12:00:00.000Z")


def test_encode_validates_only_on_request() -> None:
    bad = {"url": "x", "canonical": "x", "fingerprint": "nope", "host": "x"}
    assert encode(K.NEW_URL, bad)
    with pytest.raises(RecordRejected) as caught:
        encode(K.NEW_URL, bad, validate=True)
    assert caught.value.reason == "schema" and "fingerprint" in caught.value.detail


# --- dead letters ----------------------------------------------------------------------------------

NOW = datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def _letter(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"reason": "invalid_json", "detail": "boom", "stage": "url_dedup",
                                 "topic": "crawl.frontier", "partition": 2, "offset": 99, "key": b"k\xff",
                                 "value": b"{", "now": NOW, **overrides}
    return decode(K.DEAD_LETTER, dead_letter(**arguments))


def test_dead_letter_keeps_key_and_value() -> None:
    letter = _letter()
    assert letter == {
        "schema_version": 1, "reason": "invalid_json", "detail": "boom", "stage": "url_dedup",
        "source_topic": "crawl.frontier", "source_partition": 2, "source_offset": 99,
        "key_base64": base64.b64encode(b"k\xff").decode(), "key_size": 2, "key_truncated": False,
        "value_base64": "ew==", "value_size": 1, "value_truncated": False,
        "dead_lettered_at": "2024-05-01T12:00:00.250Z"}


def test_dead_letter_of_missing_key_and_value() -> None:
    letter = _letter(key=None, value=None)
    assert (letter["key_base64"], letter["value_base64"], letter["value_size"]) == (None, None, 0)
    assert letter["value_truncated"] is False


def test_dead_letter_of_a_10_mb_record_fits_a_default_broker() -> None:
    value = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    data = dead_letter(reason="too_large", detail="x" * 1_000_000, stage="page_dedup", topic="t", partition=0,
                       offset=1, key=b"k" * 1_000_000, value=value)
    assert len(data) < 1_000_000
    letter = decode(K.DEAD_LETTER, data)
    assert letter["value_size"] == len(value) and letter["value_truncated"] is True
    assert base64.b64decode(letter["value_base64"]) == value[: 512 * 1024]
    assert letter["key_size"] == 1_000_000 and letter["key_truncated"] is True


def test_dead_letter_value_limit_is_exact() -> None:
    assert _letter(value=b"abcd", max_value_bytes=4)["value_truncated"] is False
    letter = _letter(value=b"abcde", max_value_bytes=4)
    assert base64.b64decode(letter["value_base64"]) == b"abcd" and letter["value_size"] == 5
    assert _letter(value=b"abc", max_value_bytes=-1)["value_base64"] == ""


# --- timestamps ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dt", "text"), [
    (datetime(2024, 5, 1, 12, tzinfo=UTC), "2024-05-01T12:00:00.000Z"),
    (datetime(2024, 5, 1, 14, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=2))),
     "2024-05-01T12:00:00.999Z"),
    (datetime(2024, 5, 1, 12), "2024-05-01T12:00:00.000Z"),
    (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00.000Z"),
])
def test_rfc3339(dt: datetime, text: str) -> None:
    assert rfc3339(dt) == text
    truncated = dt.replace(microsecond=dt.microsecond // 1000 * 1000, tzinfo=dt.tzinfo or UTC)
    assert parse_rfc3339(text) == truncated


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-05-01t12:00:00z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ("2024-05-01T12:00:00-00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ("2024-05-01T12:00:00.1234567+05:30", datetime(2024, 5, 1, 6, 30, 0, 123456, tzinfo=UTC)),
    ("2016-12-31T23:59:60Z", datetime(2017, 1, 1, tzinfo=UTC)),
])
def test_parse_rfc3339(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize("text", [
    "2024-05-01 12:00:00Z", "2024-05-01T12:00Z", "2024-05-01", "2024-13-01T00:00:00Z", "2024-05-01T24:00:00Z",
    "2024-05-01T12:00:00+0200", "9999-12-31T23:59:60Z", "٢٠٢٤-05-01T12:00:00Z", "2024-05-01T12:00:00+24:00",
])
def test_parse_rfc3339_rejects(text: str) -> None:
    with pytest.raises(RecordRejected):
        parse_rfc3339(text)
