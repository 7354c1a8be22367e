"""Where the URL stage and a crawl's consumer group stand, read with blocking Kafka calls: for a
worker thread (Twisted's ``deferToThread``), never the reactor's.

Both questions the Scrapy side asks of the crawl as a whole are answered by reading committed
records, the way they travel (frontier, the URL stage's shard topic, new-urls):

- :meth:`CrawlWatch.drained_round`: has the URL stage decided every frontier record written before
  the round began (and every shard record those made), and is no new URL of this crawl left
  undone by the crawl's group? A process closes its spider after two such rounds in a row: a record
  written from a callback that finished during the first round is caught by the second.
- :meth:`CrawlWatch.seen_starts`: which start URLs of a process came back as new URLs for a start
  request of a process of this run (one in the crawl's consumer group now, this one included);
  the others the URL stage had seen before the run (a crawl resumed).

Caught up means no committed record is left between the group's committed offset and the end
taken at the start: records are read, not offsets compared, since past a transactional
partition's last record come commit markers. The URL stage's topics and group are its spec's
(:mod:`streams.registry`), of its state's current generation: its internal topics are the
runtime's to name, not this module's.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from streams import registry
from streams.integrations.settings import CrawlSettings
from streams.runtime.api import Topology
from streams.runtime.extras import current_topics
from streams.topics import Topics

URL_STAGE = "url-dedup"
WAIT_POLL_S = 0.1
CLOCK_SKEW_MS = 5_000  # between the hosts of a crawl's processes and the brokers, at most
CLIENT_ID = "crawl-dedup-scrapy"


@dataclass(frozen=True)
class Instance:
    """A Scrapy process of a crawl: a random name and when it started, told to the other processes
    of its run as its consumer's ``client.id``."""

    name: str
    started_ms: int

    @classmethod
    def new(cls) -> Instance:
        return cls(uuid.uuid4().hex[:12], int(time.time() * 1000))

    @property
    def client_id(self) -> str:
        return f"{CLIENT_ID}.{self.name}.{self.started_ms}"

    @classmethod
    def of(cls, client_id: str) -> Instance | None:
        prefix, _, rest = client_id.partition(".")
        name, _, started = rest.partition(".")
        return cls(name, int(started)) if prefix == CLIENT_ID and name and started.isdigit() else None


