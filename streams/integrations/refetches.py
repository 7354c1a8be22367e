"""The Kafka side of revisits for a Scrapy process (``CRAWL_DEDUP_REVISIT``): the revisit stage's
``revisit-updates`` read in a consumer group of the crawl's own, kept in a
:class:`~streams.integrations.revisits.RevisitSchedule`, and each update that comes due fetched
again (with its conditional headers, ``dont_filter``: a re-fetch is not a new URL). An update is
done once superseded or once its re-fetch is (:class:`~streams.integrations.offsets.Offsets`, as for
new URLs: a restarted process reads again the updates still waiting and the re-fetches in flight).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from scrapy import Request
from scrapy.crawler import Crawler

from streams.integrations.offsets import Offsets, committed_at_assignment
from streams.integrations.revisits import RevisitSchedule
from streams.integrations.settings import CrawlSettings

REVISIT_META = "crawl_dedup_revisit"  # (partition, offset) of the revisit update a re-fetch stands for


class Refetches:
    def __init__(self, settings: CrawlSettings, crawler: Crawler, failing: Callable[[Any], Any],
                 commit: Callable[[], None]) -> None:
        self.crawler = crawler
        self.topic = settings.topics.revisit_updates
        self.offsets = Offsets()
        self.schedule = RevisitSchedule(time.time(), settings.revisit_ahead_s)
        self.read_once = False  # caught up once: a closing spider has seen what is due
        self._failing = failing
        self._commit_all = commit
        self._refetching: set[tuple[int, int]] = set()  # updates whose re-fetch is under way
        self.reader = Consumer(settings.kafka.consumer(f"{settings.group}.revisit"))
        self.reader.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                              on_lost=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.offsets.assigned_at(committed_at_assignment(consumer, partitions))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self.schedule.drop(gone)
        for partition in gone:  # re-fetches under way finish here; updates not yet due go back
            waiting = self.offsets.in_flight.get(partition, set())
            self.offsets.release(partition, {offset for offset in waiting
                                             if (partition, offset) not in self._refetching})
        self._commit_all()
        for partition in gone:
            self.offsets.revoked(partition)

    def turn(self) -> bool:
        """Read updates; schedule the re-fetches that are due. Whether offsets changed."""
        messages = self.reader.consume(1000, timeout=0)
        if not messages and self.reader.assignment():
            self.read_once = True
        changed = False
        for message in messages:
            partition, offset = message.partition() or 0, message.offset() or 0
            if message.error() is not None or not self.offsets.take(partition, offset):
                continue
            update = orjson.loads(message.value() or b"{}")
            superseded = self.schedule.add(update, (partition, offset), message.timestamp()[1] / 1000)
            if superseded is not None:
                self.offsets.finish(*superseded)
            changed = True
        assert self.crawler.engine is not None
        for refetch in self.schedule.due(time.time()):
            request = Request(refetch.url, headers=refetch.headers, dont_filter=True,
                              meta={REVISIT_META: refetch.position})
            request.errback = self._failing(None)
            self._refetching.add(refetch.position)
            self.crawler.engine.crawl(request)
        return changed

    def finish(self, position: list[int]) -> None:
        self.offsets.finish(position[0], position[1])
        self._refetching.discard((position[0], position[1]))

    def commit(self) -> None:
        """Commit what is done (the pages it stands for are written: the caller flushed)."""
        commits = self.offsets.commits(self.topic)
        if commits:
            self.reader.commit(offsets=commits, asynchronous=False)
            self.offsets.committed()

    def close(self) -> None:
        self.reader.close()
