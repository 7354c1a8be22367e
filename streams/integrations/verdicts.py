"""The page stage's verdicts for the pages a Scrapy process waits on (``CRAWL_DEDUP_SKIP_DUPLICATES``).

Every process reads ``page-verdicts`` from its end when it starts (assigned, no group: each needs
the verdicts of its own pages, whichever partition they are in) and keeps only those of pages it
fetched and waits on. A page waits on a Deferred the reader's turn fires, so a wait holds nothing
but that page's callback; past ``CRAWL_DEDUP_VERDICT_TIMEOUT_S`` it fires with None and the page is
parsed (``crawl_dedup/verdict_timeouts``). ``crawl_dedup/verdict_read*`` measure how long after the
page stage wrote a verdict this process read it: the part of a wait that is not the page stage's.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from twisted.internet.defer import Deferred, succeed

from streams.integrations.pacing import Measure
from streams.integrations.settings import CrawlSettings

Verdict = dict[str, Any]
ABANDONED: Verdict = {"verdict": "abandoned"}  # the process is closing: the page is fetched again next run


class Verdicts:
    """Per URL, the pages fetched and not yet answered in order (a URL fetched twice at once, as
    dont_filter allows, has two verdicts coming, one for each fetch, in the order of the fetches:
    fetched-pages is keyed by URL)."""

    def __init__(self, reader: Consumer, timeout_s: float, stats: Any) -> None:
        self.reader = reader
        self._timeout_s = timeout_s
        self._stats = stats
        self.read_lag = Measure(stats, "verdict_read")
        self._expected: Counter[str] = Counter()  # pages fetched whose verdict is to come
        self._kept: dict[str, deque[Verdict]] = {}  # verdicts come before their page asked
        self._waiting: dict[str, deque[Deferred[Verdict | None]]] = {}
        self._deadlines: deque[tuple[float, str, Deferred[Verdict | None]]] = deque()

    @classmethod
    def reading(cls, settings: CrawlSettings, stats: Any) -> Verdicts:
        """Reading page-verdicts from their end, every partition (assigned: no group to join)."""
        topic = settings.topics.page_verdicts
        reader = Consumer(settings.kafka.consumer(f"{settings.group}.verdicts"))
        count = len(reader.list_topics(topic, timeout=30).topics[topic].partitions)
        reader.assign([TopicPartition(topic, partition, OFFSET_END) for partition in range(count)])
        return cls(reader, settings.verdict_timeout_s, stats)

    def expect(self, url: str) -> None:
        """A page the page stage will judge was fetched (written to fetched-pages)."""
        self._expected[url] += 1

    def judged(self, url: str) -> bool:
        return self._expected[url] > 0

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def verdict(self, url: str) -> Deferred[Verdict | None]:
        """The verdict on ``url`` when it comes (None: not a page the stage judges, or too late)."""
        if not self.judged(url):
            return succeed(None)
        kept = self._kept.get(url)
        if kept:
            self._answered(url)
            verdict = kept.popleft()
            if not kept:
                del self._kept[url]
            return succeed(verdict)
        waiting: Deferred[Verdict | None] = Deferred()
        self._waiting.setdefault(url, deque()).append(waiting)
        self._deadlines.append((time.monotonic() + self._timeout_s, url, waiting))
        return waiting

    def _answered(self, url: str) -> None:
        self._expected[url] -= 1
        if self._expected[url] <= 0:
            del self._expected[url]

    def _fire(self, url: str, waiting: Deferred[Verdict | None], verdict: Verdict | None) -> None:
        queue = self._waiting[url]
        queue.remove(waiting)
        if not queue:
            del self._waiting[url]
        self._answered(url)
        waiting.callback(verdict)

    def turn(self, now: float) -> None:
        """Read what came; fire the waits it answers, and those past their deadline (in order)."""
        for message in self.reader.consume(1000, timeout=0):
            if message.error() is not None:
                continue
            verdict = orjson.loads(message.value() or b"{}")
            url = verdict.get("url")
            if not isinstance(url, str) or not self.judged(url):
                continue  # another process's page
            self.read_lag.add(max(0.0, time.time() - message.timestamp()[1] / 1000))
            if url in self._waiting:
                self._fire(url, self._waiting[url][0], verdict)
            else:
                self._kept.setdefault(url, deque()).append(verdict)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, url, waiting = self._deadlines.popleft()
            if waiting in self._waiting.get(url, ()):
                self._stats.inc_value("crawl_dedup/verdict_timeouts")
                self._fire(url, waiting, None)

    def abandon(self) -> None:
        """The spider closes: every wait ends now with :data:`ABANDONED`, so that closing does not
        wait out the verdicts (the pages' offsets stay in flight: a restart fetches them again)."""
        for url, queue in list(self._waiting.items()):
            for waiting in list(queue):
                self._fire(url, waiting, ABANDONED)

    def close(self) -> None:
        self.read_lag.close()
        self.reader.close()
