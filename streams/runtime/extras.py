"""What a stage may use beyond the stage contract (:mod:`streams.runtime.api`), for needs of its own.

The contract is what every stage is made of: its processors, its context, its records and its
store's declaration. A stage that goes further takes what it needs from here, so the contract stays
small and each of these says by its import what it is for:

- **a store of its own kind or moved its own way**: :class:`RocksStore` (the store most stages
  declare, to wrap: the URL stage puts a Bloom filter in front of it), :func:`rocks_store`
  (RocksDB in PlainTable format for point reads), :class:`Measured` (a store that reports its own
  gauges), :func:`private_dir` and :func:`disk_errors` (files beside a shard's store, a full disk
  told as such); :class:`KeyedMove` and :data:`Placed` (entries moved on a reshard by the key they
  are routed by), :func:`starts_afresh` and :class:`refused` (a table's entries dropped by a
  reshard, or refusing it);
- **what it owns and where its inputs stand, to keep decisions of its own about them**:
  :class:`OwnedShards` (the shards this worker owns, as the open transaction sees them),
  :class:`InputPositions` and :class:`InputReader` (the page stage's progress reports);
- **work in child processes**: :class:`ProcessMap` (one :class:`Pending` per submission) and
  :func:`this_process_cores` (how many cores to spread it over), the page stage's analysis;
- **the cluster, for a stage's own commands and the integrations**: :class:`KafkaConfig`,
  :func:`ensure_topics`, :class:`TopicSpec`, :func:`current_topics` (the rest of cluster
  administration is :mod:`streams.runtime.admin`'s).

Like the contract, re-exports of the runtime's own code; ``tools/import_rules.py`` lets a stage
import this module and the contract, and refuses a name here that nothing outside the runtime uses.
"""

from __future__ import annotations

from streams.runtime.batch import OwnedShards
from streams.runtime.cores import this_process_cores
from streams.runtime.generations import current_topics
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.message import InputPositions, InputReader
from streams.runtime.moves import KeyedMove, Placed
from streams.runtime.parallel import Pending, ProcessMap
from streams.runtime.store import Measured, RocksStore, disk_errors, private_dir
from streams.runtime.store_spec import rocks_store
from streams.runtime.tables import refused, starts_afresh
from streams.runtime.topic_admin import TopicSpec, ensure_topics

__all__ = [
    "InputPositions", "InputReader", "KafkaConfig", "KeyedMove", "Measured", "OwnedShards", "Pending",
    "Placed", "ProcessMap", "RocksStore", "TopicSpec", "current_topics", "disk_errors", "ensure_topics",
    "private_dir", "refused", "rocks_store", "starts_afresh", "this_process_cores",
]
