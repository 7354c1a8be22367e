"""How a stage's state entries move to another shard count (``python -m streams reshard``).

A stage's state is split by the key its shard records are routed by (Kafka's default partitioner,
:func:`~streams.runtime.partitioner.partition_for`, over the shard count), so moving the state from
M shards to N means sending each entry to the shard its routing key gives under N. For most entries
the state key is that routing key, or holds it after a prefix (:class:`KeyedMove`); entries a shard
keeps about itself (a budget, the progress of its inputs) are merged and re-split by the stage's own
:class:`StateMove`. The identity entries a stage declares (``StoreSpec.identity``) are the runtime's:
they go to every new shard (:mod:`streams.runtime.reshard`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from streams.runtime.partitioner import partition_for

Placed = tuple[int, bytes, bytes]  # (new shard, state key, value)


class StateMove(Protocol):
    """One reshard's view of a stage's state: every live entry of every old shard, then the end."""

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        """Where an entry of old shard ``old_shard`` goes (nowhere, one shard, or several)."""
        ...

    def finish(self) -> Iterable[Placed]:
        """What is made of everything placed: each new shard's merged entries."""
        ...


class StateRewrite(StateMove, Protocol):
    """A move that also rewrites the entries of a state built with another identity (a stage's
    migration, :attr:`StoreSpec.rewrite <streams.runtime.store_spec.StoreSpec.rewrite>`)."""

    def summary(self) -> str:
        """What it did, for the operator (``re-fingerprinted 2 URLs: 2 moved...``)."""
        ...


class KeyedMove:
    """Entries whose state key is ``prefix_bytes`` of kind, then the key they are routed by."""

    def __init__(self, old_shards: int, shards: int, prefix_bytes: int = 0) -> None:
        self.shards = shards
        self._prefix_bytes = prefix_bytes

    def shard_of(self, key: bytes) -> int:
        return partition_for(key[self._prefix_bytes:], self.shards)

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        return ((self.shard_of(key), key, value),)

    def finish(self) -> Iterable[Placed]:
        return ()
