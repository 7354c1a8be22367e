"""Plainly valid records: a check, derived from a record schema, that passes the common record fast.

Why: full validation (fastjsonschema's generated code, the nesting-depth walk, the version check)
costs many times what parsing the record does, on a path run for every URL a crawler discovers
(docs/decisions/0002-compiled-hot-path.md, "The plain-record check, measured"). Most records are
plain: only the schema's fields, each a string, integer or null of the declared type, no nested
values. :func:`plain_checker` compiles a schema into a predicate that accepts exactly such records
and says nothing about the rest: it is conservative, never the judge of a bad record. ``True``
means the full validation would accept the record unchanged (besides the ``schema_version``
default); ``False`` sends the record down the full path, which gives the precise reason
(tests/test_plain.py checks this against fastjsonschema).

Only keywords whose meaning is plain are compiled: ``type`` (string, integer, number, boolean,
null), ``minLength``/``maxLength``, ``minimum``/``maximum``, ``const`` and string ``enum``. A
property with any other constraint (``format``, ``pattern``, ``items``, ``contentEncoding``...)
is plain only when null. Unknown fields are plain only as scalars (JSON Schema draft-07,
``additionalProperties``; nested values need the depth check) and only where the schema allows them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

Check = Callable[[Any], bool]

_ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples", "$comment", "type",
                                 "minLength", "maxLength", "minimum", "maximum", "const", "enum"})
_SCALARS: Final = (str, int, float, bool, type(None))


def plain_checker(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool]:
    """A predicate over parsed records: ``True`` only for records the schema plainly accepts."""
    properties: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    checks = {name: _property_check(prop) for name, prop in properties.items()}
    required = tuple(schema.get("required", ()))
    extras_allowed = schema.get("additionalProperties", True) is True

    def plainly_valid(record: dict[str, Any]) -> bool:
        for name in required:
            if name not in record:
                return False
        for name, value in record.items():
            check = checks.get(name)
            if check is None:
                if not extras_allowed or not isinstance(value, _SCALARS):
                    return False
            elif not check(value):
                return False
        return True

    return plainly_valid


def _property_check(prop: Mapping[str, Any]) -> Check:
    declared = prop.get("type")
    types = {declared} if isinstance(declared, str) else set(declared or ())
    nullable = "null" in types
    if not types or not _ANNOTATIONS.issuperset(prop):
        return (lambda value: value is None) if nullable else (lambda value: False)
    typed = [_typed_check(name, prop) for name in sorted(types - {"null"})]
    if len(typed) == 1:
        only = typed[0]
        return (lambda value: value is None or only(value)) if nullable else only
    return lambda value: (value is None and nullable) or any(check(value) for check in typed)


def _typed_check(json_type: str, prop: Mapping[str, Any]) -> Check:
    """One JSON type's check, exact Python types only (``bool`` is no integer, ``2.0`` goes the
    full path, which normalises it). The common shapes get closures of their own: this runs for
    every field of every record."""
    if json_type == "string":
        return _string_check(prop)
    if json_type in ("integer", "number") and "enum" not in prop:
        return _number_check(prop, (int,) if json_type == "integer" else (int, float))
    if json_type == "boolean" and "enum" not in prop and "const" not in prop:
        return lambda value: type(value) is bool
    return lambda value: False


def _string_check(prop: Mapping[str, Any]) -> Check:
    shortest, longest = prop.get("minLength", 0), prop.get("maxLength")
    choices = prop["enum"] if "enum" in prop else [prop["const"]] if "const" in prop else None
    if choices is not None:
        allowed = frozenset(choice for choice in choices if type(choice) is str)
        return lambda value: type(value) is str and value in allowed
    if longest is None:
        return lambda value: type(value) is str and len(value) >= shortest
    return lambda value: type(value) is str and shortest <= len(value) <= longest


def _number_check(prop: Mapping[str, Any], kinds: tuple[type, ...]) -> Check:
    if "const" in prop:
        const = prop["const"]
        return lambda value: type(value) in kinds and type(const) in kinds and value == const
    low, high = prop.get("minimum", -float("inf")), prop.get("maximum", float("inf"))
    if kinds == (int,):
        return lambda value: type(value) is int and low <= value <= high
    return lambda value: type(value) in kinds and low <= value <= high
