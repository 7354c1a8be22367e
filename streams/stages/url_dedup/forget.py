"""``crawl-dedup forget``: make URLs new again, through the stage's own transactions.

What a forget selects (:class:`~streams.stages.url_dedup.marks.Selection`): URLs named (canonicalized
and fingerprinted by the stage's settings, as the stage does), or every URL of a host, or under a
URL prefix, or marked seen before a time, within one crawl. The command:

1. notes where the replies topic (``url-dedup-replies``) ends, creating it if no worker has yet;
2. writes one control record per shard (:mod:`streams.stages.url_dedup.forgetting`) to the stage's
   shard topic of its current generation, all in one transaction: every shard gets it, or none;
3. reads the replies (read_committed) until every shard has answered, and returns their counts.

With ``--recrawl`` each shard also writes every URL it lets go back to the frontier (a frontier
record of its canonical form and crawl), in the transaction that lets it go: its next sighting is
then at once, and the stage emits it to new-urls again, exactly once, with no crawler having to
find it again. The seen-set keeps URLs, not requests: what a crawler attached to the first request
(a Scrapy callback, meta) is not in it.

Killing the command after step 2 changes nothing: the shards apply the forget all the same (run it
again to learn a count: what the first one let go is new already, and counts 0). A shard with no
worker applies it when one starts; the command says which shards did not answer in time.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.errors import ConfigError, RecordRejected
from streams.runtime.api import partition_for
from streams.runtime.extras import KafkaConfig, TopicSpec, current_topics, ensure_topics
from streams.stages.url_dedup.forgetting import CONTROL_KEY, Control
from streams.stages.url_dedup.marks import Selection
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.topics import Topics
from streams.urls import canonical

STAGE = "url-dedup"
REPLIES = "url-dedup-replies"
REPLY_RETENTION_MS = 7 * 86_400_000
PROGRESS_S = 10.0  # how often a forget still waiting says so
MAX_NAMED_URLS = 100_000  # a shard's record of them stays well under a megabyte


@dataclass
class ForgetReport:
    """What a forget did: URLs let go over the shards that answered, and those that did not."""

    request: str
    shards: frozenset[int]  # the shards it was sent to
    forgotten: int = 0
    answered: set[int] = field(default_factory=set)
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def missing(self) -> list[int]:
        return sorted(self.shards - self.answered)


def named_selection(urls: list[str], settings: UrlDedupSettings, crawl: str,
                    refused: dict[str, str]) -> Selection | None:
    """The fingerprints of ``urls`` as the stage makes them; those its rules refuse go to ``refused``
    (URL -> reason). None when none is left."""
    if len(urls) > MAX_NAMED_URLS:
        raise ConfigError(f"{len(urls)} URLs named: forget at most {MAX_NAMED_URLS:,} per command "
                          "(run it in parts, or select them by --host, --prefix or --seen-before)")
    rules, keys = settings.canonical(), set()
    for url in urls:
        try:
            keys.add(canonical.fingerprint(canonical.canonicalize(url, rules), crawl))
        except RecordRejected as rejected:
            refused[url] = f"{rejected.reason}: {rejected.detail}"
    return Selection(frozenset(keys), crawl=crawl) if keys else None


def canonical_host(host: str) -> str:
    """A host as canonical URLs hold it (lower case, IDNA, no trailing dot): what ``--host`` matches."""
    try:
        return canonical.host_of(canonical.canonicalize(f"http://{host}/"))
    except RecordRejected as rejected:
        raise ConfigError(f"--host {host!r} is not a host: {rejected.detail}") from rejected


def shard_topic(kafka: KafkaConfig, topics: Topics, app_id: str) -> tuple[str, int]:
    """The URL stage's shard topic of its current generation, and its partition count."""
    name = current_topics(kafka, topics, app_id, STAGE).shards(app_id, STAGE)
    found = AdminClient(kafka.admin()).list_topics(name, timeout=30).topics.get(name)
    if found is None or found.error is not None or not found.partitions:
        raise ConfigError(f"the URL stage has no shard topic {name}: has it run with this app id and "
                          "topic prefix?")
    return name, len(found.partitions)


