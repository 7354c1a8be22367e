"""When a Scrapy process on the stages closes its spider, and what it says of its start requests.

Closing (``CRAWL_DEDUP_IDLE_CLOSE_S``): other processes and the stages may still send new URLs, so
an idle spider (Scrapy's engine idle: nothing queued, downloading or in a callback, every start
request handled) closes only once it has been idle that long and two rounds in a row found the
crawl drained (:meth:`~streams.integrations.watch.CrawlWatch.drained_round`), with no activity
between them. The rounds run in a worker thread and are checked from the hub's loop, so the spider
closes within a fraction of a second of the crawl's end, not at the engine's next 5 s heartbeat.

Start requests: each is written with a token; once none came for :data:`START_QUIET_S`, a round
reads which came back as new URLs (:meth:`~streams.integrations.watch.CrawlWatch.seen_starts`).
The others the URL stage had seen before, so this run resumes an earlier crawl, which the log says
with how to start afresh (a new ``CRAWL_DEDUP_CRAWL_ID``) and the stats count
(``crawl_dedup/start_urls_seen`` of ``crawl_dedup/start_urls_checked``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from confluent_kafka import Consumer, Producer, TopicPartition
from scrapy import Spider
from scrapy.crawler import Crawler
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from streams.integrations.settings import CrawlSettings
from streams.integrations.watch import CrawlWatch

START_QUIET_S = 1.0
log = logging.getLogger(__name__)


class Process(Protocol):
    """What the lifecycle needs of the process's hub (:class:`~streams.integrations.hub.Hub`)."""

    settings: CrawlSettings
    crawler: Crawler
    spider: Spider
    stats: Any
    intake: Consumer
    producer: Producer

    @property
    def revisits_read(self) -> bool: ...

    def busy(self) -> bool: ...


class Lifecycle:
    def __init__(self, hub: Process) -> None:
        self.hub = hub
        self.last_busy_s = time.monotonic()
        self._watch: CrawlWatch | None = None
        self._busy = False  # a round under way in the worker thread
        self._drained_rounds = 0
        self._rounds_s: list[float] = []
        self._closing = False
        self._instance = uuid.uuid4().hex[:12]
        self._count = 0
        self._tokens: dict[str, str] = {}  # token -> URL of a start request being checked
        self._before: dict[int, int] | None = None  # new-urls' ends before the first start request
        self._last_start_s = 0.0

    def start_token(self, url: str) -> str:
        """A token for a start request about to be written (the first of a batch notes where
        new-urls ends first: what the URL stage emits for the batch comes after)."""
        if self._before is None:
            self._before = self._new_url_ends()
        self._count += 1
        token = f"{self._instance}:{self._count}"
        self._tokens[token] = url
        self._last_start_s = time.monotonic()
        return token

    def turn(self, now: float) -> None:
        if self._tokens and not self._busy and now - self._last_start_s >= START_QUIET_S:
            self._check_starts()
        self._idle(now)

    def close(self) -> None:
        if self._watch is not None and not self._busy:  # a round under way keeps its clients
            self._watch.close()

    # -- start requests -------------------------------------------------------------------------

    def _new_url_ends(self) -> dict[int, int]:
        intake, topic = self.hub.intake, self.hub.settings.topics.new_urls
        found = intake.list_topics(timeout=30).topics.get(topic)
        partitions = found.partitions if found is not None else {}
        return {partition: intake.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
                for partition in partitions}

    def _check_starts(self) -> None:
        tokens, before = self._tokens, self._before or {}
        self._tokens, self._before = {}, None
        self.hub.producer.flush(30)  # every start record in the frontier before the stage is asked
        self._run(lambda watch: watch.seen_starts(before, set(tokens))).addCallback(self._told, tokens)

    def _told(self, unanswered: set[str] | None, tokens: dict[str, str]) -> None:
        """A start URL was seen before when none of its requests came back new (a URL asked twice,
        as dont_filter start requests may be, comes back once)."""
        crawl = repr(self.hub.settings.crawl_id) if self.hub.settings.crawl_id else "the unnamed crawl"
        urls = set(tokens.values())
        if unanswered is None:
            log.warning("crawl-dedup: the URL stage did not decide this process's %d start URLs in time; "
                        "whether they were seen before is not known", len(urls))
            return
        seen = urls - {url for token, url in tokens.items() if token not in unanswered}
        total = len(urls)
        self.hub.stats.inc_value("crawl_dedup/start_urls_checked", total)
        self.hub.stats.inc_value("crawl_dedup/start_urls_seen", len(seen))
        if not seen:
            log.info("crawl-dedup: all %d start URLs are new to the URL stage (%s)", total, crawl)
            return
        example = f"{self.hub.spider.name}-{datetime.now(UTC):%Y%m%d-%H%M}"
        log.log(logging.WARNING if len(seen) == total else logging.INFO,
                "crawl-dedup: %d of %d start URLs were seen before by the URL stage (%s): this run resumes "
                "that crawl and fetches only URLs it has not seen (start requests with dont_filter=True are "
                "fetched all the same). To crawl afresh, give every process of the crawl a new crawl id, "
                "e.g. -s CRAWL_DEDUP_CRAWL_ID=%s", len(seen), total, crawl, example)

    # -- closing ------------------------------------------------------------------------------------

    def _idle(self, now: float) -> None:
        hub = self.hub
        idle_close_s = hub.settings.idle_close_s
        if not idle_close_s or self._closing:
            return
        engine = hub.crawler.engine
        if engine is None or not engine.spider_is_idle() or hub.busy():
            self.last_busy_s = now
            self._drained_rounds = 0
            return
        if now - self.last_busy_s < idle_close_s or not hub.revisits_read or self._busy or self._tokens:
            return
        mark = self.last_busy_s
        self._run(lambda watch: watch.drained_round()).addCallback(self._round, mark, now)

    def _round(self, drained: bool | None, mark: float, began_s: float) -> None:
        self._rounds_s.append(time.monotonic() - began_s)
        if not drained or mark != self.last_busy_s:
            self._drained_rounds = 0
            return
        self._drained_rounds += 1
        if self._drained_rounds >= 2 and not self._closing:
            self._closing = True
            self._close_spider()

    def _close_spider(self) -> None:
        from scrapy.utils.defer import deferred_from_coro

        log.info("crawl-dedup: closing: idle for %.1f s, and the whole crawl found drained twice "
                 "(%d rounds, the last two %.2f s and %.2f s)", time.monotonic() - self.last_busy_s,
                 len(self._rounds_s), *self._rounds_s[-2:])
        engine = self.hub.crawler.engine
        assert engine is not None
        closer = getattr(engine, "close_spider_async", None)  # Scrapy 2.14 and later
        closing = deferred_from_coro(closer(reason="finished")) if closer is not None \
            else engine.close_spider(self.hub.spider, "finished")
        closing.addErrback(lambda failure: log.error("crawl-dedup: closing the spider failed: %s",
                                                     failure.getErrorMessage()))

    # -- the worker thread ------------------------------------------------------------------------

    def _run(self, call: Callable[[CrawlWatch], Any]) -> Deferred[Any]:
        """``call`` on the watch in a worker thread; its result, or None when it failed (logged)."""
        self._busy = True
        if self._watch is None:
            self._watch = CrawlWatch(self.hub.settings)
        watch = self._watch
        running: Deferred[Any] = threads.deferToThread(call, watch)

        def done(result: Any) -> Any:
            self._busy = False
            if isinstance(result, Failure):
                log.warning("crawl-dedup: reading where the crawl stands failed: %s",
                            result.getErrorMessage())
                return None
            return result

        return running.addBoth(done)
