"""The Kafka side of the Scrapy integration, one per crawler: the clients and bookkeeping that
:class:`~streams.integrations.scrapy.Scheduler` and :class:`~streams.integrations.scrapy.FetchedPages`
share (settings and behaviour: :mod:`streams.integrations.scrapy`).

Everything here runs in the reactor's thread and never waits on the network there but to commit
(:meth:`Hub.poll`, a few times a second): new URLs and verdicts are read by a loop of the reactor,
and a page waiting for its verdict waits on a Deferred, so the downloader and the other pages'
callbacks go on meanwhile. What needs blocking reads of the whole crawl (is it drained, were the
start requests seen) runs in a worker thread: :mod:`streams.integrations.lifecycle`.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Sized
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response
from twisted.internet import task
from twisted.python.failure import Failure

from streams.integrations.lifecycle import Lifecycle
from streams.integrations.lineage import HELD_META, LOCAL_META, PARENT_META, TAKEN_META, Held, Taken, lineage
from streams.integrations.offsets import Offsets, committed_at_assignment
from streams.integrations.pacing import Pacing
from streams.integrations.pausing import Pausing
from streams.integrations.refetches import REVISIT_META, Refetches
from streams.integrations.requests import PRIVATE, decode, encode
from streams.integrations.settings import CrawlSettings
from streams.integrations.verdicts import Verdicts
from streams.integrations.watch import Instance

POLL_S = 0.01
COMMIT_EVERY_S = 0.25
log = logging.getLogger(__name__)
_WRAPPED = "crawl_dedup_wrapped"  # on an errback wrapper: the errback it wraps


class Hub:
    """One per crawler: the Kafka clients the scheduler and the middleware share."""

    def __init__(self, crawler: Crawler, spider: Spider, queue: Sized) -> None:
        self.crawler = crawler
        self.spider = spider
        self.queue = queue  # the scheduler's queue: requests here, not yet handed to the downloader
        self.settings = CrawlSettings.from_crawler(crawler, spider.name)
        assert crawler.stats is not None
        self.stats = crawler.stats
        kafka, topics = self.settings.kafka, self.settings.topics
        self.producer = Producer(kafka.producer(**{"delivery.report.only.error": True,
                                                    "on_delivery": self._undelivered}))
        self.offsets = Offsets()
        self.queued: dict[int, set[int]] = {}  # new-urls offsets waiting in the scheduler's queue
        self.generation: dict[int, int] = {}  # partition -> how often it was assigned here
        self.taking = False  # a new URL on its way into the scheduler
        self.pacing = Pacing(self.stats)
        membership = {} if self.settings.process_id is None else {
            "group.instance.id": self.settings.process_id, "session.timeout.ms": 30_000}
        self.instance = Instance.new()  # this process, as the others of its run see it
        self.intake = Consumer(kafka.consumer(self.settings.group, **{
            "max.poll.interval.ms": 3_600_000, "client.id": self.instance.client_id, **membership}))
        self.pausing = Pausing(self.intake)
        self.intake.subscribe([topics.new_urls], on_assign=self._assigned, on_revoke=self._revoked,
                              on_lost=self._revoked)
        self.verdicts = Verdicts.reading(self.settings, self.stats) if self.settings.skip_duplicates else None
        self.refetches = Refetches(self.settings, crawler, self.failing, self._commit) \
            if self.settings.revisit else None
        self.lifecycle = Lifecycle(self)
        self._closing = False
        self._finishing: list[tuple[str, list[Any]]] = []
        self._changed = False  # offsets to commit
        self._commit_due_s = 0.0
        self._loop = task.LoopingCall(self.poll)
        self._loop.start(POLL_S, now=False)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("crawl-dedup: reading new-urls partitions %s in group %s",
                 sorted(tp.partition for tp in partitions), self.settings.group)
        self.offsets.assigned_at(committed_at_assignment(consumer, partitions))
        for tp in partitions:
            self.generation[tp.partition] = self.generation.get(tp.partition, 0) + 1
            self.queued[tp.partition] = set()
        self.pausing.assignment_changed()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """New URLs of these partitions still queued go back to the group (the queue skips them
        when it meets them: their generation is gone); those in the downloader are finished here,
        and committed as done so the next owner skips them (a process killed before they finish
        loses them: the one window where a URL can be lost)."""
        gone = {tp.partition for tp in partitions}
        log.info("crawl-dedup: new-urls partitions %s go to another process", sorted(gone))
        for partition in gone:
            self.offsets.release(partition, self.queued.pop(partition, set()))
            self.generation[partition] = self.generation.get(partition, 0) + 1
        self._commit()
        for partition in gone:
            self.offsets.revoked(partition)
        self.pausing.assignment_changed()

    # -- the reactor's loop -----------------------------------------------------------------------

    def poll(self) -> None:
        """One turn of the reactor's loop; an error is logged, never ends the loop (a commit refused
        during a rebalance is made again at the next turn)."""
        try:
            self._poll()
        except Exception:  # noqa: BLE001 - the loop must go on
            log.exception("crawl-dedup: polling Kafka failed; trying again")

    def _poll(self) -> None:
        """Take new URLs while there is room, read verdicts, commit what is done (a few times a second)."""
        now = time.monotonic()
        self.pacing.turn(now, self.crawler, self.pausing.paused, len(self.queue),
                         self.offsets.count_in_flight)
        self._intake()
        if self.verdicts is not None:
            self.verdicts.turn(now)
            if self._spider_closing():
                self.verdicts.abandon()
        if self.refetches is not None and self.refetches.turn():
            self._changed = True
        self._settle()
        if self._changed and now >= self._commit_due_s:
            self._commit()
        self.lifecycle.turn(now)

    def _intake(self) -> None:
        room = self.settings.buffer - self.offsets.count_in_flight  # the queue's requests count there
        self.pausing.hold(room <= 0)
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

    def _take(self, message: Message) -> int:
        """Hand the new URL to the engine; 1, or 0 for one not to fetch here."""
        partition, offset = message.partition() or 0, message.offset() or 0
        try:
            record = orjson.loads(message.value() or b"{}")
            wanted = record.get("scrapy") or {}
        except (orjson.JSONDecodeError, AttributeError):  # not a record the URL stage writes
            log.error("crawl-dedup: new-urls[%d] at %d is not a new_url record; skipped", partition, offset)
            self.offsets.skip(partition, offset)
            return 0
        if (record.get("crawl") or "") != self.settings.crawl_id or (wanted.get(PRIVATE) or {}).get("local"):
            self.offsets.skip(partition, offset)  # another crawl's, or fetched where it was found
            self._changed = True
            return 0
        if not self.offsets.take(partition, offset):
            return 0  # done before a restart
        self._changed = True
        self.pacing.taken(record.get("discovered_at"))
        try:
            request = decode({**wanted, "url": record["canonical"]}, self.spider,
                             self.settings.request_classes)
        except (ValueError, TypeError) as error:
            log.error("crawl-dedup: the new URL %s (new-urls[%d] at %d) cannot be made a request of "
                      "this spider again: %s; it is not fetched", record.get("canonical"), partition, offset,
                      error)
            self.stats.inc_value("crawl_dedup/undecodable")
            self.offsets.finish(partition, offset)
            return 1
        request.meta[TAKEN_META] = Taken(partition, offset, request.url, self.generation.get(partition, 0))
        request.errback = self.failing(request.errback)
        self.taking = True
        try:
            assert self.crawler.engine is not None
            self.crawler.engine.crawl(request)
        finally:
            self.taking = False
        if offset not in self.queued.get(partition, ()):  # dropped on its way (a request_scheduled handler)
            self.offsets.finish(partition, offset)
        return 1

    def _spider_closing(self) -> bool:
        """Whether the engine stops (a shutdown) or closes the spider (its slot: ``_slot`` since
        Scrapy 2.13, ``slot`` before)."""
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        return engine is not None and (not engine.running or getattr(slot, "closing", None) is not None)

    @property
    def revisits_read(self) -> bool:
        """Whether revisit updates were read up to their end once (or are not read at all)."""
        return self.refetches is None or self.refetches.read_once

    def busy(self) -> bool:
        """Whether this process has work of its own left: new URLs in flight or not yet committed."""
        return bool(self.offsets.count_in_flight or self._finishing or self._changed
                    or (self.verdicts is not None and self.verdicts.waiting))

    def queue_taken(self, request: Request) -> None:
        taken: Taken = request.meta[TAKEN_META]
        self.queued.setdefault(taken.partition, set()).add(taken.offset)

    def handing_over(self, request: Request) -> bool:
        """Whether to hand a queued request to the downloader: not a new URL of a partition given
        away since it was queued (the new owner fetches it)."""
        taken: Taken | None = request.meta.get(TAKEN_META)
        if taken is None or LOCAL_META in request.meta:
            return True
        if taken.generation != self.generation.get(taken.partition):
            return False
        self.queued.get(taken.partition, set()).discard(taken.offset)
        return True

    def failing(self, errback: Any) -> Any:
        """The request's errback, marking it done first (a failed fetch is not tried again)."""
        if hasattr(errback, _WRAPPED):
            return errback

        def failed(failure: Failure) -> Any:
            request = getattr(failure, "request", None)
            if isinstance(request, Request):
                self.finished(request)
            if errback is None:
                failure.raiseException()  # unhandled, so Scrapy logs the download error as usual
            return errback(failure)

        setattr(failed, _WRAPPED, errback)
        return failed

    @staticmethod
    def unwrap(request: Request) -> None:
        if hasattr(request.errback, _WRAPPED):
            request.errback = getattr(request.errback, _WRAPPED)

    # -- the frontier ---------------------------------------------------------------------------

    def discovered(self, request: Request, start: str | None) -> None:
        """Write the request to the frontier for the URL stage; Unserializable if it cannot travel."""
        self._write(request, encode(request, self.spider, self.settings.request_classes), start, local=False)

    def noted(self, request: Request, start: str | None) -> None:
        """A request fetched here all the same: the URL stage learns its URL, and whoever takes the
        new URL skips it."""
        self._write(request, {}, start, local=True)

    def _write(self, request: Request, wanted: dict[str, Any], start: str | None, local: bool) -> None:
        control = {key: value for key, value in (("local", local), ("start", start)) if value}
        if control:
            wanted[PRIVATE] = control
        referer = request.headers.get("Referer")
        record = {"url": request.url, "source_url": referer.decode("latin-1") if referer else None,
                  "depth": int(request.meta.get("depth", 0)), "discovered_at": _now(), "scrapy": wanted}
        if self.settings.crawl_id:
            record["crawl"] = self.settings.crawl_id
        self.producer.produce(self.settings.topics.frontier, orjson.dumps(record), request.url.encode())
        self.producer.poll(0)

    # -- a request's lineage: which new-urls offset its work belongs to ------------------------------

    def continued(self, request: Request, source: Taken | Held) -> None:
        """A redirect of a request of ours, fetched here: it goes on with its source's offset."""
        key = TAKEN_META if isinstance(source, Taken) else HELD_META
        request.meta[key] = source._replace(url=request.url)

    def done_with(self, source: Taken | Held | None) -> None:
        """A redirect of a request of ours went to the URL stage, or was filtered: its source is done."""
        if isinstance(source, Taken):
            self._finishing.append((TAKEN_META, [source.partition, source.offset]))
        elif isinstance(source, Held):
            self._finishing.append((HELD_META, [source.partition, source.offset, source.token]))

    def hold(self, request: Request, parent: tuple[int, int]) -> None:
        token = self.offsets.hold(*parent)
        if token is not None:
            request.meta[HELD_META] = Held(parent[0], parent[1], token, request.url)
            request.errback = self.failing(request.errback)

    def adopt(self, output: Request, source: Request) -> None:
        """A request a callback yielded: none of its source's bookkeeping (a spider may copy the
        response's meta), and its source's new URL as its parent."""
        for key in [key for key in output.meta if str(key).startswith(PRIVATE)]:
            del output.meta[key]
        root = lineage(source)
        if root is not None:
            output.meta[PARENT_META] = (root.partition, root.offset)

    def finished(self, request: Request) -> None:
        """Done with ``request``: counted at the next poll, after what its callback yielded was
        scheduled (the scraper schedules a callback's requests in tasks of its own)."""
        self.finishing(request)()

    def finishing(self, request: Request) -> Callable[[], None]:
        """What :meth:`finished` will do for ``request``, as its bookkeeping stands now."""
        source, revisit = lineage(request), request.meta.get(REVISIT_META)

        def finish() -> None:
            self.done_with(source)
            if revisit is not None:
                self._finishing.append((REVISIT_META, list(revisit)))

        return finish

    def _settle(self) -> None:
        for key, marker in self._finishing:
            if key == TAKEN_META:
                self.offsets.finish(marker[0], marker[1])
            elif key == HELD_META:
                self.offsets.unhold(marker[0], marker[1], marker[2])
            elif self.refetches is not None:
                self.refetches.finish(marker)
            self._changed = True
        self._finishing = []

    # -- pages -------------------------------------------------------------------------------------

    def fetched(self, request: Request, response: Response) -> None:
        headers = {key.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
                   for key, values in response.headers.items()}
        record = {"url": request.url, "status": response.status, "headers": headers,
                  "content_type": headers.get("content-type"), "fetched_at": _now(),
                  "body_base64": base64.b64encode(response.body).decode("ascii")}
        if self.verdicts is not None and 200 <= response.status < 300:  # the page stage judges these
            self.verdicts.expect(request.url)
        self.producer.produce(self.settings.topics.fetched_pages, orjson.dumps(record), request.url.encode())
        self.producer.poll(0)

    # -- commits and closing -------------------------------------------------------------------

    def _commit(self) -> None:
        if self._closing:
            return
        self._settle()
        began = time.monotonic()
        self._commit_due_s = began + COMMIT_EVERY_S
        commits = self.offsets.commits(self.settings.topics.new_urls)
        if self.producer.flush(30):
            log.warning("crawl-dedup: records not yet taken by the broker; committing once they are")
            return  # every page and request a done offset stands for is written first
        try:
            if commits:
                self.intake.commit(offsets=commits, asynchronous=False)
                self.offsets.committed()
            if self.refetches is not None:
                self.refetches.commit()
            self._changed = False
        except KafkaException as error:  # a rebalance under way: the next turn commits again
            log.warning("crawl-dedup: commit refused (%s); committing again shortly", error)
        self.pacing.committed(time.monotonic() - began)

    def _undelivered(self, error: Any, message: Message) -> None:
        """A record the broker refused for good (librdkafka retried it until message.timeout.ms)."""
        self.stats.inc_value("crawl_dedup/records_not_written")
        log.error("crawl-dedup: a record for %s could not be written to %s: %s",
                  (message.key() or b"").decode("utf-8", "replace"), message.topic(), error)

    def close(self) -> None:
        """Commit what is done, then close the clients; their last revocations commit nothing more
        (each would commit both consumers, one of them closed already)."""
        if self._loop.running:
            self._loop.stop()
        self._commit()
        self._closing = True
        self.lifecycle.close()
        self.pacing.close()
        for consumer in (self.refetches, self.verdicts, self.intake):
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
