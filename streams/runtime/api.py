"""The stage contract: all a stage imports from :mod:`streams.runtime`.

The rest of ``streams/runtime/`` is the runtime's own (the engine, recovery, the commit steps, the
Kafka plumbing) and may change shape without a stage noticing; ``tools/import_rules.py`` (run by
``make lint``) refuses an import of it from ``streams/stages/``, and from the rest of the package
of anything but this module, :mod:`streams.runtime.admin` (cluster administration) and
:mod:`streams.runtime.snapshot` (what a running worker publishes for ``ops/``).

What a stage is made of:

- :class:`Stage`: ``store()`` and ``init(context)``; :class:`Processors` (its ``route`` step and a
  processor per internal topic or typed record, :class:`On`); :class:`InternalTopic`, one it
  declares, and :class:`Topology`, its topics resolved in one application;
- :class:`StageContext`: the services (shards, outputs, internal topics as :class:`InternalStream`,
  transaction listeners (:class:`TransactionListener`), callbacks last in each transaction, input
  preparation, dead letters, counts);
- :class:`StoreSpec`, :class:`StateIdentity`, :func:`rocks_store`: its store, declared; for a
  store of its own, the interface :class:`PartitionStore` (and :class:`Measured`), :class:`RocksStore`
  and :func:`private_dir` (and :func:`disk_errors`, a full disk told as such); how its state moves
  on a reshard: :class:`KeyedMove`, :data:`Placed`;
- the values its processors handle: :class:`Message`, :class:`Emit`, :class:`BatchState`,
  :class:`OwnedShards`, :class:`InputPositions`, :class:`InputReader`;
- :func:`partition_for` (the shard of a key), :class:`ProcessMap` (work in child processes, one
  :class:`Pending` per submission) and :func:`this_process_cores` (how many cores to spread it
  over).

What a stage's own commands and an integration use of the cluster: :class:`KafkaConfig`,
:func:`ensure_topics`, :class:`TopicSpec`, :func:`current_topics` (the rest of cluster
administration is :mod:`streams.runtime.admin`'s).

A stage's topics, settings and command are declared in its :class:`streams.spec.StageSpec`, which
turns the declaration into the runtime's :class:`Topology`.
"""

from __future__ import annotations

from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.context import StageContext
from streams.runtime.cores import this_process_cores
from streams.runtime.generations import current_topics
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.listeners import TransactionListener
from streams.runtime.message import InputPositions, InputReader, Message
from streams.runtime.moves import KeyedMove, Placed
from streams.runtime.parallel import Pending, ProcessMap
from streams.runtime.partitioner import partition_for
from streams.runtime.stage import Stage
from streams.runtime.store import Measured, PartitionStore, RocksStore, disk_errors, private_dir
from streams.runtime.store_spec import StateIdentity, StoreSpec, rocks_store
from streams.runtime.topic_admin import TopicSpec, ensure_topics
from streams.runtime.topology import InternalStream, InternalTopic, On, Processors, Topology

__all__ = [
    "BatchState", "Emit", "InputPositions", "InputReader", "InternalStream", "InternalTopic", "KafkaConfig",
    "KeyedMove", "Measured", "Message", "On", "OwnedShards", "PartitionStore", "Pending", "Placed",
    "ProcessMap", "Processors", "RocksStore", "Stage", "StageContext", "StateIdentity", "StoreSpec",
    "TopicSpec", "Topology", "TransactionListener", "current_topics", "disk_errors", "ensure_topics",
    "partition_for", "private_dir", "rocks_store", "this_process_cores",
]
