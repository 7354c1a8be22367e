"""The plain-record shortcut (streams/plain.py) never accepts what full validation refuses or changes."""

from __future__ import annotations

from typing import Any

import fastjsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import records
from streams.plain import plain_checker
from streams.records import MAX_JSON_DEPTH, RecordKind, _codec, _deeper_than

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.sampled_from([0, 1, 2.0, 1.5]),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                    st.sampled_from(["", "unique", "near", "2024-05-01T12:00:00Z", "00ff00ff00ff00ff"]))
VALUES = st.recursive(SCALARS, lambda inner: (st.lists(inner, max_size=2)
                                              | st.dictionaries(st.text(max_size=3), inner, max_size=2)))


@st.composite
def records_of(draw: st.DrawFn, kind: RecordKind) -> dict[str, Any]:
    names = sorted(records.load_schema(kind).get("properties", {}))
    names_and_extras = st.sampled_from([*names, "extra", "x-note"])
    chosen = draw(st.lists(names_and_extras, unique=True, max_size=len(names) + 2))
    return {name: draw(VALUES) for name in chosen}


def _fully_valid(kind: RecordKind, record: dict[str, Any]) -> bool:
    try:
        records.decode(kind, orjson.dumps(record), max_record_bytes=1 << 20)
    except records.RecordRejected:
        return False
    return True


@PROPERTY
@given(data=st.data(), kind=st.sampled_from(list(RecordKind)))
def test_a_plain_record_is_valid_and_decodes_unchanged(data: st.DataObject, kind: RecordKind) -> None:
    record = data.draw(records_of(kind))
    if not _codec(kind).plainly_valid(record):
        return
    assert not _deeper_than(record, MAX_JSON_DEPTH)
    _codec(kind).validate(record)  # raises if the shortcut was wrong
    assert _fully_valid(kind, record)
    full = dict(record)
    full.setdefault("schema_version", 1)
    if _codec(kind).has_headers:  # a fetched page's headers are normalised: absent ones become {}
        full.setdefault("headers", {})
    assert records.decode(kind, orjson.dumps(record)) == full


FRONTIER = {"url": "http://e.com/", "source_url": None, "depth": 2}


@pytest.mark.parametrize(("change", "plain"), [
    ({}, True),
    ({"source_url": "http://e.com/a"}, True),
    ({"extra": "kept", "n": 1.5, "flag": True}, True),      # unknown scalars are allowed
    ({"schema_version": 1}, True),
    ({"schema_version": 2}, False),                         # a future version: the full path refuses it
    ({"schema_version": True}, False),
    ({"depth": 2.0}, False),                                # the full path makes it an int
    ({"depth": True}, False),
    ({"depth": -1}, False),
    ({"depth": 2**31}, False),
    ({"url": ""}, False),
    ({"url": None}, False),
    ({"discovered_at": "2024-05-01T12:00:00Z"}, False),     # a format and a pattern: the full path
    ({"discovered_at": None}, True),
    ({"extra": {"nested": 1}}, False),                      # nesting: the depth check
])
def test_frontier_cases(change: dict[str, Any], plain: bool) -> None:
    assert _codec(RecordKind.FRONTIER_URL).plainly_valid({**FRONTIER, **change}) is plain


def test_missing_required_field_and_closed_schemas() -> None:
    closed = plain_checker({"type": "object", "required": ["a"], "additionalProperties": False,
                            "properties": {"a": {"type": "string"}}})
    assert closed({"a": "x"})
    assert not closed({})
    assert not closed({"a": "x", "b": 1})
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        fastjsonschema.compile({"type": "object", "additionalProperties": False})({"b": 1})
