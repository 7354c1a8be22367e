"""How many copies the topics a stage creates keep, and the check at start that the cluster can keep
them.

Why it matters: the stages' exactly-once promise stands on Kafka's own, no acknowledged write is
lost while ``min.insync.replicas`` replicas of its partition live (the Kafka documentation, Design,
"Replicated Logs: Quorums, ISRs, and State Machines"). A changelog with one replica loses its shards'
state with its broker's disk; a shard topic with one replica loses the records routed to it and not
yet decided, whose input offsets are already committed. So the internal topics (shard, changelog,
generations) keep at least as many copies as the input the crawler entrusted to the cluster.

The choice, for every topic a stage creates (internal, output and dead-letter topics alike):

- replication factor: ``[topics] replication_factor`` when set, else the cluster's
  ``default.replication.factor``, and never below the largest replication factor of the stage's
  existing input topics;
- ``min.insync.replicas``: ``[topics] min_insync_replicas`` when set, else the cluster's
  ``min.insync.replicas``, and never below the input topics' own.

Checked at start, before anything is read, each failure one :class:`~streams.errors.ConfigError`
that says what to do: ``min.insync.replicas`` above the replication factor (no write could ever be
acknowledged); a topic to create with more replicas than the cluster has live brokers (Kafka would
refuse it); an existing internal topic with fewer replicas, or a lower ``min.insync.replicas``, than
chosen (a cluster changed under its state). Fewer live brokers than ``min.insync.replicas`` at start
is only a warning: writes wait for brokers to return, as they do when brokers fail under a running
worker, and a worker restarted during a rolling restart must not refuse to start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # re-exported by confluent_kafka.admin, undeclared

from streams.config import TopicSettings
from streams.errors import ConfigError
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.topic_admin import Replication

log = logging.getLogger(__name__)

FACTOR, MIN_INSYNC = "default.replication.factor", "min.insync.replicas"


@dataclass(frozen=True)
class _Found:
    """What the cluster says: live brokers, its defaults (None: unreadable), the topics' replicas."""

    brokers: int
    cluster_factor: int | None
    cluster_min_insync: int | None
    replicas: dict[str, int]      # existing topic -> the fewest replicas of any of its partitions
    min_insync: dict[str, int]    # existing topic -> its min.insync.replicas


def for_stage(kafka: KafkaConfig, settings: TopicSettings, inputs: Sequence[str], internal: Sequence[str],
              created: Sequence[str], timeout_s: float = 30.0) -> Replication:
    """The replication of the topics a stage creates, checked against the cluster (module docstring).

    ``inputs``: the stage's input topics; ``internal``: its shard, changelog and generations topics;
    ``created``: every topic it creates when missing."""
    found = _look(kafka, [*inputs, *internal, *created], timeout_s)
    chosen, why = _choose(settings, found, inputs)
    _check(chosen, why, found, internal, [name for name in created if name not in found.replicas])
    return chosen


def for_command(kafka: KafkaConfig, settings: TopicSettings, timeout_s: float = 30.0) -> Replication:
    """The replication of topics a command creates outside a stage (reshard, replay): the settings,
    else the cluster's defaults."""
    found = _look(kafka, [], timeout_s)
    chosen, why = _choose(settings, found, [])
    _check(chosen, why, found, [], [])
    return chosen


def _choose(settings: TopicSettings, found: _Found, inputs: Sequence[str]) -> tuple[Replication, str]:
    for name, value in (("replication_factor", settings.replication_factor),
                        ("min_insync_replicas", settings.min_insync_replicas)):
        if value is not None and value < 1:
            raise ConfigError(f"[topics] {name} must be at least 1, not {value}")
    input_factor = max((found.replicas[name] for name in inputs if name in found.replicas), default=1)
    input_min = max((found.min_insync[name] for name in inputs if name in found.min_insync), default=1)
    if settings.replication_factor is not None:
        factor, why_factor = settings.replication_factor, "[topics] replication_factor"
    else:
        factor = max(found.cluster_factor or 1, input_factor)
        why_factor = ("the input topics' replication factor" if input_factor > (found.cluster_factor or 1)
                      else f"the cluster's {FACTOR}")
    if settings.min_insync_replicas is not None:
        min_insync, why_min = settings.min_insync_replicas, "[topics] min_insync_replicas"
    else:
        min_insync = max(found.cluster_min_insync or 1, input_min)
        why_min = (f"the input topics' {MIN_INSYNC}" if input_min > (found.cluster_min_insync or 1)
                   else f"the cluster's {MIN_INSYNC}")
    return Replication(factor, min_insync), f"replication factor {factor} ({why_factor}), " \
                                           f"min.insync.replicas {min_insync} ({why_min})"


