"""Scrapy on the stage's topics (``pip install crawl-dedup[scrapy]``): a scheduler and a middleware.

Two settings switch a Scrapy project over, as scrapy-redis's ``SCHEDULER`` and ``DUPEFILTER_CLASS``
do::

    SCHEDULER = "streams.integrations.scrapy.Scheduler"
    SPIDER_MIDDLEWARES = {"streams.integrations.scrapy.FetchedPages": 30}

:class:`Scheduler` is Scrapy's own default scheduler (``scrapy.core.scheduler.Scheduler``: its
``DUPEFILTER_CLASS``, its priority queue, ``SCHEDULER_MEMORY_QUEUE`` and start-request queues, its
stats) with the URL stage between the spider and the queue:

- A GET request the dupefilter lets through is written to the frontier (``frontier_url``: the URL,
  ``source_url`` from the Referer, ``depth``, and under ``scrapy`` the whole request as
  :mod:`streams.integrations.requests` encodes it). The URL stage emits each canonical URL once
  to ``new-urls``, keyed by host; every process of a crawl reads ``new-urls`` in one consumer group
  (``CRAWL_DEDUP_GROUP``), so each new URL is fetched once, by the process owning its host's
  partition (Scrapy's per-host politeness holds within each process), rebuilt with its headers,
  cookies, meta, cb_kwargs, flags, priority and callbacks, and queued by Scrapy's priority queue.
- Queued here, without the trip: ``dont_filter`` requests (fetched even when seen, as Scrapy does;
  still written to the frontier, marked, so the URL stage knows the URL and no process fetches it
  a second time for it), requests other than GET (deduplicated by the dupefilter, as Scrapy does),
  retries, and a request that cannot travel as JSON (an error in the log names the request and the
  field, as Scrapy's disk queues log theirs; ``scheduler/unserializable`` counts them).
- A redirect (RedirectMiddleware re-schedules its target) goes through the dupefilter and the URL
  stage like any request: a redirect to a URL already fetched, in any spelling, is not fetched
  again, and the target keeps ``redirect_urls``, ``redirect_reasons`` and ``redirect_times``.
- ``enqueue_request`` returns False for what the dupefilter drops (``dupefilter/filtered``); the
  stats ``scheduler/enqueued/kafka`` (written to the frontier), ``scheduler/enqueued/memory``
  (queued here), ``scheduler/dequeued/kafka`` (new URLs handed to the downloader) and
  ``scheduler/dequeued/memory``; the time spent waiting on the stages in ``crawl_dedup/*``
  (:mod:`streams.integrations.pacing`).

:class:`FetchedPages` writes every response to ``fetched-pages`` (status, headers, body,
``fetched_at``) for the page and revisit stages; with ``CRAWL_DEDUP_SKIP_DUPLICATES`` it waits up
to ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` for the page stage's verdict and never runs a duplicate's
callback: no items, no links from it. The wait holds nothing else: the downloader and the other
pages' callbacks go on meanwhile, up to ``CRAWL_DEDUP_BUFFER`` new URLs in flight.

Restarts (:mod:`streams.integrations.offsets`): a new URL's offset counts as done once its response
is written and the requests its callback yielded are written to the frontier, or fetched here
(a request fetched only here holds its source's offset until it is done), or once its fetch
failed. A partition's committed offset is its lowest offset still in flight, and the offsets done
past it travel in the commit's metadata, so a restarted process fetches again only what was in
flight when the last one stopped: at most ``CRAWL_DEDUP_BUFFER``. A spider closing while pages wait
for their verdicts does not wait for them (:meth:`~streams.integrations.verdicts.Verdicts.abandon`):
their offsets stay in flight, and the next run fetches them again.

A crawl (:mod:`streams.integrations.lifecycle`): by default a run resumes the crawl its stages know
(the unnamed one, or ``CRAWL_DEDUP_CRAWL_ID``'s): URLs seen before are not fetched again, and the
log says how many start URLs were seen before the run and how to start afresh: a new
``CRAWL_DEDUP_CRAWL_ID``, which the URL stage keeps a seen-set of its own for, while it serves
other crawls. (scrapy-redis's ``SCHEDULER_PERSIST=True`` is the default here; its
``SCHEDULER_FLUSH_ON_START`` is a new crawl id.)

Settings (Scrapy's own style; defaults in brackets): ``CRAWL_DEDUP_BOOTSTRAP_SERVERS``
[``KAFKA_BOOTSTRAP_SERVERS``, else 127.0.0.1:19092], ``CRAWL_DEDUP_KAFKA`` (librdkafka settings
passed through: SASL, TLS) [{}], ``CRAWL_DEDUP_TOPIC_PREFIX`` [crawl.], ``CRAWL_DEDUP_CRAWL_ID``
(the crawl's name: URLs are new once per name; every process of a crawl the same) [none: the
stages' unnamed crawl], ``CRAWL_DEDUP_GROUP`` [<prefix>scrapy.<spider name>, then .<crawl id> if
any], ``CRAWL_DEDUP_APP_ID`` (the stages' ``app_id``) [crawl-dedup],
``CRAWL_DEDUP_SKIP_DUPLICATES`` [False], ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` [30],
``CRAWL_DEDUP_IDLE_CLOSE_S`` (close the spider once it had nothing to do this long and the whole
crawl is drained twice in a row: every frontier record written before decided by the URL stage, no
new URL of the crawl left or in flight in any process; 0: run until stopped) [0],
``CRAWL_DEDUP_BUFFER`` (new URLs taken and not yet done, at most: what a crash fetches again)
[32 x CONCURRENT_REQUESTS],
``CRAWL_DEDUP_PROCESS_ID`` (a stable id per process: static group membership, so a restarted
process takes its partitions back at once instead of after the dead one's session times out)
[none], ``CRAWL_DEDUP_REQUEST_CLASSES`` (Request subclasses of the project allowed to travel, by
import path, besides Scrapy's own) [none], ``CRAWL_DEDUP_REVISIT`` (fetch again what the revisit
stage schedules, with its conditional headers; :mod:`streams.integrations.refetches`) [False],
``CRAWL_DEDUP_REVISIT_AHEAD_S`` (also what comes due within this long of the start, once) [0].
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import Scheduler as ScrapyScheduler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future

from streams.integrations.hub import Hub, hub_of
from streams.integrations.lineage import LOCAL_META, PARENT_META, lineage
from streams.integrations.refetches import REVISIT_META
from streams.integrations.requests import Unserializable
from streams.integrations.verdicts import ABANDONED, Verdict

log = logging.getLogger(__name__)


class Scheduler(ScrapyScheduler):
    """Scrapy's default scheduler over the frontier and new-urls topics (see the module docstring)."""

    hub: Hub | None = None
    _unserializable_logged: set[str]

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        scheduler = super().from_crawler(crawler)
        scheduler.dqdir = None  # what outlives a process is in Kafka, not in JOBDIR's disk queues
        scheduler._unserializable_logged = set()
        return scheduler

    def open(self, spider: Spider) -> Any:
        opened = super().open(spider)
        assert self.crawler is not None
        self.hub = Hub(self.crawler, spider, self)
        self.crawler._crawl_dedup_hub = self.hub  # type: ignore[attr-defined]
        self.crawler.signals.connect(self._idle, signal=signals.spider_idle)
        return opened

    def close(self, reason: str) -> Any:
        if self.hub is not None:
            self.hub.close()
        return super().close(reason)

    def _idle(self, spider: Spider) -> None:
        """Other processes and the stages may still send URLs: the hub closes the spider itself,
        once the whole crawl is drained (:mod:`streams.integrations.lifecycle`)."""
        raise DontCloseSpider

    def enqueue_request(self, request: Request) -> bool:
        hub = self._hub()
        if hub.taking:  # a new URL from new-urls, on its way in: this process's dupefilter learns it
            self.df.request_seen(request)
            hub.queue_taken(request)
            self.mqs.push(request)
            return True
        source = lineage(request)
        if REVISIT_META in request.meta or (source is not None and source.url == request.url):
            return self._keep(request)  # a revisit's re-fetch; a retry (dont_filter, as Scrapy's)
        parent = request.meta.pop(PARENT_META, None) if source is None else None
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            hub.done_with(source)  # a redirect to a URL this process has seen: its source is done
            return False
        starting = source is None and request.meta.get("is_start_request")
        start = hub.lifecycle.start_token(request.url) if starting else None
        if request.method == "GET" and not request.dont_filter:
            try:
                hub.discovered(request, start)
            except Unserializable as error:
                self._log_unserializable(request, error)
            else:
                self._count("enqueued", "kafka")
                hub.done_with(source)  # a redirect's target went to the URL stage: its source is done
                return True
        if request.method == "GET":
            hub.noted(request, start)
        if source is not None:
            hub.continued(request, source)
        elif parent is not None:
            hub.hold(request, parent)
        return self._keep(request)

    def next_request(self) -> Request | None:
        hub = self._hub()
        while (request := self.mqs.pop()) is not None:
            if hub.handing_over(request):
                self._count("dequeued", "memory" if LOCAL_META in request.meta else "kafka")
                return request
        return None

    def _keep(self, request: Request) -> bool:
        request.meta[LOCAL_META] = True
        self.mqs.push(request)
        self._count("enqueued", "memory")
        return True

    def _count(self, what: str, where: str) -> None:
        assert self.stats is not None
        self.stats.inc_value(f"scheduler/{what}/{where}")
        self.stats.inc_value(f"scheduler/{what}")

    def _log_unserializable(self, request: Request, error: Unserializable) -> None:
        assert self.stats is not None
        self.stats.inc_value("scheduler/unserializable")
        if error.field in self._unserializable_logged and not self.logunser:
            return
        self._unserializable_logged.add(error.field)
        log.error("crawl-dedup: %(request)s cannot travel through Kafka: %(field)s %(reason)s. It is fetched "
                  "by this process, deduplicated by its dupefilter only; more requests with this field are "
                  "counted in scheduler/unserializable (SCHEDULER_DEBUG = True logs each)",
                  {"request": request, "field": error.field, "reason": error.reason},
                  extra={"spider": self.spider})

    def _hub(self) -> Hub:
        assert self.hub is not None
        return self.hub


