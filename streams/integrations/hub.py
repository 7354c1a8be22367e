"""The Kafka side of the Scrapy integration, one per crawler: the clients and bookkeeping that
:class:`~streams.integrations.scrapy.Scheduler` and :class:`~streams.integrations.scrapy.FetchedPages`
share (settings and behaviour: :mod:`streams.integrations.scrapy`)."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Message, Producer, TopicPartition
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.request import request_from_dict
from twisted.internet import task
from twisted.python.failure import Failure

from streams import config
from streams.integrations.offsets import Offsets
from streams.integrations.revisits import RevisitSchedule
from streams.runtime.api import KafkaConfig, current_topics, pending_records
from streams.topics import Topics

POLL_S = 0.1
log = logging.getLogger(__name__)
TAKEN_META = "crawl_dedup"  # (partition, offset) of a request taken from new-urls
LOCAL_META = "crawl_dedup_local"  # scheduled here, not through the URL stage
REVISIT_META = "crawl_dedup_revisit"  # (partition, offset) of the revisit update a re-fetch stands for
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
    revisit: bool
    revisit_ahead_s: float

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
                   get.get("CRAWL_DEDUP_APP_ID") or config.RuntimeSettings().app_id,
                   get.getbool("CRAWL_DEDUP_REVISIT"), get.getfloat("CRAWL_DEDUP_REVISIT_AHEAD_S", 0.0))


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
        self.verdicts: dict[str, dict[str, Any]] = {}  # only for pages this process waits on
        self._awaiting: set[str] = set()
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
        self.revisits = RevisitSchedule(time.time(), self.settings.revisit_ahead_s)
        self.revisit_offsets = Offsets()
        self.revisit_reader: Consumer | None = None
        self.revisits_read = not self.settings.revisit
        if self.settings.revisit:
            self.revisit_reader = Consumer(kafka.consumer(f"{self.settings.group}.revisit"))
            self.revisit_reader.subscribe([topics.revisit_updates], on_assign=self._revisits_assigned,
                                          on_revoke=self._revisits_revoked, on_lost=self._revisits_revoked)
        self._paused = False
        self._closing = False
        self._finishing: list[tuple[int, int]] = []
        self._revisits_finishing: list[tuple[int, int]] = []
        self._refetching: set[tuple[int, int]] = set()  # revisit updates whose re-fetch is under way
        self._commit_due_s = 0.0
        self._loop = task.LoopingCall(self.poll)
        self._loop.start(POLL_S, now=False)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.offsets.assigned_at(consumer.committed(partitions, timeout=30))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Requests of these partitions not yet handed to the downloader go back to the group; those
        in the downloader are finished here, and committed as done so the next owner skips them (a
        process killed before they finish loses them: the one window where a URL can be lost)."""
        gone = {tp.partition for tp in partitions}
        dropped: dict[int, set[int]] = {partition: set() for partition in gone}
        kept: deque[Request] = deque()
        for request in self.queue:
            taken = request.meta.get(TAKEN_META)
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
        """One turn of the reactor's loop; an error is logged, never ends the loop (a commit refused
        during a rebalance is made again at the next turn)."""
        try:
            self._poll()
        except Exception:  # noqa: BLE001 - the loop must go on
            log.exception("crawl-dedup: polling Kafka failed; trying again")

    def _poll(self) -> None:
        """Take new URLs while there is room, read verdicts, commit what is done (once a second)."""
        room = self.settings.buffer - self.offsets.count_in_flight  # the queue's requests count there
        if (room <= 0) != self._paused:
            (self.intake.pause if room <= 0 else self.intake.resume)(self.intake.assignment())
            self._paused = room <= 0
        put_back: dict[int, int] = {}  # partition -> first offset not taken (no room for it)
        for message in self.intake.consume(max(room, 1), timeout=0):
            if message.error() is not None:
                continue  # partition ends; librdkafka retries the rest itself
            if room <= 0 or (message.partition() or 0) in put_back:
                put_back.setdefault(message.partition() or 0, message.offset() or 0)
                continue
            room -= self._take(message)
        for partition, offset in put_back.items():
            self.intake.seek(TopicPartition(self.settings.topics.new_urls, partition, offset))
        if self.verdict_reader is not None:
            for message in self.verdict_reader.consume(1000, timeout=0):
                if message.error() is None:
                    verdict = orjson.loads(message.value() or b"{}")
                    if verdict.get("url") in self._awaiting:
                        self.verdicts[verdict["url"]] = verdict
        if self.revisit_reader is not None:
            self._revisit()
        if self._finishing or self._revisits_finishing or time.monotonic() > self._commit_due_s:
            self._commit()

    def _revisits_assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revisit_offsets.assigned_at(consumer.committed(partitions, timeout=30))

    def _revisits_revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self.revisits.drop(gone)
        for partition in gone:  # re-fetches under way finish here; updates not yet due go back
            waiting = self.revisit_offsets.in_flight.get(partition, set())
            self.revisit_offsets.release(partition, {offset for offset in waiting
                                                     if (partition, offset) not in self._refetching})
        self._commit()
        for partition in gone:
            self.revisit_offsets.revoked(partition)

    def _revisit(self) -> None:
        """Read revisit updates; schedule the re-fetches that are due (conditional, not deduplicated)."""
        assert self.revisit_reader is not None
        messages = self.revisit_reader.consume(1000, timeout=0)
        if not messages and self.revisit_reader.assignment():
            self.revisits_read = True  # caught up once: a closing spider has seen what is due
        for message in messages:
            partition, offset = message.partition() or 0, message.offset() or 0
            if message.error() is not None or not self.revisit_offsets.take(partition, offset):
                continue
            written_s = message.timestamp()[1] / 1000
            update = orjson.loads(message.value() or b"{}")
            superseded = self.revisits.add(update, (partition, offset), written_s)
            if superseded is not None:
                self.revisit_offsets.finish(*superseded)
        assert self.crawler.engine is not None
        for refetch in self.revisits.due(time.time()):
            request = Request(refetch.url, headers=refetch.headers, dont_filter=True,
                              meta={LOCAL_META: True, REVISIT_META: refetch.position})
            request.errback = self._failing(request, None)
            self._refetching.add(refetch.position)
            self.crawler.engine.crawl(request)

    def _settle(self) -> None:
        for partition, offset in self._finishing:
            self.offsets.finish(partition, offset)
        for partition, offset in self._revisits_finishing:
            self.revisit_offsets.finish(partition, offset)
            self._refetching.discard((partition, offset))
        self._finishing, self._revisits_finishing = [], []

    def _take(self, message: Message) -> int:
        """Hand the new URL to the engine; 1, or 0 for one done before a restart."""
        partition, offset = message.partition() or 0, message.offset() or 0
        if not self.offsets.take(partition, offset):
            return 0
        record = orjson.loads(message.value() or b"{}")
        wanted = record.get("scrapy") or {}
        request = request_from_dict({**wanted, "url": record["canonical"]}, spider=self.spider)
        request.meta[TAKEN_META] = (partition, offset)
        request.errback = self._failing(request, request.errback)
        self.last_new_s = time.monotonic()
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(request)
        return 1

    def _failing(self, request: Request, errback: Any) -> Any:
        """The request's errback, marking it done first (a failed fetch is not tried again)."""

        def failed(failure: Failure) -> Any:
            self.finished(request)
            if errback is None:
                failure.raiseException()  # unhandled, so Scrapy logs the download error as usual
            return errback(failure)

        return failed

    def _commit(self) -> None:
        if self._closing:
            return
        self._settle()
        self._commit_due_s = time.monotonic() + 1.0
        commits = self.offsets.commits(self.settings.topics.new_urls)
        revisits = self.revisit_offsets.commits(self.settings.topics.revisit_updates)
        if commits or revisits:
            self.producer.flush(30)  # every page a done offset stands for is written first
        try:
            if commits:
                self.intake.commit(offsets=commits, asynchronous=False)
                self.offsets.committed()
            if revisits and self.revisit_reader is not None:
                self.revisit_reader.commit(offsets=revisits, asynchronous=False)
                self.revisit_offsets.committed()
        except KafkaException as error:  # a rebalance under way: the next turn commits again
            log.warning("crawl-dedup: commit refused (%s); committing again shortly", error)

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
        if self.settings.skip_duplicates and 200 <= response.status < 300:  # the page stage judges these
            self._awaiting.add(request.url)
        self.producer.produce(self.settings.topics.fetched_pages, orjson.dumps(record), request.url.encode())
        self.producer.poll(0)

    def finished(self, request: Request) -> None:
        """Done with ``request``: counted at the next poll, after what its callback yielded was
        scheduled (the scraper schedules a callback's requests in tasks of its own)."""
        taken = request.meta.get(TAKEN_META)
        if taken is not None:
            self._finishing.append(taken)
        revisit = request.meta.get(REVISIT_META)
        if revisit is not None:
            self._revisits_finishing.append(revisit)

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
        if url not in self._awaiting:
            return None  # not a page the page stage judges (an error status let through)
        deadline = time.monotonic() + self.settings.verdict_timeout_s
        try:
            while url not in self.verdicts and time.monotonic() < deadline:
                await asyncio.sleep(POLL_S)
            return self.verdicts.pop(url, None)
        finally:
            self._awaiting.discard(url)

    def close(self) -> None:
        """Commit what is done, then close the clients; their last revocations commit nothing more
        (each would commit both consumers, one of them closed already)."""
        if self._loop.running:
            self._loop.stop()
        self._commit()
        self._closing = True
        for consumer in (self.revisit_reader, self.verdict_reader, self.intake):
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001 - closing: nothing to save any more
                    log.exception("crawl-dedup: closing a consumer failed")
        self.producer.flush(30)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hub_of(crawler: Crawler) -> Hub:
    hub: Hub | None = getattr(crawler, "_crawl_dedup_hub", None)
    if hub is None:
        raise RuntimeError("streams.integrations.scrapy.FetchedPages needs SCHEDULER = "
                           "'streams.integrations.scrapy.Scheduler'")
    return hub
