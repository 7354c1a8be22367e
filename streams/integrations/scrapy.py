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
one's session times out) [none].
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, Message, Producer, TopicPartition
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.utils.request import request_from_dict
from twisted.internet import task
from twisted.python.failure import Failure

from streams import config
from streams.integrations.offsets import Offsets
from streams.runtime.generations import current_topics
from streams.runtime.kafka_io import KafkaConfig, pending_records
from streams.topics import Topics

POLL_S = 0.1
_META = "crawl_dedup"  # (partition, offset) of a request taken from new-urls
_LOCAL = "crawl_dedup_local"  # scheduled here, not through the URL stage
_JSON_SAFE = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class CrawlSettings:
    kafka: KafkaConfig
    topics: Topics
    group: str
    skip_duplicates: bool
    verdict_timeout_s: float
    idle_close_s: float
    buffer: int
    process_id: str | None
    app_id: str  # the stages' application id: where the URL stage's group and shard topic are

    @classmethod
    def from_crawler(cls, crawler: Crawler, spider_name: str) -> CrawlSettings:
        get = crawler.settings
        bootstrap = (get.get("CRAWL_DEDUP_BOOTSTRAP_SERVERS") or config.bootstrap_servers()
                     or "127.0.0.1:19092")
        topics = Topics(get.get("CRAWL_DEDUP_TOPIC_PREFIX", "crawl."))
        return cls(KafkaConfig(bootstrap, dict(get.getdict("CRAWL_DEDUP_KAFKA"))), topics,
                   get.get("CRAWL_DEDUP_GROUP") or f"{topics.prefix}scrapy.{spider_name}",
                   get.getbool("CRAWL_DEDUP_SKIP_DUPLICATES"),
                   get.getfloat("CRAWL_DEDUP_VERDICT_TIMEOUT_S", 30.0),
                   get.getfloat("CRAWL_DEDUP_IDLE_CLOSE_S", 0.0),
                   get.getint("CRAWL_DEDUP_BUFFER") or 2 * get.getint("CONCURRENT_REQUESTS", 16),
                   get.get("CRAWL_DEDUP_PROCESS_ID") or None,
                   get.get("CRAWL_DEDUP_APP_ID") or config.RuntimeSettings().app_id)


def _json_safe(value: Any) -> Any:
    if isinstance(value, _JSON_SAFE):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()
                if isinstance(item, (*_JSON_SAFE, list, tuple, dict))}
    return None


