"""The ``forget`` command's edge: its arguments made a selection, the forget run, its report printed.

The forgetting is :mod:`streams.stages.url_dedup.forget` (the command's side) and
:mod:`streams.stages.url_dedup.forgetting` (the shards' side).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from streams import records
from streams.broker.bootstrap import kafka_config
from streams.errors import ConfigError, RecordRejected
from streams.runtime.extras import KafkaConfig, current_topics
from streams.stages.url_dedup.forget import STAGE, ForgetReport, canonical_host, forget, named_selection
from streams.stages.url_dedup.marks import Selection
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.topics import Topics
from streams.urls import canonical


def parse_date_ms(text: str) -> int:
    """``YYYY-MM-DD`` (midnight UTC) or an RFC 3339 date-time, in milliseconds since the epoch."""
    try:
        if len(text) == 10:
            moment = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
        else:
            moment = records.parse_rfc3339(text)
    except ValueError as error:
        raise ConfigError(f"--seen-before {text!r}: give YYYY-MM-DD or an RFC 3339 date-time") from error
    return int(moment.timestamp() * 1000)


def selection_of(args: argparse.Namespace,
                 settings: UrlDedupSettings) -> tuple[Selection | None, dict[str, str]]:
    """The command's selection, and the named URLs the stage's rules refuse (URL -> reason)."""
    urls = [line.strip() for line in sys.stdin if line.strip()] if args.urls == ["-"] else list(args.urls)
    scanned = (args.host, args.prefix, args.seen_before)
    if urls and any(each is not None for each in scanned):
        raise ConfigError("name URLs, or select them with --host, --prefix and --seen-before: not both")
    if not urls and all(each is None for each in scanned):
        raise ConfigError("nothing to forget: name URLs, or give --host, --prefix or --seen-before")
    refused: dict[str, str] = {}
    if urls:
        return named_selection(urls, settings, args.crawl, refused), refused
    host = None if args.host is None else canonical_host(args.host)
    before = None if args.seen_before is None else parse_date_ms(args.seen_before)
    return Selection(host=host, prefix=args.prefix, seen_before_ms=before, crawl=args.crawl), refused


def run(args: argparse.Namespace, settings: UrlDedupSettings, topics: Topics, app_id: str) -> int:
    selection, refused = selection_of(args, settings)
    for url, reason in refused.items():
        print(f"forget: {url}: not a URL the stage keeps ({reason})", file=sys.stderr)
    if selection is None:
        return 2
    if selection.prefix is not None:
        _note_prefix(selection.prefix, settings)
    kafka = kafka_config(args.config)
    report = forget(kafka, topics, app_id, selection, args.wait_s, args.recrawl, _waiting)
    return _print(report, kafka, topics, app_id, args.wait_s, args.recrawl)


def _waiting(report: ForgetReport) -> None:
    print(f"forget: {len(report.answered)} of {len(report.shards)} shards applied it ({report.forgotten} "
          f"URLs so far); waiting for shards {report.missing}", file=sys.stderr, flush=True)


def _note_prefix(prefix: str, settings: UrlDedupSettings) -> None:
    """A prefix is compared with canonical URLs as given: say so when it is not in canonical form."""
    try:
        found = canonical.canonicalize(prefix, settings.canonical())
    except RecordRejected:
        return
    if found != prefix and not found.startswith(prefix):
        print(f"forget: --prefix {prefix!r} is compared with canonical URLs as given; its canonical form "
              f"is {found!r}", file=sys.stderr)


def _print(report: ForgetReport, kafka: KafkaConfig, topics: Topics, app_id: str, wait_s: float,
           recrawl: bool) -> int:
    errors = sorted(set(report.errors.values()))
    if errors:
        print(f"forget: refused by the stage: {'; '.join(errors)}", file=sys.stderr)
        return 2
    shards = f"{len(report.answered)} shard{'s' if len(report.answered) != 1 else ''}"
    if not report.missing:
        again = "written to the frontier again" if recrawl else "new again"
        print(f"forgot {report.forgotten} URLs ({shards} applied it): they are {again}")
        return 0
    print(f"forgot {report.forgotten} URLs in the {shards} that answered; shards {report.missing} did not "
          f"answer within {wait_s:g} s ({_who(report.missing, kafka, topics, app_id)}): the forget waits in "
          "their partitions of the shard topic and is applied when a worker takes them", file=sys.stderr)
    return 1


def _who(missing: list[int], kafka: KafkaConfig, topics: Topics, app_id: str) -> str:
    """Who owns the first shard that did not answer, or why none does."""
    from confluent_kafka.admin import AdminClient

    from streams.ops.owners import shard_owners

    shard_topic = current_topics(kafka, topics, app_id, STAGE).shards(app_id, STAGE)
    owners = shard_owners(AdminClient(kafka.admin()), topics.group(app_id, STAGE), shard_topic)
    owner = owners.shards.get(missing[0])
    if owner is None:
        return owners.describe_missing(missing[0], STAGE)
    return f"shard {missing[0]} is owned by worker {owner.worker}, still busy or recovering"
