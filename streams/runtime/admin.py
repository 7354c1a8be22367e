"""The runtime's surface for the command line and cluster administration: all that ``cli.py``,
``ops/``, ``dev/`` and ``broker/`` import of :mod:`streams.runtime` beside :mod:`streams.runtime.api`
(the stage contract) and :mod:`streams.runtime.snapshot` (what a running worker publishes for the
metrics endpoint, the probes and ``/status``).

Why a second public module: what a stage is made of and how an operator runs and moves stages
change for different reasons and are read by different code. A stage imports
:mod:`streams.runtime.api` alone and never runs a worker, resizes a cluster's state or creates a
replay's topics; the commands do, and they should not reach into the runtime's own modules to do it
(``tools/import_rules.py``, run by ``make lint``, refuses that). Everything here is the runtime's
own code, re-exported:

- the cluster: :class:`KafkaConfig` (bootstrap and client settings), :func:`reach_cluster` (a
  broker answers, or a start-up error that says what to do), :func:`error_text` (a client error
  in the operator's words);
- records: :func:`read_to_end`, :func:`produce_all`, the sizes a record is checked against
  (:data:`CLIENT_MAX_MESSAGE_BYTES`, :data:`RECORD_OVERHEAD`);
- topics: :class:`TopicSpec`, :func:`ensure_topics`, :func:`output_limits`,
  :func:`replication_for_command` (the copies a command's topics keep), :func:`current_topics`
  (the topic names of a stage's current state generation);
- running a stage: :func:`run_stage` (a worker against Kafka), :func:`run_offline` (standard input
  to standard output, one local store);
- moving a stage's state to another shard count: :class:`ReshardPlan`, :func:`reshard`,
  :func:`current_shards` (its count now: a reshard to it rewrites the state in place, a stage's
  migration), :func:`topic_size_config` (the ``max.message.bytes`` of the topics a stage creates).
"""

from __future__ import annotations

from streams.runtime.client_log import error_text
from streams.runtime.generations import current_topics
from streams.runtime.kafka_io import (
    CLIENT_MAX_MESSAGE_BYTES,
    RECORD_OVERHEAD,
    KafkaConfig,
    produce_all,
    read_to_end,
)
from streams.runtime.offline import run_offline
from streams.runtime.reach import reach_cluster
from streams.runtime.replication import for_command as replication_for_command
from streams.runtime.reshard import ReshardPlan, current_shards, reshard
from streams.runtime.runner import run_stage, topic_size_config
from streams.runtime.topic_admin import TopicSpec, ensure_topics, output_limits

__all__ = [
    "CLIENT_MAX_MESSAGE_BYTES", "RECORD_OVERHEAD", "KafkaConfig", "ReshardPlan", "TopicSpec",
    "current_shards", "current_topics", "ensure_topics", "error_text", "output_limits", "produce_all",
    "reach_cluster", "read_to_end", "replication_for_command", "reshard", "run_offline", "run_stage",
    "topic_size_config",
]
