"""A Scrapy request's trip through Kafka as JSON (streams/integrations/requests.py): what survives,
what is refused with the field named, and what a record can never make a process do."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.http import FormRequest, JsonRequest

from streams.integrations.requests import Unserializable, decode, encode


class Site(Spider):
    name = "site"

    def parse(self, response: Any, **kwargs: Any) -> None:
        return None

    def detail(self, response: Any, **kwargs: Any) -> None:
        return None

    def failed(self, failure: Any) -> None:
        return None


SPIDER = Site()


def _trip(request: Request) -> Request:
    return decode(orjson.loads(orjson.dumps(encode(request, SPIDER))), SPIDER)


def _same(a: Request, b: Request) -> None:
    assert type(a) is type(b)
    for attribute in ("url", "method", "body", "cookies", "meta", "encoding", "priority", "dont_filter",
                      "flags", "cb_kwargs", "callback", "errback"):
        assert getattr(a, attribute) == getattr(b, attribute), attribute
    assert a.headers == b.headers


@pytest.mark.parametrize("request_", [
    Request("http://a.example/"),
    Request("http://a.example/p?q=1", callback=SPIDER.detail, errback=SPIDER.failed, priority=-3,
            headers={"Authorization": "Bearer x", "Accept-Language": ["de", "en"], "X-Bin": b"\xe9\x00"},
            cookies={"session": "abc"}, meta={"token": 7, "path": ["a", None, 2.5, True], "deep": {"x": {}}},
            cb_kwargs={"page": 2}, flags=["first"], encoding="latin-1", dont_filter=True),
    Request("http://a.example/", cookies=[{"name": "a", "value": "b", "domain": "a.example", "path": "/"}]),
    Request("http://a.example/binary", method="PUT", body=bytes(range(256))),
    FormRequest("http://a.example/form", formdata={"q": "é", "n": "1"}),
    JsonRequest("http://a.example/api", data={"a": [1, 2]}),
], ids=["plain", "everything", "cookie-list", "binary-body", "form", "json"])
def test_a_request_comes_back_as_it_went(request_: Request) -> None:
    _same(_trip(request_), request_)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text()
                    | st.floats(allow_nan=False, allow_infinity=False),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                 max_size=4),
                    max_leaves=20)


@given(JSON)
def test_any_json_meta_and_cb_kwargs_come_back_equal(value: Any) -> None:
    request = Request("http://a.example/", meta={"value": value}, cb_kwargs={"value": value})
    back = _trip(request)
    assert back.meta == {"value": value} and back.cb_kwargs == {"value": value}


@pytest.mark.parametrize(("request_", "field"), [
    (Request("http://a.example/", meta={"item": object()}), "meta['item']"),
    (Request("http://a.example/", meta={"a": [1, {"b": {1, 2}}]}), "meta['a'][1]['b']"),
    (Request("http://a.example/", meta={"n": float("nan")}), "meta['n']"),
    (Request("http://a.example/", meta={"big": 2**70}), "meta['big']"),
    (Request("http://a.example/", cb_kwargs={"when": b"bytes"}), "cb_kwargs['when']"),
    (Request("http://a.example/", meta={"a": {1: "int key"}}), "meta['a'][1]"),
    (Request("http://a.example/", callback=lambda response: None), "callback"),
    (Request("http://a.example/", callback=SPIDER.parse, errback=print), "errback"),
    (Request("http://a.example/", cookies={"a": object()}), "cookies['a']"),
], ids=["object", "set-inside", "nan", "huge-int", "bytes", "int-key", "lambda", "builtin-errback", "cookie"])
def test_what_json_cannot_carry_is_refused_naming_the_field(request_: Request, field: str) -> None:
    with pytest.raises(Unserializable) as refused:
        encode(request_, SPIDER)
    assert refused.value.field == field


def test_the_integrations_own_meta_never_travels_and_defaults_are_left_out() -> None:
    request = Request("http://a.example/", meta={"crawl_dedup": (0, 1), "crawl_dedup_held": 3, "k": 1})
    encoded = encode(request, SPIDER)
    assert encoded == {"url": "http://a.example/", "meta": {"k": 1}}


class Custom(Request):
    pass


@pytest.mark.parametrize(("data", "message"), [
    ({"url": "http://a.example/", "_class": "os.system"}, "not a request class allowed"),
    ({"url": "http://a.example/", "_class": f"{__name__}.Custom"}, "not a request class allowed"),
    ({"url": "http://a.example/", "callback": "__init__"}, "not the name of a spider method"),
    ({"url": "http://a.example/", "callback": "settings.get"}, "not the name of a spider method"),
    ({"url": "http://a.example/", "callback": "name"}, "not a method of spider"),
    ({"url": "http://a.example/", "errback": "nowhere"}, "not a method of spider"),
])
def test_a_record_loads_no_class_and_calls_nothing_but_the_spiders_methods(data: dict[str, Any],
                                                                          message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode(data, SPIDER)


def test_a_projects_own_request_class_travels_once_listed() -> None:
    path = f"{Custom.__module__}.Custom"
    with pytest.raises(Unserializable, match="CRAWL_DEDUP_REQUEST_CLASSES"):
        encode(Custom("http://a.example/"), SPIDER)
    classes = frozenset({path})
    encoded = orjson.loads(orjson.dumps(encode(Custom("http://a.example/"), SPIDER, classes)))
    back = decode(encoded, SPIDER, classes)
    assert type(back) is Custom
