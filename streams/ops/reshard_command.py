"""``crawl-dedup reshard``, and a stage's migration, which is a reshard to the shard count it has.

Both move a stage's state to a new generation in Kafka (:mod:`streams.runtime.reshard`: the workers
stopped, the shard topic drained, the state copied, the switch the one commit point). A reshard
refuses a state built with other settings than the command's; ``url-dedup-migrate`` is a reshard
to the shard count the state has that rewrites such a state by the stage's store
(``StoreSpec.rewrite``: the URL stage re-fingerprints its URLs for another canonicalization).
"""

from __future__ import annotations

import argparse

from streams import config
from streams.broker.bootstrap import kafka_config
from streams.runtime.admin import (
    ReshardPlan,
    current_shards,
    replication_for_command,
    reshard,
    topic_size_config,
)
from streams.spec import StageSpec
from streams.topics import Topics


def run(spec: StageSpec, args: argparse.Namespace, shards: int | None = None) -> int:
    """Reshard ``spec``'s state to ``shards`` with the settings ``args`` give, or (None) migrate it:
    a reshard to the count it has that rewrites a state built with other settings; prints the
    steps and the report."""
    settings = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id)
    topic_settings = config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix)
    topics = Topics(topic_settings.prefix)
    stage = spec.build(spec.load_settings(args), settings)
    kafka = kafka_config(args.config)
    target = shards if shards is not None else current_shards(kafka, topics, settings.app_id, spec.name)
    plan = ReshardPlan(topics, settings.app_id, spec.name, target,
                       topic_size_config(settings.max_record_bytes),
                       replication_for_command(kafka, topic_settings), args.wait_s, args.keep_old,
                       tuple(each.name for each in spec.internal), rewrite=shards is None)
    report = reshard(kafka, plan, stage.store(), step=lambda name: print(f"reshard: {name}", flush=True))
    if report.per_table is not None:
        print(report.per_table)
    if report.rewritten is not None:
        print(report.rewritten)
    elif shards is None:
        print("the state was built with these settings already: copied as it was")
    print(f"{report.stage}: generation {report.from_generation} ({report.from_shards} shards) -> "
          f"generation {report.to_generation} ({report.to_shards} shards): {report.entries_read} entries "
          f"read, {report.entries_written} written; stop checks {report.seconds['stop checks']:.1f} s, "
          f"copy {report.seconds['copy']:.1f} s ({report.copy_s_per_million:.1f} s per million entries), "
          f"total {report.seconds['total']:.1f} s. Start the workers with shards={report.to_shards}.")
    return 0
