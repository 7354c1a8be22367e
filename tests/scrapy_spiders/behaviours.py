"""One spider for each point of Scrapy's scheduler contract the tests compare, each on hosts of its
own of testing/behaviour_site.py's site (run with ``scrapy runspider``, CONCURRENT_REQUESTS=1):

- start requests: the seed, and one page asked twice with ``dont_filter`` (Scrapy's start_urls do);
- priority: a gate page (priority 1000, fetched here at once: ``dont_filter``) holds the one
  download slot while ten requests with distinct priorities are queued;
- the whole request: headers, cookies, meta, cb_kwargs, flags and encoding of a GET (through the
  stages) and a POST with a body (kept local), echoed back by the site;
- what cannot travel: an object in meta, a lambda callback;
- dont_filter and the dupefilter: a page asked again (filtered) and again with dont_filter (fetched);
- redirects: to the page already fetched, in the same spelling and in another one (``:80``), and a
  chain of two to a new page.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response

PRIORITIES = (3, 7, 1, 9, 5, 2, 8, 4, 6, 0)


class Opaque:
    """Not JSON: a request carrying it in meta cannot travel through Kafka."""


class Behaviours(scrapy.Spider):
    name = "behaviours"

    def _starts(self) -> Iterator[scrapy.Request]:
        yield scrapy.Request("http://seed.test/", callback=self.seed)
        for _ in range(2):
            yield scrapy.Request("http://start.test/again", dont_filter=True, callback=self.page,
                                 cb_kwargs={"kind": "start"})

    async def start(self) -> AsyncIterator[scrapy.Request]:  # Scrapy 2.13 and later
        for request in self._starts():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # before 2.13
        yield from self._starts()

    def seed(self, response: Response) -> Iterator[Any]:
        yield scrapy.Request("http://a-gate.test/", dont_filter=True, priority=1000, callback=self.page,
                             cb_kwargs={"kind": "gate"})
        for number, priority in enumerate(PRIORITIES):
            yield scrapy.Request(f"http://prio.test/{number}", priority=priority, callback=self.page,
                                 cb_kwargs={"kind": "priority"})
        yield scrapy.Request(
            "http://echo-get.test/get?q=%E9", callback=self.echoed, errback=self.failed,
            headers={"Authorization": "Bearer token-1", "Accept-Language": "de-CH", "X-Binary": b"\xe9t\xe9"},
            cookies={"session": "abc", "theme": "dark"}, meta={"token": 42, "nested": {"a": [1, 2.5, None]}},
            cb_kwargs={"label": "get", "tags": ["x", "y"]}, flags=["flagged"], encoding="latin-1")
        yield scrapy.Request("http://echo-post.test/post", method="POST", body=b"a=1&b=%C3%A9",
                             headers={"Content-Type": "application/x-www-form-urlencoded"},
                             callback=self.echoed, cb_kwargs={"label": "post"})
        yield scrapy.Request("http://echo-object.test/object", meta={"object": Opaque()},
                             callback=self.echoed,
                             cb_kwargs={"label": "object"})
        yield scrapy.Request("http://echo-lambda.test/lambda", callback=lambda response: [{"kind": "lambda"}])
        yield scrapy.Request("http://page.test/a", callback=self.first)
        yield scrapy.Request("http://hop.test/1", callback=self.page, cb_kwargs={"kind": "chain"})

    def first(self, response: Response) -> Iterator[Any]:
        yield from self.page(response, "first")
        yield scrapy.Request("http://page.test/a", callback=self.page, cb_kwargs={"kind": "again"})
        yield scrapy.Request("http://page.test/a", dont_filter=True, callback=self.page,
                             cb_kwargs={"kind": "dont_filter"})
        yield scrapy.Request("http://back.test/same", callback=self.page, cb_kwargs={"kind": "redirect-same"})
        yield scrapy.Request("http://back.test/other", callback=self.page,
                             cb_kwargs={"kind": "redirect-other"})

    def page(self, response: Response, kind: str) -> Iterator[dict[str, Any]]:
        yield {"kind": kind, "url": response.url, "status": response.status,
               "redirect_urls": response.meta.get("redirect_urls"),
               "redirect_reasons": response.meta.get("redirect_reasons"),
               "redirect_times": response.meta.get("redirect_times"), "priority": response.request.priority}

    def echoed(self, response: Response, label: str, **extra: Any) -> Iterator[dict[str, Any]]:
        echo = json.loads(response.text)
        yield {"kind": "echo", "label": label, "extra": extra, "echo": echo,
               "meta": {key: response.meta.get(key) for key in ("token", "nested")},
               "flags": response.request.flags, "encoding": response.request.encoding,
               "errback": getattr(response.request.errback, "__name__", None)}

    def failed(self, failure: Any) -> Iterator[dict[str, Any]]:
        yield {"kind": "failed", "error": repr(failure.value)}
