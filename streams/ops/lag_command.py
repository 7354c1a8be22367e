"""``crawl-dedup lag``: each stage's consumer lag, per topic and partition.

The same measurement the workers export as ``crawl_dedup_consumer_lag_records`` (see
:mod:`streams.ops.lag`), taken once for every stage group of an application, whether or not a worker
is running: the lag of a stage whose workers all died is still measurable. ``--max-lag N`` makes it
a check for cron and CI: exit 1 when a stage's group is more than N records behind, summed over its
topics and partitions (a caught-up group still shows one transaction marker per shard partition).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from streams import config, registry
from streams.broker.bootstrap import kafka_config
from streams.ops.lag import PartitionLag, group_lag, topic_partitions
from streams.runtime.admin import KafkaConfig, current_topics
from streams.topics import Topics


def stage_topics(topics: Topics, app_id: str, stage: str) -> list[str]:
    """What a stage's group reads: its input topics (its spec, streams/registry.py), then its own
    internal topics (of the generation ``topics`` names, :func:`current_topics`)."""
    topology = registry.spec(stage).topology(topics, app_id)
    return [*topology.input_topics, *(topic for _, topic in topology.internal)]


def _stage_names() -> list[str]:
    return [spec.name for spec in registry.STAGES]


def measure(kafka: KafkaConfig, admin: AdminClient, topics: Topics, app_id: str,
            stages: list[str]) -> list[PartitionLag]:
    lags: list[PartitionLag] = []
    for stage in stages:
        current = current_topics(kafka, topics, app_id, stage)
        partitions = topic_partitions(admin, stage_topics(current, app_id, stage))
        group = topics.group(app_id, stage)
        reader = Consumer(kafka.consumer(group))  # never subscribes, so it never joins the group
        try:
            lags.extend(group_lag(admin, reader, group, partitions))
        finally:
            reader.close()
    return lags


def render(lags: list[PartitionLag], per_partition: bool) -> str:
    """A table: one line per group and topic (with its partitions when asked)."""
    lines = [f"{'group':<40} {'topic':<44} {'partition':>9} {'committed':>10} {'end':>10} {'lag':>8}"]
    sums: dict[tuple[str, str], list[PartitionLag]] = {}
    for lag in lags:
        sums.setdefault((lag.group, lag.topic), []).append(lag)
    for (group, topic), parts in sums.items():
        committed = sum(p.committed or 0 for p in parts)
        end = sum(p.end for p in parts)
        lines.append(f"{group:<40} {topic:<44} {'all':>9} {committed:>10} {end:>10} "
                     f"{sum(p.lag for p in parts):>8}")
        if per_partition:
            for p in parts:
                shown = "-" if p.committed is None else str(p.committed)
                lines.append(f"{'':<40} {'':<44} {p.partition:>9} {shown:>10} {p.end:>10} {p.lag:>8}")
    return "\n".join(lines)


def _handler(args: argparse.Namespace) -> int:
    app_id = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id).app_id
    prefix = config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix
    kafka = kafka_config(args.config)
    stages = args.stage or _stage_names()
    lags = measure(kafka, AdminClient(kafka.admin()), Topics(prefix), app_id, stages)
    if args.json:
        for lag in lags:
            row: dict[str, Any] = {"group": lag.group, "topic": lag.topic, "partition": lag.partition,
                                   "committed": lag.committed, "end": lag.end, "lag": lag.lag}
            sys.stdout.buffer.write(orjson.dumps(row) + b"\n")
    else:
        print(render(lags, args.partitions))
    return 0 if args.max_lag is None else over_limit(lags, args.max_lag)


def over_limit(lags: list[PartitionLag], max_lag: int) -> int:
    """1 (named on stderr) when a group's lag, summed over its partitions, is above ``max_lag``."""
    totals: dict[str, int] = {}
    for lag in lags:
        totals[lag.group] = totals.get(lag.group, 0) + lag.lag
    over = {group: total for group, total in totals.items() if total > max_lag}
    for group, total in over.items():
        print(f"lag of {group}: {total} records, above --max-lag {max_lag}", file=sys.stderr)
    return 1 if over else 0


def add_parser(commands: Any) -> None:
    command = commands.add_parser(
        "lag", help="consumer lag of each stage, per topic",
        description="Consumer lag of each stage group, per topic: the end offset at read_committed "
                    "minus the committed offset, the same figures the workers export.")
    command.add_argument("--app-id", default=None, help="application id (default from settings)")
    command.add_argument("--topic-prefix", default=None, help="prefix of every topic name")
    command.add_argument("--stage", action="append", choices=sorted(_stage_names()),
                         help="only this stage (repeatable; default: all three)")
    command.add_argument("--partitions", action="store_true", help="one line per partition too")
    command.add_argument("--json", action="store_true", help="one JSON object per partition")
    command.add_argument("--max-lag", type=int, default=None, metavar="N",
                         help="exit 1 when a stage's group is more than N records behind in all (for "
                              "cron and CI; a caught-up group shows 1 per shard partition: markers)")
    command.set_defaults(handler=_handler)
