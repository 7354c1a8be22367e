"""Scrapy on the stage's topics (``pip install crawl-dedup[scrapy]``): a scheduler and a middleware.

Two settings switch a Scrapy project over, as scrapy-redis's ``SCHEDULER`` and ``DUPEFILTER_CLASS``
do::

    SCHEDULER = "streams.integrations.scrapy.Scheduler"
    DOWNLOADER_MIDDLEWARES = {"streams.integrations.scrapy.FetchedPages": 950}

- :class:`Scheduler`: ``enqueue_request`` writes a ``frontier_url`` record (the URL, ``source_url``
  from the Referer, ``depth``, and the request's callback, priority and JSON-safe meta under
  ``scrapy``); the URL stage emits each new URL once to ``new-urls``, keyed by host. Every Scrapy
  process of a crawl reads ``new-urls`` in one consumer group (``CRAWL_DEDUP_GROUP``), so each new
  URL is fetched by one process, its canonical form, and a host's URLs by the process owning its
  partition (Scrapy's per-host politeness holds within each process). Requests other than GET are
  not URL-deduplicated: they are scheduled locally, as are re-fetches the crawl asks for itself.
- :class:`FetchedPages` writes every response to ``fetched-pages`` (status, headers, body,
  ``fetched_at``) for the page and revisit stages; with ``CRAWL_DEDUP_SKIP_DUPLICATES`` it waits up
  to ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` for the page stage's verdict and drops a duplicate before the
  spider parses it.

Restarts (:class:`Offsets`): a new URL's offset counts as done once its response is written (or its
fetch failed). A partition's committed offset is its lowest offset still in flight, and the offsets
done past it travel in the commit's metadata, so a restarted process skips them: it fetches again
only what was in flight when the last one stopped.

Settings (Scrapy's own style; defaults in brackets): ``CRAWL_DEDUP_BOOTSTRAP_SERVERS``
[``KAFKA_BOOTSTRAP_SERVERS``, else 127.0.0.1:19092], ``CRAWL_DEDUP_KAFKA`` (librdkafka settings
passed through: SASL, TLS) [{}], ``CRAWL_DEDUP_TOPIC_PREFIX`` [crawl.], ``CRAWL_DEDUP_GROUP``
[scrapy.<spider name>], ``CRAWL_DEDUP_SKIP_DUPLICATES`` [False], ``CRAWL_DEDUP_VERDICT_TIMEOUT_S``
[30], ``CRAWL_DEDUP_IDLE_CLOSE_S`` (close the spider after this long with nothing to fetch; 0: run
until stopped) [0], ``CRAWL_DEDUP_BUFFER`` (new URLs taken ahead of the downloader)
[2 x CONCURRENT_REQUESTS].
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, Message, Producer, TopicPartition
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.http import Response
from scrapy.utils.request import request_from_dict
from twisted.internet import task

from streams import config
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics

POLL_S = 0.1
METADATA_BYTES = 3800  # offset.metadata.max.bytes is 4,096 by default
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

    @classmethod
    def from_crawler(cls, crawler: Crawler, spider_name: str) -> CrawlSettings:
        get = crawler.settings
        bootstrap = (get.get("CRAWL_DEDUP_BOOTSTRAP_SERVERS") or config.bootstrap_servers()
                     or "127.0.0.1:19092")
        return cls(KafkaConfig(bootstrap, dict(get.getdict("CRAWL_DEDUP_KAFKA"))),
                   Topics(get.get("CRAWL_DEDUP_TOPIC_PREFIX", "crawl.")),
                   get.get("CRAWL_DEDUP_GROUP") or f"scrapy.{spider_name}",
                   get.getbool("CRAWL_DEDUP_SKIP_DUPLICATES"),
                   get.getfloat("CRAWL_DEDUP_VERDICT_TIMEOUT_S", 30.0),
                   get.getfloat("CRAWL_DEDUP_IDLE_CLOSE_S", 0.0),
                   get.getint("CRAWL_DEDUP_BUFFER") or 2 * get.getint("CONCURRENT_REQUESTS", 16))


class Offsets:
    """Which new-urls offsets are taken, in flight and done, per partition; what to commit."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}  # partition -> next offset not yet seen
        self.in_flight: dict[int, set[int]] = {}
        self.done: dict[int, set[int]] = {}  # done past the lowest one in flight

    def assigned(self, partition: int, committed: int, metadata: str | None) -> None:
        self.next[partition] = max(committed, 0)
        self.in_flight[partition] = set()
        self.done[partition] = {committed + int(delta) for delta in (metadata or "").split(",") if delta}

    def revoked(self, partition: int) -> None:
        for table in (self.next, self.in_flight, self.done):
            table.pop(partition, None)

    def release(self, partition: int, dropped: set[int]) -> None:
        """The partition goes to another process: the offsets ``dropped`` here are for it to fetch;
        the rest in flight this process fetches still, so they count as done (the other skips them)."""
        in_flight = self.in_flight.get(partition, set())
        self.done.setdefault(partition, set()).update(in_flight - dropped)
        self.in_flight[partition] = in_flight & dropped

    def take(self, partition: int, offset: int) -> bool:
        """Whether to fetch this record: False for one done before a restart."""
        self.next[partition] = offset + 1
        if offset in self.done.get(partition, ()):
            return False
        self.in_flight.setdefault(partition, set()).add(offset)
        return True

    def finish(self, partition: int, offset: int) -> None:
        if partition in self.in_flight and offset in self.in_flight[partition]:
            self.in_flight[partition].discard(offset)
            self.done[partition].add(offset)

    @property
    def count_in_flight(self) -> int:
        return sum(len(offsets) for offsets in self.in_flight.values())

    def commits(self, topic: str) -> list[TopicPartition]:
        """Each partition's lowest offset in flight (or next), the offsets done past it as metadata."""
        out = []
        for partition, upto in self.next.items():
            low = min(self.in_flight[partition], default=upto)
            self.done[partition] = {offset for offset in self.done[partition] if offset >= low}
            deltas = [str(offset - low) for offset in sorted(self.done[partition])]
            while sum(map(len, deltas)) + len(deltas) > METADATA_BYTES:  # the broker's limit: 4,096
                deltas.pop()  # those beyond are fetched again after a restart
            out.append(TopicPartition(topic, partition, low, metadata=",".join(deltas)))
        return out


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
        self.intake = Consumer(kafka.consumer(self.settings.group, **{"max.poll.interval.ms": 3_600_000}))
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
        if time.monotonic() > self._commit_due_s:
            self._commit()

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
        self.last_new_s = time.monotonic()
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(request)

    def _commit(self) -> None:
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
        taken = request.meta.get(_META)
        if taken is not None:
            self.offsets.finish(*taken)

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
        """Other processes and the stage may still send URLs: stay open unless idle long enough."""
        assert self.hub is not None
        idle_close_s = self.hub.settings.idle_close_s
        if not idle_close_s or time.monotonic() - self.hub.last_new_s < idle_close_s:
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
    """Downloader middleware: every response to fetched-pages; duplicates dropped when asked."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchedPages:
        return cls(crawler)

    async def process_response(self, request: Request, response: Response) -> Response:
        hub = hub_of(self.crawler)
        hub.fetched(request, response)
        verdict = await hub.verdict(request.url) if hub.settings.skip_duplicates else None
        hub.finished(request)
        if verdict is not None and verdict.get("verdict") == "duplicate":
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("crawl_dedup/duplicate_pages_skipped")
            raise IgnoreRequest(f"duplicate of {verdict.get('duplicate_of')}")
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        hub_of(self.crawler).finished(request)

