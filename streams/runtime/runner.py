"""Start a stage against Kafka: create its topics, check the shard count, run the engine.

The shard count is checked twice before any record is read, because state partitioned by shard
cannot be reinterpreted under another count: against the existing shard and changelog topics
(:func:`~streams.runtime.kafka_io.ensure_topics`) and against the ``SHARDS`` file kept beside the
worker's local stores (a state directory restored from another deployment).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.config import RuntimeSettings, TopicSettings
from streams.errors import ShardCountMismatch
from streams.runtime.engine import Engine, EngineObserver, StoreFactory, stage_dir
from streams.runtime.kafka_io import COMPACTED, KafkaConfig, TopicSpec, ensure_topics
from streams.runtime.stage import Stage
from streams.runtime.store import private_dir
from streams.topics import Topics


@dataclass(frozen=True)
class StageTopics:
    """The topics one stage reads and writes, beyond its shard topic and changelog."""

    inputs: list[str]
    outputs: list[str]


def check_local_shards(directory: Path, shards: int) -> None:
    """Record the shard count beside the stores on first start; refuse a different one later."""
    private_dir(directory)
    marker = directory / "SHARDS"
    if not marker.exists():
        marker.write_text(f"{shards}\n")
        return
    found = int(marker.read_text().strip())
    if found != shards:
        raise ShardCountMismatch(
            f"local state in {directory} was built with shards={found}, not {shards}; start with "
            f"shards={found}, or delete that directory and use a new app_id to re-shard"
        )


def run_stage(stage: Stage, io: StageTopics, kafka: KafkaConfig, settings: RuntimeSettings,
              topic_settings: TopicSettings, idle_exit_s: float | None = None,
              store_factory: StoreFactory | None = None,
              observer: Callable[[Engine], EngineObserver] | None = None) -> Engine:
    """Create topics, check shards, run until stopped; return the engine (for its counters).

    ``observer`` builds the engine's watcher once the engine exists (the CLI passes the metrics
    endpoint; the runtime itself knows nothing of Prometheus).
    """
    topics = Topics(topic_settings.prefix)
    changelog = topics.changelog(settings.app_id, stage.name)
    check_local_shards(stage_dir(settings, stage.name), settings.shards)
    specs = [TopicSpec(name, topic_settings.input_partitions) for name in io.inputs]
    specs += [TopicSpec(name, topic_settings.input_partitions) for name in io.outputs]
    specs += [
        TopicSpec(topics.dead_letters, 1),
        TopicSpec(stage.state_topic, settings.shards, fixed_partitions=True),
        TopicSpec(changelog, settings.shards, COMPACTED, fixed_partitions=True),
    ]
    ensure_topics(kafka, specs, topic_settings.replication_factor)
    group = topics.group(settings.app_id, stage.name)
    engine = Engine(stage, kafka, settings, group, changelog, topics.dead_letters, store_factory)
    engine.install_signal_handlers()
    engine.run(idle_exit_s=idle_exit_s, observer=observer(engine) if observer is not None else None)
    return engine
