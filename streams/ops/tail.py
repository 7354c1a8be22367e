"""``python -m streams tail TOPIC``: print a topic's committed records, one JSON line each.

Why: to see what a stage wrote (verdicts, new URLs, dead letters) or what a fetcher fed it without
a Kafka distribution's console tools, with the same cluster settings as every other command. It
reads with ``isolation.level=read_committed`` (only what the stages committed, as their consumers
see it), assigns partitions itself and commits nothing: tailing never moves a group's offsets.

Without ``--follow`` it prints every partition from its beginning up to the end it had when the
command started, then exits; ``--follow`` starts at the end (``--from-beginning``: at the
beginning) and runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any, Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from streams import config
from streams.broker.bootstrap import kafka_config
from streams.errors import BrokerError, ConfigError
from streams.topics import Topics

SHORT_NAMES: Final = {"frontier": "frontier", "new-urls": "new_urls", "fetched-pages": "fetched_pages",
                      "unique-pages": "unique_pages", "page-verdicts": "page_verdicts",
                      "revisit-updates": "revisit_updates", "dead-letters": "dead_letters"}
LONG_FIELDS: Final = ("body", "body_base64", "value_base64")  # pages and dead letters' original bytes
SHOWN_CHARS: Final = 200


# --- pure ------------------------------------------------------------------------------------------


def resolve_topic(name: str, topics: Topics) -> str:
    """A short name (``page-verdicts``) is the prefixed topic; any other name is taken as it is."""
    attribute = SHORT_NAMES.get(name)
    return name if attribute is None else str(getattr(topics, attribute))


def shorten(text: str) -> str:
    """The first :data:`SHOWN_CHARS` characters and the full length: a page body on one line would
    bury the fields around it."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} chars)"


def parsed_value(value: bytes | None, full: bool) -> Any:
    """The value as JSON when it parses (long body fields shortened unless ``full``), else its text
    (invalid UTF-8 replaced), so a malformed record still shows what it held."""
    if value is None:
        return None
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        text = value.decode("utf-8", "replace")
        return text if full else shorten(text)
    if isinstance(parsed, dict) and not full:
        for field in LONG_FIELDS:
            if isinstance(parsed.get(field), str):
                parsed[field] = shorten(parsed[field])
    return parsed


def render(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
           full: bool = False) -> bytes:
    """One record as a JSON line: ``{"topic", "partition", "offset", "key", "value"}``."""
    return orjson.dumps({"topic": topic, "partition": partition, "offset": offset,
                         "key": None if key is None else key.decode("utf-8", "replace"),
                         "value": parsed_value(value, full)})


# --- Kafka -----------------------------------------------------------------------------------------


def _partitions(consumer: Consumer, topic: str, only: int | None) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise ConfigError(f"topic {topic} does not exist (short names: {', '.join(SHORT_NAMES)})")
    partitions = sorted(metadata.partitions)
    if only is not None and only not in partitions:
        raise ConfigError(f"topic {topic} has no partition {only} (it has {len(partitions)})")
    return partitions if only is None else [only]


def _start(consumer: Consumer, topic: str, partitions: list[int], args: argparse.Namespace) -> dict[int, int]:
    """Assign the partitions; return each one's end offset now (where a bounded read stops)."""
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    start = OFFSET_END if args.follow and not args.from_beginning else OFFSET_BEGINNING
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    return ends


def records(consumer: Consumer, topic: str, partitions: list[int],
            args: argparse.Namespace) -> Iterator[Message]:
    """The records to print: up to each partition's start-time end, or forever with ``--follow``."""
    ends = _start(consumer, topic, partitions, args)
    pending = {p for p in partitions if ends[p] > 0}
    while args.follow or pending:
        for message in consumer.consume(500, timeout=0.5):
            error = message.error()
            partition = message.partition() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:  # at the last committed record
                    pending.discard(partition)
                    continue
                raise BrokerError(f"reading {topic}: {error.str()}")
            offset = message.offset() or 0
            if not args.follow and offset >= ends[partition]:
                pending.discard(partition)
                continue
            yield message
            if offset >= ends[partition] - 1:
                pending.discard(partition)


def run(args: argparse.Namespace) -> int:
    """The ``tail`` command."""
    prefix = config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix
    topic = resolve_topic(args.topic, Topics(prefix))
    consumer = Consumer(kafka_config(args.config).consumer(f"tail-{uuid.uuid4().hex[:12]}",
                                                    **{"enable.partition.eof": True}))
    out = sys.stdout.buffer
    printed = 0
    try:
        partitions = _partitions(consumer, topic, args.partition)
        for message in records(consumer, topic, partitions, args) if args.limit != 0 else ():
            value = message.value()
            out.write((value or b"") if args.raw else render(
                topic, message.partition() or 0, message.offset() or 0, message.key(), value, args.full))
            out.write(b"\n")
            printed += 1
            if args.follow:
                out.flush()
            if args.limit is not None and printed >= args.limit:
                break
        out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `tail ... | head`: the reader is gone; keep the exit-time flush quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        consumer.close()
    return 0


def add_parser(commands: Any) -> None:
    """Register ``tail`` on the CLI."""
    command = commands.add_parser(
        "tail", help="print a topic's committed records as JSON lines",
        description="Reads with read_committed and commits no offsets. Without --follow: every "
                    "partition from its beginning to the end it had at start. Each record is "
                    '{"topic","partition","offset","key","value"}; value is the parsed JSON (body, '
                    "body_base64 and value_base64 shortened unless --full) or the raw text.")
    command.add_argument("topic", metavar="TOPIC",
                         help=f"a short name ({', '.join(SHORT_NAMES)}; prefixed with --topic-prefix) "
                              "or a full topic name")
    command.add_argument("--from-beginning", action="store_true",
                         help="with --follow: start at the beginning, not the end")
    command.add_argument("-f", "--follow", action="store_true", help="keep printing new records until Ctrl-C")
    command.add_argument("--limit", type=int, default=None, help="print this many records at most")
    command.add_argument("--partition", type=int, default=None, help="only this partition")
    command.add_argument("--raw", action="store_true", help="print only each value's bytes, one per line")
    command.add_argument("--full", action="store_true", help="do not shorten long body fields")
    command.add_argument("--topic-prefix", default=None, help="prefix of the short names (default crawl.)")
    command.set_defaults(handler=run)
