"""The stage contract: what every stage is made of, and all a stage needs of :mod:`streams.runtime`.

The rest of ``streams/runtime/`` is the runtime's own (the engine, recovery, the commit steps, the
Kafka plumbing) and may change shape without a stage noticing; ``tools/import_rules.py`` (run by
``make lint``) refuses an import of it from ``streams/stages/``, and from the rest of the package
of anything but this module, :mod:`streams.runtime.extras` (what a stage may use beyond the
contract: a store of its own kind, child processes, the cluster for its own commands),
:mod:`streams.runtime.admin` (cluster administration) and :mod:`streams.runtime.snapshot` (what a
running worker publishes for ``ops/``).

What a stage is made of (after Kafka Streams' processor API):

- :class:`Stage`: ``store()``, ``init(context)`` and ``close()``; :class:`Processors` (its
  ``route`` step and a processor per internal topic or typed record, :class:`On`);
  :class:`InternalTopic`, one it declares, and :class:`Topology`, its topics resolved in one
  application;
- :class:`StageContext`: the services (shards, outputs, internal topics as :class:`InternalStream`,
  transaction listeners (:class:`TransactionListener`), callbacks last in each transaction, input
  preparation, dead letters, counts);
- :class:`StoreSpec` and :class:`StateIdentity`: its store, declared, with its named stores
  (:class:`Table`, :mod:`streams.runtime.tables`); :class:`PartitionStore`: a shard's committed
  store, as a worker's ``/status`` reads it;
- the values its processors handle: :class:`Message`, :class:`Emit`, :class:`BatchState`;
  :func:`partition_for` (the shard of a key).

A stage's topics, settings and command line are declared in its :class:`streams.spec.StageSpec`,
which turns the declaration into the runtime's :class:`Topology`.
"""

from __future__ import annotations

from streams.runtime.batch import BatchState, Emit
from streams.runtime.context import StageContext
from streams.runtime.listeners import TransactionListener
from streams.runtime.message import Message
from streams.runtime.partitioner import partition_for
from streams.runtime.stage import Stage
from streams.runtime.store import PartitionStore
from streams.runtime.store_spec import StateIdentity, StoreSpec
from streams.runtime.tables import Table
from streams.runtime.topology import InternalStream, InternalTopic, On, Processors, Topology

__all__ = [
    "BatchState", "Emit", "InternalStream", "InternalTopic", "Message", "On", "PartitionStore", "Processors",
    "Stage", "StageContext", "StateIdentity", "StoreSpec", "Table", "Topology", "TransactionListener",
    "partition_for",
]
