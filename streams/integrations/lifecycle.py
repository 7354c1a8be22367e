"""When a Scrapy process on the stages closes its spider, and what it says of its start requests.

Closing (``CRAWL_DEDUP_IDLE_CLOSE_S``): other processes and the stages may still send new URLs, so
an idle spider (Scrapy's engine idle: nothing queued, downloading or in a callback, every start
request handled) closes only once it has been idle that long and two rounds in a row found the
crawl drained (:meth:`~streams.integrations.watch.CrawlWatch.drained_round`), with no activity
between them. The rounds run in a worker thread and are checked from the hub's loop, so the spider
closes within a fraction of a second of the crawl's end, not at the engine's next 5 s heartbeat.

Start requests: each is written with a token naming the process (its instance, also in its
consumer's ``client.id`` with its start time); once none came for :data:`START_QUIET_S`, a round
reads which start URLs came back as new URLs for a start request of a process of this run: this
one, or one in the crawl's consumer group now (the processes of a run start together and all make
the same start requests: the first one's is new, the others' are not, and none was seen before)
(:meth:`~streams.integrations.watch.CrawlWatch.seen_starts`). The others the URL stage had seen
before this run, so it resumes an earlier crawl, which the log says with how to start afresh (a
new ``CRAWL_DEDUP_CRAWL_ID``) and the stats count (``crawl_dedup/start_urls_seen`` of
``crawl_dedup/start_urls_checked``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from confluent_kafka import Consumer, Producer
from scrapy import Spider
from scrapy.crawler import Crawler
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from streams.integrations.settings import CrawlSettings
from streams.integrations.watch import CrawlWatch, Instance

START_QUIET_S = 1.0
ROUND_PAUSE_S = 0.25
log = logging.getLogger(__name__)


class Process(Protocol):
    """What the lifecycle needs of the process's hub (:class:`~streams.integrations.hub.Hub`)."""

    instance: Instance
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
        self._next_round_s = 0.0
        self._closing = False
        self._count = 0
        self._tokens: dict[str, str] = {}  # token -> URL of a start request being checked
        self._last_start_s = 0.0

    def start_token(self, url: str) -> str:
        """A token for a start request about to be written: ``<instance>:<count>``."""
        self._count += 1
        token = f"{self.hub.instance.name}:{self._count}"
        self._tokens[token] = url
        self._last_start_s = time.monotonic()
        return token

    def turn(self, now: float) -> None:
        if self._tokens and not self._busy and now - self._last_start_s >= START_QUIET_S:
            self._check_starts()
        self._idle(now)

    def close(self) -> None:
        """A round under way gives up at once (the reactor's thread pool waits for it at shutdown)
        and keeps its clients."""
        if self._watch is not None:
            self._watch.stopping.set()
            if not self._busy:
                self._watch.close()

    # -- start requests -------------------------------------------------------------------------

    def _check_starts(self) -> None:
        tokens, self._tokens = self._tokens, {}
        self.hub.producer.flush(30)  # every start record in the frontier before the stage is asked
        instance = self.hub.instance
        urls = set(tokens.values())
        self._run(lambda watch: watch.seen_starts(urls, instance)).addCallback(self._told, len(urls))

    def _told(self, seen: set[str] | None, total: int) -> None:
        crawl = repr(self.hub.settings.crawl_id) if self.hub.settings.crawl_id else "the unnamed crawl"
        if seen is None:
            if self._watch is not None and self._watch.stopping.is_set():
                return  # closing: the check gave up
            log.warning("crawl-dedup: the URL stage did not decide this process's %d start URLs in time; "
                        "whether they were seen before is not known", total)
            return
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
        if now - self.last_busy_s < idle_close_s or not hub.revisits_read or self._busy or self._tokens \
                or now < self._next_round_s:
            return
        mark = self.last_busy_s
        self._run(lambda watch: watch.drained_round()).addCallback(self._round, mark, now)

    def _round(self, drained: bool | None, mark: float, began_s: float) -> None:
        """A drained round is confirmed at once; after one that was not, the next waits: an idle
        process whose crawl goes on elsewhere does not read the topics back to back."""
        now = time.monotonic()
        self._rounds_s.append(now - began_s)
        if not drained or mark != self.last_busy_s:
            self._drained_rounds = 0
            self._next_round_s = now + max(ROUND_PAUSE_S, now - began_s)
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
