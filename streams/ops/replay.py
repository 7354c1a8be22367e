"""``python -m streams replay FILE...``: feed WARC files and JSON lines into the input topics.

Why: to run the stages on a real crawl (a WARC from any crawler) or on records kept as JSON lines,
and to reproduce a problem with the very bytes that caused it. WARC records become fetched pages
and frontier links (:mod:`streams.ops.warc`). A JSON line is produced as it is, byte for byte
(only its line break removed), so a malformed line reaches the stage and its dead-letter topic
exactly as a broken fetcher would have written it.

The first half of this module is pure (reading lines, choosing topics, the size limit); the second
half is the Kafka side: one idempotent producer (lz4, as every producer here), paced to ``--rate``,
flushed at the end, and a summary of what was read, produced, skipped and why.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, BinaryIO, Final, cast

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams import config
from streams.broker.bootstrap import kafka_config
from streams.errors import ConfigError
from streams.ops.warc import DEFAULT_MAX_LINKS, FETCHED_PAGES, FRONTIER, Item, Out, Skip, warc_items
from streams.runtime.admin import (
    CLIENT_MAX_MESSAGE_BYTES,
    RECORD_OVERHEAD,
    KafkaConfig,
    TopicSpec,
    ensure_topics,
    output_limits,
    replication_for_command,
)
from streams.topics import Topics

AUTO: Final = "auto"
LOOKAHEAD_LINES: Final = 100  # lines read, at most, to find the first valid one of a file
HEADROOM: Final = 4096  # batch framing, and what a stage adds to a page (unique-pages: ~200 bytes)
_PAGE_FIELDS: Final = frozenset({"body", "body_base64", "status", "headers", "content_type", "fetched_at"})
_WARC_SUFFIXES: Final = (".warc", ".warc.gz")
_LINES_SUFFIXES: Final = (".jsonl", ".json", ".ndjson")
_REPORTED: Final = 20  # oversize records and read errors named on stderr, at most


# --- JSON lines (pure) -----------------------------------------------------------------------------


def read_lines(stream: BinaryIO, max_bytes: int) -> Iterator[bytes | Skip]:
    """The lines of ``stream`` without their line break; a line longer than ``max_bytes`` is an
    ``oversize`` skip, read past in chunks, so one huge line cannot take the replay's memory."""
    for number in itertools.count(1):
        line = stream.readline(max_bytes + 2)
        if not line:
            return
        if not line.endswith(b"\n") and len(line) == max_bytes + 2:
            size = len(line) + _read_past_line(stream)
            yield Skip("oversize", f"line {number}: {size} bytes")
            continue
        yield line[:-1] if line.endswith(b"\n") else line


def _read_past_line(stream: BinaryIO) -> int:
    skipped = 0
    while chunk := stream.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def line_items(lines: Iterable[bytes | Skip], topic: str) -> Iterator[Item]:
    """Each line as a record for ``topic``; ``auto`` picks the topic once per file, from the first
    line that is a JSON object with a string ``url`` (:func:`detect_topic`), else fetched pages."""
    rest = iter(lines)
    head: list[bytes | Skip] = []
    if topic == AUTO:
        for line in rest:
            head.append(line)
            if detect_topic(line) is not None or len(head) >= LOOKAHEAD_LINES:
                break
        topic = next((t for t in map(detect_topic, head) if t is not None), FETCHED_PAGES)
    for line in itertools.chain(head, rest):
        yield line_item(line, topic)


def line_item(line: bytes | Skip, topic: str) -> Item:
    """A line as it is, keyed by its ``url`` when it has one; a line of only white space is skipped
    (a file's trailing blank line is no record; an empty value would only be a dead letter)."""
    if isinstance(line, Skip):
        return line
    if not line.strip():
        return Skip("blank_line")
    return Out(topic, line_key(line), line)


def detect_topic(line: bytes | Skip) -> str | None:
    """``fetched-pages`` for a page (it has a body, status, headers...), ``frontier`` for another
    object with a string ``url``; ``None`` when the line is not such an object."""
    record = _object(line)
    if record is None or not isinstance(record.get("url"), str):
        return None
    return FETCHED_PAGES if _PAGE_FIELDS & record.keys() else FRONTIER


def line_key(line: bytes) -> bytes | None:
    """The line's ``url`` as the record key (as fetchers key pages), or no key when it has none."""
    record = _object(line)
    url = record.get("url") if record is not None else None
    return url.encode("utf-8") if isinstance(url, str) else None


def _object(line: bytes | Skip) -> dict[str, Any] | None:
    if isinstance(line, Skip):
        return None
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def oversize(item: Out, max_bytes: int) -> Skip | None:
    """An ``oversize`` skip when key and value together exceed ``max_bytes`` (the broker would
    refuse the record, and a producer error would tell the operator less)."""
    size = len(item.value) + len(item.key or b"")
    if size <= max_bytes:
        return None
    key = (item.key or b"").decode("utf-8", "replace")[:200]
    return Skip("oversize", f"{item.topic} record of {size} bytes (limit {max_bytes}), key {key!r}")