class CrawlWatch:
    """Blocking reads for one crawler process; one call at a time."""

    def __init__(self, settings: CrawlSettings, wait_s: float = 30.0) -> None:
        self.settings = settings
        self.wait_s = wait_s
        self.stopping = threading.Event()  # the process is closing: a round under way gives up
        self._past: dict[str, dict[int, int]] = {}  # topic -> ends the URL stage was found past
        kafka, topics = settings.kafka, settings.topics
        self._stage_group = self._url_stage(topics).group
        # committed() only: these never subscribe, so they never join (or disturb) their groups
        self._groups = {group: Consumer(kafka.consumer(group))
                        for group in (self._stage_group, settings.group)}
        # the end of a partition is told once a fetch comes back empty: at once, not after 500 ms
        self._reader = Consumer(kafka.consumer(f"{settings.group}.watch", **{
            "enable.partition.eof": True, "fetch.wait.max.ms": 10}))
        self._admin = AdminClient(kafka.admin())

    def close(self) -> None:
        for consumer in (*self._groups.values(), self._reader):
            consumer.close()

    # -- the two questions ---------------------------------------------------------------------

    def drained_round(self) -> bool:
        if not self.stage_past_now():
            return False
        new_urls = self.settings.topics.new_urls
        ends = self.ends(new_urls)
        committed = self.committed(self.settings.group, new_urls, ends)
        return not any(self._ours(message) for message in self.records(new_urls, committed, ends))

    def seen_starts(self, urls: set[str], own: Instance) -> set[str] | None:
        """Of this process's start ``urls``, those the URL stage had seen before this run: none of
        the run's processes' start requests for them came back new. None when the stage did not
        decide them within ``wait_s``."""
        if not self.stage_past_now():
            return None
        run = {own.name: own.started_ms, **self.members()}
        new_urls = self.settings.topics.new_urls
        ends = self.ends(new_urls)
        starts = self.offsets_at(new_urls, min(run.values()) - CLOCK_SKEW_MS, ends)
        came_back = set()
        for message in self.records(new_urls, starts, ends):
            record = _record(message)
            token = str(((record.get("scrapy") or {}).get("crawl_dedup") or {}).get("start") or "")
            if token.partition(":")[0] in run and (record.get("crawl") or "") == self.settings.crawl_id:
                came_back.add(record.get("url"))
        return urls - came_back

    def members(self) -> dict[str, int]:
        """The processes in the crawl's consumer group now: instance -> start (ms), by client.id."""
        group = self.settings.group
        described = self._admin.describe_consumer_groups([group])[group].result(timeout=30)
        found = (Instance.of(member.client_id) for member in described.members)
        return {instance.name: instance.started_ms for instance in found if instance is not None}

    def offsets_at(self, topic: str, at_ms: int, ends: dict[int, int]) -> dict[int, int]:
        """Each partition's first offset at or after ``at_ms`` (its end when none)."""
        asked = [TopicPartition(topic, partition, at_ms) for partition in ends]
        return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition]
                for tp in self._reader.offsets_for_times(asked, timeout=30)}

    def stage_past_now(self) -> bool:
        """Whether the URL stage decides, within ``wait_s``, every frontier record written so far
        and every shard record those made."""
        current = current_topics(self.settings.kafka, self.settings.topics, self.settings.app_id, URL_STAGE)
        stage = self._url_stage(current)
        return all(self._stage_past(topic) for topic in [*stage.input_topics, *stage.shard_topics])

    def _url_stage(self, topics: Topics) -> Topology:
        """The URL stage's topics and group under ``topics``, as its spec declares them."""
        return registry.spec(URL_STAGE).topology(topics, self.settings.app_id)

    def _stage_past(self, topic: str) -> bool:
        """The stage decided every record of ``topic`` before its ends now; a topic whose ends have
        not moved since the stage was last found past them is past at once (a quiet crawl's
        confirming round costs no wait for the stage's next batch)."""
        ends = self.ends(topic)
        if ends and ends == self._past.get(topic):
            return True
        if not self.wait_caught_up(self._stage_group, topic, ends):
            return False
        self._past[topic] = ends
        return True

    # -- reading ---------------------------------------------------------------------------------

    def ends(self, topic: str) -> dict[int, int]:
        """Each partition's end (high watermark) now; {} for a topic not there (the cluster's
        metadata as a whole: asking for one topic by name could create it)."""
        found = self._reader.list_topics(timeout=30).topics.get(topic)
        if found is None:
            return {}
        return {partition: self._reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
                for partition in found.partitions}

    def committed(self, group: str, topic: str, ends: dict[int, int]) -> dict[int, int]:
        asked = [TopicPartition(topic, partition) for partition in ends]
        return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                for tp in self._groups[group].committed(asked, timeout=30)}

    def caught_up(self, group: str, topic: str, ends: dict[int, int]) -> bool:
        committed = self.committed(group, topic, ends)
        return next(self.records(topic, committed, ends), None) is None

    def wait_caught_up(self, group: str, topic: str, ends: dict[int, int]) -> bool:
        deadline = time.monotonic() + self.wait_s
        while not self.caught_up(group, topic, ends):
            if time.monotonic() > deadline or self.stopping.wait(WAIT_POLL_S):
                return False
        return True

    def records(self, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Iterator[Message]:
        """The committed records of ``topic`` from ``starts`` up to (not including) ``ends``."""
        wanted = {partition: end for partition, end in ends.items()
                  if end > 0 and starts.get(partition, OFFSET_BEGINNING) < end}
        if not wanted:
            return
        self._reader.assign([TopicPartition(topic, partition, starts.get(partition, OFFSET_BEGINNING))
                             for partition in wanted])
        deadline = time.monotonic() + self.wait_s
        try:
            while wanted and time.monotonic() < deadline and not self.stopping.is_set():
                message = self._reader.poll(WAIT_POLL_S)  # as soon as one comes (consume waits its timeout)
                if message is None:
                    continue
                partition = message.partition() or 0
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        wanted.pop(partition, None)
                    continue
                if partition not in wanted:
                    continue
                offset = message.offset() or 0
                if offset >= wanted[partition] - 1:
                    wanted.pop(partition)
                if offset < ends[partition]:
                    yield message
            if wanted:
                raise TimeoutError(f"{topic} could not be read up to its end in {self.wait_s:.0f} s")
        finally:
            self._reader.unassign()

    def _ours(self, message: Message) -> bool:
        return (_record(message).get("crawl") or "") == self.settings.crawl_id


def _record(message: Message) -> dict[str, Any]:
    try:
        record = orjson.loads(message.value() or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}