def _check(chosen: Replication, why: str, found: _Found, internal: Sequence[str],
           missing: Sequence[str]) -> None:
    if chosen.min_insync > chosen.factor:
        raise ConfigError(f"{why}: no write could ever be acknowledged with more in-sync replicas "
                          "required than replicas kept; lower [topics] min_insync_replicas or raise "
                          "replication_factor")
    if missing and chosen.factor > found.brokers:
        raise ConfigError(f"cannot create {', '.join(missing)} with {why}: the cluster has {found.brokers} "
                          f"live broker(s); start the others, or set [topics] replication_factor "
                          f"(STREAMS_TOPICS_REPLICATION_FACTOR) to at most {found.brokers}")
    for name in internal:
        if name in found.replicas and found.replicas[name] < chosen.factor:
            raise ConfigError(
                f"internal topic {name} keeps {found.replicas[name]} replica(s) of some partition, fewer "
                f"than {why}: raise it with kafka-reassign-partitions (docs/configuration.md, "
                f"'Replication'), or set "
                f"[topics] replication_factor = {found.replicas[name]} to run on fewer copies")
        if name in found.min_insync and found.min_insync[name] < chosen.min_insync:
            raise ConfigError(
                f"internal topic {name} has min.insync.replicas {found.min_insync[name]}, below {why}: "
                f"kafka-configs --alter --entity-type topics --entity-name {name} --add-config "
                f"min.insync.replicas={chosen.min_insync}, or set [topics] min_insync_replicas = "
                f"{found.min_insync[name]}")
    if found.brokers < chosen.min_insync:
        log.warning("%d live broker(s), fewer than min.insync.replicas %d: writes wait until enough return",
                    found.brokers, chosen.min_insync)


def _look(kafka: KafkaConfig, topics: Sequence[str], timeout_s: float) -> _Found:
    admin = AdminClient(kafka.admin())
    metadata = admin.list_topics(timeout=timeout_s)
    replicas = {name: min((len(p.replicas) for p in metadata.topics[name].partitions.values()), default=0)
                for name in dict.fromkeys(topics) if name in metadata.topics}
    resources = [ConfigResource("topic", name) for name in replicas]
    broker = min(metadata.brokers, default=None)
    if broker is not None:
        resources.append(ConfigResource("broker", str(broker)))
    described = _describe(admin, resources, timeout_s)
    defaults = described.pop(f"broker:{broker}", {})
    if broker is not None and not defaults:
        log.warning("the cluster's default.replication.factor and min.insync.replicas are unreadable (no "
                    "DescribeConfigs on the cluster?): set [topics] replication_factor and "
                    "min_insync_replicas")
    min_insync = {name.removeprefix("topic:"): values[MIN_INSYNC] for name, values in described.items()
                  if MIN_INSYNC in values}
    return _Found(len(metadata.brokers), defaults.get(FACTOR), defaults.get(MIN_INSYNC), replicas, min_insync)


def _describe(admin: AdminClient, resources: list[ConfigResource],
              timeout_s: float) -> dict[str, dict[str, int]]:
    """``"topic:<name>"`` / ``"broker:<id>"`` -> the replication settings each has; an unreadable one
    (no DescribeConfigs permission) is left out."""
    if not resources:
        return {}
    described: dict[str, dict[str, int]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        kind = "broker" if resource.restype == ConfigResource.Type.BROKER else "topic"
        try:
            entries = future.result()
            described[f"{kind}:{resource.name}"] = {
                name: int(entries[name].value) for name in (FACTOR, MIN_INSYNC)
                if name in entries and entries[name].value is not None}
        except (KafkaException, ValueError) as error:
            log.warning("configuration of %s %s unreadable: %s", kind, resource.name, error)
    admin.poll(0)
    return described
