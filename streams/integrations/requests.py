"""A Scrapy request as JSON, for its trip through Kafka, and back: never pickle, never eval.

:func:`encode` starts from Scrapy's own serialization, ``Request.to_dict(spider=...)`` (the one
Scrapy's disk queues and ``request_from_dict`` use): every attribute of the request, the callback
and errback by the name of a spider method, and the class of a ``Request`` subclass. It makes that
JSON: header names and values as latin-1 text, the body in base64, and ``meta``, ``cb_kwargs``,
``cookies`` (and a ``JsonRequest``'s ``dumps_kwargs``) kept only if they are JSON as they stand:
objects with text keys, text, integers within 64 bits, finite floats, booleans, null and lists (a
tuple comes back as a list). Anything else raises :class:`Unserializable`, naming the field
(``meta['item']``, ``callback``...), never dropped in silence. Attributes at their default are
left out: a frontier record carries what the request changed.

:func:`decode` is ``request_from_dict``'s work, with two limits since the record comes from a
topic: a class is loaded only from :data:`SCRAPY_CLASSES` or the classes the project lists
(``CRAWL_DEDUP_REQUEST_CLASSES``), and a callback or errback only by the name of a method of the
spider itself (no dotted path, no dunder), so a record can neither import a module nor call
anything but the spider's own methods.

Meta keys starting with :data:`PRIVATE` are the integration's own bookkeeping (which new-urls
offset a request stands for): they never travel.
"""

from __future__ import annotations

import base64
import inspect
import math
from collections.abc import Callable, Collection
from typing import Any, Final

from scrapy import Request, Spider
from scrapy.http import Headers
from scrapy.utils.misc import load_object

PRIVATE: Final = "crawl_dedup"
SCRAPY_CLASSES: Final = frozenset({
    "scrapy.http.request.Request", "scrapy.http.request.form.FormRequest",
    "scrapy.http.request.json_request.JsonRequest", "scrapy.http.request.rpc.XmlRpcRequest"})
_DEFAULTS: Final[dict[str, Any]] = {
    "callback": None, "errback": None, "headers": {}, "body": b"", "cookies": {}, "meta": {},
    "encoding": "utf-8", "flags": [], "cb_kwargs": {}, "dont_filter": False, "method": "GET", "priority": 0}
_CHECKED: Final = ("meta", "cb_kwargs", "cookies", "dumps_kwargs")
_INT64: Final = 2**63


class Unserializable(ValueError):
    """The request cannot travel as JSON: ``field`` says which part (``meta['item']``) and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field = field
        self.reason = reason


def encode(request: Request, spider: Spider, classes: Collection[str] = SCRAPY_CLASSES) -> dict[str, Any]:
    """The request as a JSON-ready dict (the URL included); :class:`Unserializable` if it cannot be."""
    request = _unwrapped(request)
    for which in ("callback", "errback"):
        function = getattr(request, which)
        if callable(function) and not _is_spider_method(spider, function):
            raise Unserializable(which, f"{function!r} is not a method of the spider: it travels by name")
    raw = request.to_dict(spider=spider)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "meta":
            value = {k: v for k, v in value.items() if not str(k).startswith(PRIVATE)}
        if key in _DEFAULTS and value == _DEFAULTS[key]:
            continue
        if key == "_class" and value not in classes:
            raise Unserializable("class", f"{value} is not a request class allowed to travel "
                                 "(CRAWL_DEDUP_REQUEST_CLASSES)")
        if key == "body":
            out["body_base64"] = base64.b64encode(value).decode("ascii")
        else:
            out[key] = _json(key, value)
    return out


def decode(data: dict[str, Any], spider: Spider, classes: Collection[str] = SCRAPY_CLASSES) -> Request:
    """The request :func:`encode` wrote; ValueError naming the field for one this spider cannot
    rebuild (a callback it no longer has, a class not allowed)."""
    cls: type[Request] = Request
    name = data.get("_class")
    if name is not None:
        if name not in classes:
            raise ValueError(f"class {name!r} is not a request class allowed to travel")
        cls = load_object(name)
        if not (isinstance(cls, type) and issubclass(cls, Request)):
            raise ValueError(f"class {name!r} is not a scrapy Request")
    kwargs = {key: value for key, value in data.items() if key in cls.attributes and key != "body"}
    if "headers" in data:
        kwargs["headers"] = Headers({name.encode("latin-1"): [value.encode("latin-1") for value in values]
                                     for name, values in data["headers"].items()})
    if "body_base64" in data:
        kwargs["body"] = base64.b64decode(data["body_base64"])
    for which in ("callback", "errback"):
        if data.get(which):
            kwargs[which] = _method(spider, which, data[which])
    return cls(**kwargs)


def _is_spider_method(spider: Spider, function: Any) -> bool:
    bound = getattr(spider, getattr(function, "__name__", ""), None)
    return inspect.ismethod(function) and inspect.ismethod(bound) and bound.__func__ is function.__func__


def _method(spider: Spider, which: str, name: Any) -> Callable[..., Any]:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        raise ValueError(f"{which} {name!r} is not the name of a spider method")
    method = getattr(spider, name, None)
    if not inspect.ismethod(method) or method.__self__ is not spider:
        raise ValueError(f"{which} {name!r} is not a method of spider {spider.name!r}")
    return method


def _json(key: str, value: Any) -> Any:
    if key == "headers":
        return {_text(name): [_text(item) for item in items] for name, items in value.items()}
    if key in _CHECKED:
        _check(value, key)
    return value


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _check(value: Any, path: str) -> None:
    """Raise :class:`Unserializable` at the first part of ``value`` that JSON would not give back."""
    if value is None or isinstance(value, (str, bool)):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise Unserializable(path, "is an integer beyond 64 bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unserializable(path, f"is {value}, which JSON has no number for")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str):
                raise Unserializable(f"{path}[{name!r}]", f"is under a key of type {type(name).__name__}")
            _check(item, f"{path}[{name!r}]")
        return
    raise Unserializable(path, f"is a {type(value).__module__}.{type(value).__qualname__}, not JSON")


def _unwrapped(request: Request) -> Request:
    """The request with its own errback, where the hub wrapped it to see a failed fetch."""
    original = getattr(request.errback, "crawl_dedup_wrapped", _NOT_WRAPPED)
    return request if original is _NOT_WRAPPED else request.replace(errback=original)


_NOT_WRAPPED: Final = object()
