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
from collections import deque
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from twisted.internet.defer import Deferred, succeed

from streams.integrations.pacing import Measure
from streams.integrations.settings import CrawlSettings

Verdict = dict[str, Any]


class Verdicts:
    def __init__(self, settings: CrawlSettings, stats: Any) -> None:
        self._timeout_s = settings.verdict_timeout_s
        self._stats = stats
        self.read_lag = Measure(stats, "verdict_read")
        self._kept: dict[str, Verdict] = {}  # come before their page asked
        self._awaiting: set[str] = set()  # pages fetched whose verdict is to come
        self._waiting: dict[str, Deferred[Verdict | None]] = {}
        self._deadlines: deque[tuple[float, str, Deferred[Verdict | None]]] = deque()
        topic = settings.topics.page_verdicts
        self.reader = Consumer(settings.kafka.consumer(f"{settings.group}.verdicts"))
        count = len(self.reader.list_topics(topic, timeout=30).topics[topic].partitions)
        self.reader.assign([TopicPartition(topic, partition, OFFSET_END) for partition in range(count)])

    def expect(self, url: str) -> None:
        """A page the page stage will judge was fetched (written to fetched-pages)."""
        self._awaiting.add(url)

    def judged(self, url: str) -> bool:
        return url in self._awaiting

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def verdict(self, url: str) -> Deferred[Verdict | None]:
        """The verdict on ``url`` when it comes (None: not a page the stage judges, or too late)."""
        if url not in self._awaiting:
            return succeed(None)
        if url in self._kept:
            self._awaiting.discard(url)
            return succeed(self._kept.pop(url))
        waiting: Deferred[Verdict | None] = Deferred()
        self._waiting[url] = waiting
        self._deadlines.append((time.monotonic() + self._timeout_s, url, waiting))

        def done(verdict: Verdict | None) -> Verdict | None:
            self._awaiting.discard(url)
            return verdict

        return waiting.addCallback(done)

    def turn(self, now: float) -> None:
        """Read what came; fire the waits it answers, and those past their deadline (in order)."""
        for message in self.reader.consume(1000, timeout=0):
            if message.error() is not None:
                continue
            verdict = orjson.loads(message.value() or b"{}")
            url = verdict.get("url")
            if url in self._awaiting:  # how long since the page stage wrote it (wall clocks)
                self.read_lag.add(max(0.0, time.time() - message.timestamp()[1] / 1000))
            waiting = self._waiting.pop(url, None)
            if waiting is not None:
                waiting.callback(verdict)
            elif url in self._awaiting:
                self._kept[url] = verdict
        while self._deadlines and self._deadlines[0][0] <= now:
            _, url, waiting = self._deadlines.popleft()
            if self._waiting.get(url) is waiting:
                del self._waiting[url]
                self._stats.inc_value("crawl_dedup/verdict_timeouts")
                waiting.callback(None)

    def close(self) -> None:
        self.read_lag.close()
        self.reader.close()