def source_kind(name: str) -> str:
    """``warc`` or ``lines``, from the file name; anything else is an operator error."""
    lowered = name.lower()
    if lowered.endswith(_WARC_SUFFIXES):
        return "warc"
    if name == "-" or lowered.removesuffix(".gz").endswith(_LINES_SUFFIXES):
        return "lines"
    raise ConfigError(f"{name}: not a WARC (.warc, .warc.gz) or JSON lines file (.jsonl, .json, "
                      ".ndjson, optionally .gz; - for stdin)")


def _open(name: str) -> AbstractContextManager[BinaryIO]:
    if name == "-":
        return nullcontext(sys.stdin.buffer)
    if name.lower().endswith(".gz") and source_kind(name) == "lines":
        return cast(AbstractContextManager[BinaryIO], gzip.open(name, "rb"))
    return open(name, "rb")  # noqa: SIM115 - the caller closes it; FastWARC detects gzip itself


def source_items(name: str, topic: str, max_links: int, max_bytes: int) -> Iterator[Item]:
    """Every record one input file gives."""
    with _open(name) as stream:
        if source_kind(name) == "warc":
            yield from warc_items(stream, max_links)
        else:
            yield from line_items(read_lines(stream, max_bytes), topic)


# --- Kafka -----------------------------------------------------------------------------------------


class Sink:
    """The replay's one idempotent producer: paced to ``rate`` records/s, every delivery counted."""

    def __init__(self, kafka: KafkaConfig, topics: dict[str, str], rate: float, max_bytes: int,
                 tally: Counter[str]) -> None:
        self.producer = Producer(kafka.producer(**{
            "enable.idempotence": True, "linger.ms": 50,
            "message.max.bytes": max(CLIENT_MAX_MESSAGE_BYTES, max_bytes + HEADROOM)}))
        self.topics, self.rate, self.tally = topics, rate, tally
        self.sent, self.started = 0, time.monotonic()

    def send(self, item: Out) -> None:
        self._pace()
        while True:
            try:
                self.producer.produce(self.topics[item.topic], item.value, item.key, on_delivery=self._done)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
            except KafkaException as error:  # refused locally (e.g. too large for the client)
                self._error(error.args[0], item.key)
                return
        self.sent += 1
        self.tally[f"produced:{item.topic}"] += 1
        self.producer.poll(0)

    def _pace(self) -> None:
        if self.rate <= 0:
            return
        due = self.started + self.sent / self.rate
        while (delay := due - time.monotonic()) > 0:
            self.producer.poll(delay)  # serves delivery reports while it waits

    def _done(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.tally["delivered"] += 1
        else:
            self._error(error, message.key())

    def _error(self, error: KafkaError, key_bytes: bytes | None) -> None:
        self.tally[f"error:{error.name()}"] += 1
        if sum(v for k, v in self.tally.items() if k.startswith("error:")) <= _REPORTED:
            key = (key_bytes or b"").decode("utf-8", "replace")[:200]
            print(f"replay: not delivered ({error.str()}), key {key!r}", file=sys.stderr)

    def close(self, timeout_s: float = 60.0) -> None:
        left = self.producer.flush(timeout_s)
        if left:
            self.tally["error:unflushed"] += left


def record_limit(kafka: KafkaConfig, topics: list[str]) -> int:
    """The largest record the stages can take *and pass on*, less :data:`HEADROOM`: the smaller of
    the target topics' ``max.message.bytes`` and the clients' ``message.max.bytes`` (librdkafka
    refuses a larger record before sending it, so a stage could not write a page's unique-pages
    record, which is the page and a little more)."""
    try:
        client = kafka.client_max_message_bytes() or CLIENT_MAX_MESSAGE_BYTES
    except ConfigError:
        client = CLIENT_MAX_MESSAGE_BYTES
    return min([client, *_topic_limits(kafka, topics)]) - HEADROOM


def _topic_limits(kafka: KafkaConfig, topics: list[str]) -> list[int]:
    """Each topic's ``max.message.bytes``, read the way the stages read it (the broker's default
    when the cluster does not say, as a stage would assume)."""
    return [limit + RECORD_OVERHEAD for limit in output_limits(kafka, topics).values()]


def replay(names: list[str], sink: Sink, args: argparse.Namespace, max_bytes: int,
           tally: Counter[str]) -> None:
    """Every file in order until ``--limit`` inputs (pages and lines; links not counted) went out."""
    max_links = 0 if args.no_links else args.max_links
    inputs = 0
    for name in names:
        kind = source_kind(name)
        try:
            for item in source_items(name, args.topic, max_links, max_bytes):
                is_link = kind == "warc" and isinstance(item, Out) and item.topic == FRONTIER
                if not is_link:
                    if args.limit is not None and inputs >= args.limit:
                        return
                    tally[f"read:{kind}"] += 1
                if isinstance(item, Skip):
                    _skipped(item, name, tally)
                    continue
                too_large = oversize(item, max_bytes)
                if too_large is not None:
                    _skipped(too_large, name, tally)
                    continue
                sink.send(item)
                inputs += 0 if is_link else 1
        except (OSError, EOFError) as error:  # a truncated or corrupt file: the next one still goes
            tally["error:unreadable_file"] += 1
            print(f"replay: {name}: stopped reading: {error}", file=sys.stderr)


def _skipped(skip: Skip, name: str, tally: Counter[str]) -> None:
    tally[f"skipped:{skip.reason}"] += 1
    if skip.reason == "oversize" and tally["skipped:oversize"] <= _REPORTED:
        print(f"replay: {name}: oversize, not produced: {skip.detail}", file=sys.stderr)


def summary(tally: Counter[str], topics: dict[str, str], files: int, seconds: float) -> str:
    """What the operator needs to trust the replay: inputs, outputs, skips by reason, errors."""
    produced = sum(tally[f"produced:{short}"] for short in topics)
    return "\n".join([
        f"replayed {files} file(s) in {seconds:.1f} s ({produced / max(seconds, 1e-9):.0f} records/s)",
        f"read: {tally['read:warc']} WARC records, {tally['read:lines']} JSON lines",
        f"produced: {tally[f'produced:{FETCHED_PAGES}']} to {topics[FETCHED_PAGES]}, "
        f"{tally[f'produced:{FRONTIER}']} to {topics[FRONTIER]}; {tally['delivered']} delivered",
        f"skipped: {grouped(tally, 'skipped:')}",
        f"errors: {grouped(tally, 'error:')}",
    ])


def grouped(tally: Counter[str], prefix: str) -> str:
    """The counts of ``tally`` whose names start with ``prefix``, as ``"3 a, 1 b"`` (``none``)."""
    found = sorted((name.removeprefix(prefix), n) for name, n in tally.items()
                   if name.startswith(prefix) and n)
    return ", ".join(f"{n} {name}" for name, n in found) or "none"


def run(args: argparse.Namespace) -> int:
    """The ``replay`` command: 0 when every record was delivered, 1 when some were not."""
    names = list(args.files)
    for name in names:
        source_kind(name)
        if name != "-" and not Path(name).is_file():
            raise ConfigError(f"{name}: no such file")
    settings = config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix)
    topics = Topics(settings.prefix)
    targets = {FETCHED_PAGES: topics.fetched_pages, FRONTIER: topics.frontier}
    kafka = kafka_config(args.config)
    ensure_topics(kafka, [TopicSpec(name, settings.input_partitions) for name in targets.values()],
                  replication_for_command(kafka, settings))
    max_bytes = args.max_record_bytes or record_limit(kafka, list(targets.values()))
    tally: Counter[str] = Counter()
    sink = Sink(kafka, targets, args.rate, max_bytes, tally)
    began = time.monotonic()
    try:
        replay(names, sink, args, max_bytes, tally)
    finally:
        sink.close()
    print(summary(tally, targets, len(names), time.monotonic() - began))
    return 1 if any(k.startswith("error:") and v for k, v in tally.items()) else 0


