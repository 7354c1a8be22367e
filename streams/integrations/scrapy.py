"""Scrapy on the stage's topics (``pip install crawl-dedup[scrapy]``): a scheduler and a middleware.

Two settings switch a Scrapy project over, as scrapy-redis's ``SCHEDULER`` and ``DUPEFILTER_CLASS``
do::

    SCHEDULER = "streams.integrations.scrapy.Scheduler"
    SPIDER_MIDDLEWARES = {"streams.integrations.scrapy.FetchedPages": 30}

- :class:`Scheduler`: ``enqueue_request`` writes a ``frontier_url`` record (the URL, ``source_url``
  from the Referer, ``depth``, and the request's callback, priority and JSON-safe meta under
  ``scrapy``); the URL stage emits each new URL once to ``new-urls``, keyed by host. Every Scrapy
  process of a crawl reads ``new-urls`` in one consumer group (``CRAWL_DEDUP_GROUP``), so each new
  URL is fetched by one process, its canonical form, and a host's URLs by the process owning its
  partition (Scrapy's per-host politeness holds within each process). Requests other than GET are
  not URL-deduplicated: they are scheduled locally, as are re-fetches the crawl asks for itself.
- :class:`FetchedPages` writes every response to ``fetched-pages`` (status, headers, body,
  ``fetched_at``) for the page and revisit stages; with ``CRAWL_DEDUP_SKIP_DUPLICATES`` it waits up
  to ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` for the page stage's verdict and never runs a duplicate's
  callback: no items, no links from it.

Restarts (:class:`Offsets`): a new URL's offset counts as done once its response is written and the
requests its callback yielded are written to the frontier (or once its fetch failed: the request's
errback is wrapped). A partition's committed offset is its lowest offset still in flight, and the offsets
done past it travel in the commit's metadata, so a restarted process skips them: it fetches again
only what was in flight when the last one stopped.

Settings (Scrapy's own style; defaults in brackets): ``CRAWL_DEDUP_BOOTSTRAP_SERVERS``
[``KAFKA_BOOTSTRAP_SERVERS``, else 127.0.0.1:19092], ``CRAWL_DEDUP_KAFKA`` (librdkafka settings
passed through: SASL, TLS) [{}], ``CRAWL_DEDUP_TOPIC_PREFIX`` [crawl.], ``CRAWL_DEDUP_GROUP``
[<prefix>scrapy.<spider name>], ``CRAWL_DEDUP_APP_ID`` (the stages' ``app_id``) [crawl-dedup],
``CRAWL_DEDUP_SKIP_DUPLICATES`` [False], ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` [30],
``CRAWL_DEDUP_IDLE_CLOSE_S`` (close the spider once it had nothing to fetch this long and the whole
crawl is drained: nothing undecided in the frontier or the URL stage, no new URL left or in flight
in any process; 0: run until stopped) [0], ``CRAWL_DEDUP_BUFFER`` (new URLs taken ahead of the downloader)
[2 x CONCURRENT_REQUESTS], ``CRAWL_DEDUP_PROCESS_ID`` (a stable id per process: static group
membership, so a restarted process takes its partitions back at once instead of after the dead
one's session times out) [none], ``CRAWL_DEDUP_REVISIT`` (fetch again what the revisit stage
schedules, with its conditional headers; :mod:`streams.integrations.revisits`) [False],
``CRAWL_DEDUP_REVISIT_AHEAD_S`` (also what comes due within this long of the start, once) [0].
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response

from streams.integrations.hub import LOCAL_META, TAKEN_META, Hub, hub_of


class Scheduler:
    """Scrapy's scheduler interface over the frontier and new-urls topics (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.hub: Hub | None = None
        self._drained_checks = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        return cls(crawler)

    def open(self, spider: Spider) -> None:
        self.hub = Hub(self.crawler, spider)
        self.crawler._crawl_dedup_hub = self.hub  # type: ignore[attr-defined]
        self.crawler.signals.connect(self._idle, signal=signals.spider_idle)

    def close(self, reason: str) -> None:
        if self.hub is not None:
            self.hub.close()

    def _idle(self, spider: Spider) -> None:
        """Other processes and the stage may still send URLs: stay open unless idle long enough and
        the whole crawl found drained twice, a heartbeat (5 s) apart."""
        assert self.hub is not None
        idle_close_s = self.hub.settings.idle_close_s
        if not idle_close_s or time.monotonic() - self.hub.last_new_s < idle_close_s \
                or not self.hub.revisits_read:
            raise DontCloseSpider
        drained = self.hub.crawl_drained()
        self._drained_checks = self._drained_checks + 1 if drained else 0
        if self._drained_checks < 2:
            raise DontCloseSpider

    def has_pending_requests(self) -> bool:
        return self.hub is not None and bool(self.hub.queue)

    def enqueue_request(self, request: Request) -> bool:
        assert self.hub is not None
        if TAKEN_META in request.meta or request.meta.get(LOCAL_META) or request.method != "GET":
            self.hub.queue.append(request)
        else:
            self.hub.discovered(request)
        return True

    def next_request(self) -> Request | None:
        return self.hub.queue.popleft() if self.hub is not None and self.hub.queue else None


class FetchedPages:
    """Spider middleware (before HttpErrorMiddleware, so that error statuses are written too): every
    response to fetched-pages; a duplicate's callback never run when asked; its URL done once the
    spider's output for it is scheduled."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchedPages:
        return cls(crawler)

    def process_spider_input(self, response: Response) -> None:
        hub_of(self.crawler).fetched(response.request, response)  # type: ignore[arg-type]

    async def process_spider_output(self, response: Response,
                                    result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        hub = hub_of(self.crawler)
        request = response.request
        assert request is not None
        try:
            verdict = await hub.verdict(request.url) if hub.settings.skip_duplicates else None
            # a copy of its own earlier fetch (a re-fetch after a crash, a revisit) is parsed again
            if verdict is not None and verdict.get("verdict") == "duplicate" \
                    and verdict.get("duplicate_of") != request.url:
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value("crawl_dedup/duplicate_pages_skipped")
                return
            async for output in result:
                yield output
        finally:
            hub.finished(request)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if response.request is not None:
            hub_of(self.crawler).finished(response.request)
