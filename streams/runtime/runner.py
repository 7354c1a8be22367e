"""Start a stage against Kafka: create its topics, check the shard count, run the engine.

The shard count is checked three times before any record is read, because state partitioned by
shard cannot be reinterpreted under another count: against the current generation of the stage's
state (:mod:`streams.runtime.generations`; after a reshard, again on every assignment), against the
existing shard and changelog topics (:func:`~streams.runtime.topic_admin.ensure_topics`) and against
the ``SHARDS`` file kept beside the worker's local stores (a state directory restored from another
deployment). Local stores of an earlier generation (the ``GENERATION`` file) are a cache of state
that moved: they are removed, and the worker rebuilds its shards from the current changelog.

Replication: the topics a stage creates keep the copies :mod:`streams.runtime.replication` chooses
(the settings, else the cluster's defaults, never below the input's), checked before anything is read.

Record sizes: an input record may be up to ``max_record_bytes`` (16 MB by default), and the stages
pass large records on (the page stage sends a page's body to ``unique-pages``, and to its shard
topic when another worker owns the page's gather shard). So every topic a stage creates gets a
``max.message.bytes`` of ``max_record_bytes`` plus :data:`OUTPUT_HEADROOM` (the fields a stage
adds), not the broker's 1 MB default; and the engine learns each written topic's actual limit,
existing topics included, so a record whose output would not fit becomes a dead letter instead of
failing its batch forever.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.compiled import compiled_modules
from streams.config import RuntimeSettings, TopicSettings
from streams.errors import ShardCountMismatch, StaleGeneration
from streams.runtime.access import ClusterWatch
from streams.runtime.drain import DRAIN_IDLE_EXIT_S
from streams.runtime.engine import UNOBSERVED, Engine, EngineObserver
from streams.runtime.generations import read_generation, require_current
from streams.runtime.kafka_io import RECORD_OVERHEAD, KafkaConfig
from streams.runtime.replication import for_stage as replication_for_stage
from streams.runtime.restore import tune_garbage_collector
from streams.runtime.shards import stage_dir
from streams.runtime.stage import Stage
from streams.runtime.store import disk_errors, private_dir
from streams.runtime.topic_admin import COMPACTED, TopicSpec, ensure_topics, output_limits
from streams.runtime.topology import Topology
from streams.topics import Topics

log = logging.getLogger(__name__)

# What a stage adds to the largest input record it passes on: a page's SimHash and digests, a URL's
# canonical form, host and fingerprint (each at most a few kilobytes), with a wide margin.
OUTPUT_HEADROOM = 1024 * 1024


def check_local_shards(directory: Path, shards: int, generation: int = 0) -> None:
    """Record the shard count and generation beside the stores on first start; refuse a different
    count later, and replace the stores of an earlier generation."""
    with disk_errors(directory):
        private_dir(directory)
        _check_local_generation(directory, generation)
        _check_local_shard_count(directory, shards)


def _check_local_shard_count(directory: Path, shards: int) -> None:
    marker = directory / "SHARDS"
    if not marker.exists():
        _write_marker(marker, shards)
        return
    found = int(marker.read_text().strip())
    if found != shards:
        raise ShardCountMismatch(
            f"local state in {directory} was built with shards={found}, not {shards}; start with "
            f"shards={found}, or move the state to {shards} shards with 'python -m streams reshard' "
            "(docs/production.md, 'Scaling out')"
        )


def _check_local_generation(directory: Path, generation: int) -> None:
    marker = directory / "GENERATION"
    found = int(marker.read_text().strip()) if marker.exists() else 0
    if found > generation:
        raise StaleGeneration(f"local state in {directory} is of generation {found}, but generation "
                              f"{generation} is current: this worker is out of date, or the state was "
                              "rolled back")
    stores = [*directory.glob("shard-*")]
    if found < generation:
        for store in [*stores, directory / "SHARDS"]:
            if store.is_dir():
                shutil.rmtree(store)
            elif store.exists():
                store.unlink()
    if found < generation and stores:
        log.warning("local state in %s was of generation %d, resharded since: rebuilding generation %d "
                    "from its changelog", directory, found, generation)
    _write_marker(marker, generation)


def _write_marker(marker: Path, number: int) -> None:
    """Write ``number`` to ``marker`` unless it holds it already; replaced whole, so a full disk
    leaves the old marker rather than an empty one."""
    text = f"{number}\n"
    if marker.exists() and marker.read_text() == text:
        return
    staging = marker.with_suffix(".new")
    try:
        staging.write_text(text)
    except OSError:
        staging.unlink(missing_ok=True)
        raise
    os.replace(staging, marker)


def generation_check(kafka: KafkaConfig, topics: Topics, app_id: str, stage: str,
                     shards: int) -> Callable[[], None]:
    """A check that the generation ``topics`` names for ``stage`` is current with ``shards``
    shards; made once here, and by the engine on every assignment."""
    generations_topic = topics.generations_topic(app_id, stage)

    def check() -> None:
        require_current(read_generation(kafka, generations_topic), stage, topics.generation(stage), shards)

    check()
    return check


def topic_size_config(max_record_bytes: int) -> dict[str, str]:
    """The ``max.message.bytes`` of the topics a stage creates: its largest input and what it adds."""
    return {"max.message.bytes": str(max_record_bytes + OUTPUT_HEADROOM + RECORD_OVERHEAD)}


def run_stage(topology: Topology, stage: Stage, kafka: KafkaConfig, settings: RuntimeSettings,
              topic_settings: TopicSettings, idle_exit_s: float | None = None,
              observer: Callable[[Engine], EngineObserver] | None = None, generation: int = 0,
              drain: bool = False) -> Engine:
    """Create topics, check shards, run until stopped; return the engine (for its counters).

    ``topology``: the stage's topics, of the generation ``generation`` of its state (the one the
    stage was built for). ``observer`` builds the engine's watcher once the engine exists (the CLI
    passes the metrics endpoint; the runtime itself knows nothing of Prometheus). ``drain``: route
    the input up to a cut, decide what was routed, and exit once idle (:mod:`streams.runtime.drain`).
    """
    name = topology.stage
    topics = Topics(topic_settings.prefix).at_generation(name, generation)
    check = generation_check(kafka, topics, settings.app_id, name, settings.shards)
    check_local_shards(stage_dir(settings, name), settings.shards, generation)
    sized = topic_size_config(settings.max_record_bytes)
    internal = [topic for _, topic in topology.internal]
    specs = [TopicSpec(name, topic_settings.input_partitions, sized) for name in topology.input_topics]
    specs += [TopicSpec(name, topic_settings.input_partitions, sized) for name in topology.output_topics]
    specs += [TopicSpec(topology.dead_letters, 1, sized)]
    specs += [TopicSpec(topic, settings.shards, sized, fixed_partitions=True) for topic in internal]
    specs += [TopicSpec(topology.changelog, settings.shards, {**COMPACTED, **sized}, fixed_partitions=True)]
    replication = replication_for_stage(
        kafka, topic_settings, [*topology.input_topics],
        [*internal, topology.changelog, topics.generations_topic(settings.app_id, name)],
        [spec.name for spec in specs])
    ensure_topics(kafka, specs, replication)
    limits = output_limits(kafka, [*topology.output_topics, topology.dead_letters, *internal,
                                   topology.changelog])
    # What a stage stores for a shard record may be as large as the record, and what it stores
    # goes to the changelog: a shard record must fit both.
    changelog_limit = limits.pop(topology.changelog)
    for topic in internal:
        limits[topic] = min(limits[topic], changelog_limit)
    used = [*internal, topology.changelog]
    watch = ClusterWatch(kafka, topology.group, reads=[*topology.input_topics, *used],
                         writes=[*topology.output_topics, topology.dead_letters, *used])
    engine = Engine(stage, topology, kafka, settings, output_limits=limits, drain=drain,
                    assignment_check=check, watch=watch)
    engine.install_signal_handlers()
    try:  # the observer may refuse to start (a metrics port taken): close the engine's clients
        watching = observer(engine) if observer is not None else UNOBSERVED
    except BaseException:
        engine.close()
        raise
    engine.lifecycle.started(start_facts(settings, kafka, generation, drain))
    tune_garbage_collector()
    if idle_exit_s is None:
        idle_exit_s = DRAIN_IDLE_EXIT_S if drain else math.inf
    engine.run(idle_exit_s=idle_exit_s, observer=watching)
    return engine


def start_facts(settings: RuntimeSettings, kafka: KafkaConfig, generation: int,
                drain: bool) -> dict[str, Any]:
    """What the start line tells (:mod:`streams.runtime.lifecycle`)."""
    from streams.version import package_version

    compiled = compiled_modules()
    return {"version": package_version(),
            "build": f"compiled ({len(compiled)} modules)" if compiled else "pure Python",
            "worker_id": settings.worker_id, "app_id": settings.app_id, "shards": settings.shards,
            "generation": generation, "brokers": kafka.bootstrap_servers,
            "mode": "drain" if drain else "run"}