def add_parser(commands: Any) -> None:
    """Register ``replay`` on the CLI."""
    command = commands.add_parser(
        "replay", help="feed WARC files and JSON lines into the topics",
        description="Feeds the frontier and fetched-pages topics. WARC response records (and 304 "
                    "revisits) become fetched pages keyed by URL, the "
                    "links of their 2xx HTML pages frontier records; JSON lines are produced as they "
                    "are. Prints a summary; exits 1 when some record was not delivered.")
    command.add_argument("files", nargs="+", metavar="FILE",
                         help=".warc or .warc.gz; JSON lines: .jsonl, .json or .ndjson, optionally "
                              ".gz, or - for stdin")
    command.add_argument("--topic", choices=[AUTO, FETCHED_PAGES, FRONTIER], default=AUTO,
                         help="target of JSON lines (WARC files feed both). auto (default): per file, "
                              "fetched-pages if the first line that is an object with a url has body, "
                              "body_base64, status, headers, content_type or fetched_at, frontier if "
                              "it has none of them, fetched-pages if no line of the first 100 is one")
    command.add_argument("--topic-prefix", default=None, help="prefix of every topic name")
    command.add_argument("--rate", type=float, default=0.0,
                         help="records per second at most, links included (default 0: unlimited)")
    command.add_argument("--limit", type=int, default=None,
                         help="stop after this many pages and JSON lines (their links not counted)")
    command.add_argument("--no-links", action="store_true", help="produce no frontier records from WARCs")
    command.add_argument("--max-links", type=int, default=DEFAULT_MAX_LINKS,
                         help=f"links per page at most (default {DEFAULT_MAX_LINKS})")
    command.add_argument("--max-record-bytes", type=int, default=None,
                         help="larger records (key and value) are reported and not produced (default: "
                              "the smaller of the topics' max.message.bytes and the clients' "
                              f"message.max.bytes, {CLIENT_MAX_MESSAGE_BYTES} unless set, less "
                              f"{HEADROOM}: what the stages can take and pass on)")
    command.set_defaults(handler=run)