class Hub:
    """One per crawler: the Kafka clients the scheduler and the middleware share."""

    def __init__(self, crawler: Crawler, spider: Spider) -> None:
        self.crawler = crawler
        self.spider = spider
        self.settings = CrawlSettings.from_crawler(crawler, spider.name)
        kafka, topics = self.settings.kafka, self.settings.topics
        self.producer = Producer(kafka.producer(**{"linger.ms": 20}))
        self.offsets = Offsets()
        self.queue: deque[Request] = deque()
        self.verdicts: dict[str, dict[str, Any]] = {}
        self.last_new_s = time.monotonic()
        membership = {} if self.settings.process_id is None else {
            "group.instance.id": self.settings.process_id, "session.timeout.ms": 30_000}
        self.intake = Consumer(kafka.consumer(self.settings.group, **{"max.poll.interval.ms": 3_600_000,
                                                                      **membership}))
        self.intake.subscribe([topics.new_urls], on_assign=self._assigned, on_revoke=self._revoked,
                              on_lost=self._revoked)
        self.verdict_reader: Consumer | None = None
        if self.settings.skip_duplicates:
            self.verdict_reader = Consumer(kafka.consumer(f"{self.settings.group}.verdicts"))
            count = len(self.verdict_reader.list_topics(topics.page_verdicts, timeout=30)
                        .topics[topics.page_verdicts].partitions)
            self.verdict_reader.assign([TopicPartition(topics.page_verdicts, partition, OFFSET_END)
                                        for partition in range(count)])
        self._paused = False
        self._finishing: list[tuple[int, int]] = []
        self._commit_due_s = 0.0
        self._loop = task.LoopingCall(self.poll)
        self._loop.start(POLL_S, now=False)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in consumer.committed(partitions, timeout=30):
            self.offsets.assigned(tp.partition, tp.offset, tp.metadata)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Requests of these partitions not yet handed to the downloader go back to the group; those
        in the downloader are finished here, and committed as done so the next owner skips them (a
        process killed before they finish loses them: the one window where a URL can be lost)."""
        gone = {tp.partition for tp in partitions}
        dropped: dict[int, set[int]] = {partition: set() for partition in gone}
        kept: deque[Request] = deque()
        for request in self.queue:
            taken = request.meta.get(_META)
            if taken is not None and taken[0] in gone:
                dropped[taken[0]].add(taken[1])
            else:
                kept.append(request)
        self.queue = kept
        for partition, offsets in dropped.items():
            self.offsets.release(partition, offsets)
        self._commit()
        for partition in gone:
            self.offsets.revoked(partition)

    # -- the reactor's loop -----------------------------------------------------------------------

    def poll(self) -> None:
        """Take new URLs while there is room, read verdicts, commit what is done (once a second)."""
        full = len(self.queue) + self.offsets.count_in_flight >= self.settings.buffer
        if full != self._paused:
            assignment = self.intake.assignment()
            (self.intake.pause if full else self.intake.resume)(assignment)
            self._paused = full
        for message in self.intake.consume(self.settings.buffer, timeout=0):
            self._take(message)
        if self.verdict_reader is not None:
            for message in self.verdict_reader.consume(1000, timeout=0):
                if message.error() is None:
                    verdict = orjson.loads(message.value() or b"{}")
                    self.verdicts[verdict.get("url", "")] = verdict
        if self._finishing or time.monotonic() > self._commit_due_s:
            self._commit()

    def _settle(self) -> None:
        for partition, offset in self._finishing:
            self.offsets.finish(partition, offset)
        self._finishing = []

    def _take(self, message: Message) -> None:
        if message.error() is not None:  # partition ends; librdkafka retries the rest itself
            return
        partition, offset = message.partition() or 0, message.offset() or 0
        if not self.offsets.take(partition, offset):
            return
        record = orjson.loads(message.value() or b"{}")
        wanted = record.get("scrapy") or {}
        request = request_from_dict({**wanted, "url": record["canonical"]}, spider=self.spider)
        request.meta[_META] = (partition, offset)
        request.errback = self._failing(request, request.errback)
        self.last_new_s = time.monotonic()
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(request)

    def _failing(self, request: Request, errback: Any) -> Any:
        """The request's errback, marking it done first (a failed fetch is not tried again)."""

        def failed(failure: Failure) -> Any:
            self.finished(request)
            if errback is None:
                failure.raiseException()  # unhandled, so Scrapy logs the download error as usual
            return errback(failure)

        return failed

    def _commit(self) -> None:
        self._settle()
        self._commit_due_s = time.monotonic() + 1.0
        commits = self.offsets.commits(self.settings.topics.new_urls)
        if commits:
            self.producer.flush(30)  # every page a done offset stands for is written first
            self.intake.commit(offsets=commits, asynchronous=False)

    # -- what the scheduler and the middleware ask --------------------------------------------------

    def discovered(self, request: Request) -> None:
        referer = request.headers.get("Referer")
        wanted = {key: _json_safe(value) for key, value in request.to_dict(spider=self.spider).items()
                  if key in ("callback", "errback", "priority", "cb_kwargs")}
        wanted["meta"] = _json_safe({k: v for k, v in request.meta.items() if not k.startswith("download_")})
        record = {"url": request.url, "source_url": referer.decode("latin-1") if referer else None,
                  "depth": int(request.meta.get("depth", 0)), "discovered_at": _now(), "scrapy": wanted}
        self.producer.produce(self.settings.topics.frontier, orjson.dumps(record), request.url.encode())
        self.producer.poll(0)

    def fetched(self, request: Request, response: Response) -> None:
        headers = {key.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
                   for key, values in response.headers.items()}
        record = {"url": request.url, "status": response.status, "headers": headers,
                  "content_type": headers.get("content-type"), "fetched_at": _now(),
                  "body_base64": base64.b64encode(response.body).decode("ascii")}
        self.producer.produce(self.settings.topics.fetched_pages, orjson.dumps(record), request.url.encode())
        self.producer.poll(0)

    def finished(self, request: Request) -> None:
        """Done with ``request``: counted at the next poll, after what its callback yielded was
        scheduled (the scraper schedules a callback's requests in tasks of its own)."""
        taken = request.meta.get(_META)
        if taken is not None:
            self._finishing.append(taken)

    def crawl_drained(self) -> bool:
        """Whether nothing is left anywhere in the crawl: no frontier record the URL stage has not
        decided, none in its shard topic, and every new URL done (requests in flight in any process
        leave their partitions uncommitted). Read in the order records travel, so a record moving
        on during the check is met further on."""
        kafka, topics, app_id = self.settings.kafka, self.settings.topics, self.settings.app_id
        url_stage = topics.group(app_id, "url-dedup")
        shards = current_topics(kafka, topics, app_id, "url-dedup").shards(app_id, "url-dedup")
        for group, topic in ((url_stage, topics.frontier), (url_stage, shards),
                             (self.settings.group, topics.new_urls)):
            found = self.intake.list_topics(topic, timeout=30).topics.get(topic)
            count = len(found.partitions) if found is not None else 0
            if count and pending_records(kafka, group, topic, count, at_most=1):
                return False
        return True

    async def verdict(self, url: str) -> dict[str, Any] | None:
        deadline = time.monotonic() + self.settings.verdict_timeout_s
        while url not in self.verdicts and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        return self.verdicts.pop(url, None)

    def close(self) -> None:
        if self._loop.running:
            self._loop.stop()
        self._commit()
        self.intake.close()
        if self.verdict_reader is not None:
            self.verdict_reader.close()
        self.producer.flush(30)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hub_of(crawler: Crawler) -> Hub:
    hub: Hub | None = getattr(crawler, "_crawl_dedup_hub", None)
    if hub is None:
        raise RuntimeError("streams.integrations.scrapy.FetchedPages needs SCHEDULER = "
                           "'streams.integrations.scrapy.Scheduler'")
    return hub


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
        if not idle_close_s or time.monotonic() - self.hub.last_new_s < idle_close_s:
            raise DontCloseSpider
        drained = self.hub.crawl_drained()
        self._drained_checks = self._drained_checks + 1 if drained else 0
        if self._drained_checks < 2:
            raise DontCloseSpider

    def has_pending_requests(self) -> bool:
        return self.hub is not None and bool(self.hub.queue)

    def enqueue_request(self, request: Request) -> bool:
        assert self.hub is not None
        if _META in request.meta or request.meta.get(_LOCAL) or request.method != "GET":
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