def forget(kafka: KafkaConfig, topics: Topics, app_id: str, selection: Selection, wait_s: float,
           recrawl: bool = False,
           waiting: Callable[[ForgetReport], None] = lambda report: None) -> ForgetReport:
    """Apply ``selection`` at the shards of the URL stage of ``app_id`` (every shard, or those of the
    URLs named); wait up to ``wait_s`` for their replies (``waiting(report)`` every
    :data:`PROGRESS_S` meanwhile). ``recrawl``: each shard also writes every
    URL it lets go to the frontier, in the same transaction, so each comes out of new-urls again
    without waiting for a crawler to find it."""
    topic, shards = shard_topic(kafka, topics, app_id)
    request = uuid.uuid4().hex
    controls = _per_shard(Control("forget", request, selection, recrawl), shards)
    report = ForgetReport(request, frozenset(controls))
    replies = topics.named(REPLIES)
    ensure_topics(kafka, [TopicSpec(replies, 1, {"retention.ms": str(REPLY_RETENTION_MS)})])
    with _Replies(kafka, replies, request) as reading:
        _send(kafka, topics.group(app_id, STAGE), topic, controls, request)
        reading.collect(report, time.monotonic() + wait_s, waiting)
    return report


def _per_shard(control: Control, shards: int) -> dict[int, Control]:
    """The control record of each shard: a selection by key goes only to the shards of its keys,
    each with its own."""
    selection = control.selection
    if selection is None or not selection.by_keys:
        return dict.fromkeys(range(shards), control)
    by_shard: dict[int, set[bytes]] = {}
    for key in selection.keys:
        by_shard.setdefault(partition_for(key, shards), set()).add(key)
    return {shard: dataclasses.replace(control, selection=Selection(frozenset(keys), crawl=selection.crawl))
            for shard, keys in by_shard.items()}


def _send(kafka: KafkaConfig, group: str, topic: str, controls: dict[int, Control], request: str) -> None:
    """Each shard's control record, in one transaction."""
    producer = Producer(kafka.transactional_producer(f"{group}.forget.{request}", 60.0))
    producer.init_transactions(60)
    producer.begin_transaction()
    for shard, control in controls.items():
        producer.produce(topic, control.encode(), CONTROL_KEY, partition=shard)
    producer.commit_transaction(60)


class _Replies:
    """The replies to one request, read from where the replies topic ended before it was sent."""

    def __init__(self, kafka: KafkaConfig, topic: str, request: str) -> None:
        self._request = request
        self._consumer = Consumer(kafka.consumer(f"{topic}.{request}", **{"enable.partition.eof": False}))
        partitions = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        partition = partition_for(request.encode(), len(partitions))
        _, end = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        self._consumer.assign([TopicPartition(topic, partition, end)])

    def __enter__(self) -> _Replies:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()

    def collect(self, report: ForgetReport, deadline: float,
                waiting: Callable[[ForgetReport], None] = lambda report: None) -> None:
        """Read replies into ``report`` until every shard answered or ``deadline``; ``waiting(report)``
        every :data:`PROGRESS_S` meanwhile."""
        said = time.monotonic()
        while report.missing and time.monotonic() < deadline:
            if time.monotonic() - said >= PROGRESS_S:
                waiting(report)
                said = time.monotonic()
            wait_s = min(0.5, max(0.0, deadline - time.monotonic()))
            for message in self._consumer.consume(500, timeout=wait_s):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise ConfigError(f"reading the forget's replies: {error}")
                    continue
                if message.key() != self._request.encode():
                    continue
                reply = orjson.loads(message.value() or b"{}")
                shard = int(reply["shard"])
                if shard in report.answered or shard not in report.shards:
                    continue
                report.answered.add(shard)
                report.forgotten += int(reply.get("forgotten") or 0)
                if reply.get("error"):
                    report.errors[shard] = str(reply["error"])