class FetchedPages:
    """Spider middleware (before HttpErrorMiddleware, so that error statuses are written too): every
    response to fetched-pages; a duplicate's callback never run when asked; its URL done once the
    spider's output for it is scheduled. (The optional ``spider`` arguments: older Scrapy releases
    pass them.)"""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> FetchedPages:
        return cls(crawler)

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        """The response to fetched-pages; the request's own errback back (its wrapper saw failed
        fetches: from here on, every path ends in process_spider_output or _exception)."""
        assert response.request is not None
        hub = hub_of(self.crawler)
        hub.fetched(response.request, response)
        hub.unwrap(response.request)

    async def process_spider_output(self, response: Response, result: AsyncIterator[Any],
                                    spider: Spider | None = None) -> AsyncIterator[Any]:
        hub = hub_of(self.crawler)
        request = response.request
        assert request is not None
        done = hub.finishing(request)  # taken now: a callback may yield its own request again
        verdict = None
        try:
            if hub.settings.skip_duplicates:
                verdict = await self._verdict(hub, request.url)
                if verdict is ABANDONED or self._duplicate(hub, verdict, request.url):
                    return
            async for output in result:
                if isinstance(output, Request):
                    hub.adopt(output, request)
                yield output
        finally:
            if verdict is not ABANDONED:  # an abandoned page stays in flight: fetched again next run
                done()

    @staticmethod
    async def _verdict(hub: Hub, url: str) -> Verdict | None:
        verdicts = hub.verdicts
        if verdicts is None or not verdicts.judged(url):
            return None  # not a page the page stage judges (an error status let through)
        began = time.monotonic()
        verdict = await maybe_deferred_to_future(verdicts.verdict(url))
        hub.pacing.verdict_wait.add(time.monotonic() - began)
        return verdict

    @staticmethod
    def _duplicate(hub: Hub, verdict: Verdict | None, url: str) -> bool:
        """Whether the page stage calls the page a duplicate (a copy of its own earlier fetch, a
        re-fetch after a crash or a revisit, is parsed again)."""
        if verdict is not None and verdict.get("verdict") == "duplicate" \
                and verdict.get("duplicate_of") != url:
            hub.stats.inc_value("crawl_dedup/duplicate_pages_skipped")
            return True
        return False

    def process_spider_exception(self, response: Response, exception: Exception,
                                 spider: Spider | None = None) -> None:
        if response.request is not None:
            hub_of(self.crawler).finished(response.request)

    def process_start_requests(self, start_requests: Iterable[Any], spider: Spider) -> Iterator[Any]:
        """Scrapy before 2.13: mark the start requests as its StartSpiderMiddleware does since."""
        for item in start_requests:
            if isinstance(item, Request):
                item.meta.setdefault("is_start_request", True)
            yield item

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item in start:
            yield item
