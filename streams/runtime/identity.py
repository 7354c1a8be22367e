"""The runtime's check of a shard's identity: what its state was built with, as the stage declares it.

Each stage that keeps versioned state (the URL stage's canonicalization, the page stage's table
design) declares a :class:`~streams.runtime.store_spec.StateIdentity`; one worker's
:class:`ShardIdentities` writes it into new shards and refuses shards built otherwise, for the
engine and for ``--offline`` alike, so no stage repeats the logic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streams.runtime.batch import BatchState
from streams.runtime.store import PartitionStore
from streams.runtime.store_spec import StateIdentity


class ShardIdentities:
    """Checks each shard's :class:`~streams.runtime.store_spec.StateIdentity` for one worker.

    On open (the store recovered) and on a shard's first use in a transaction: an empty shard is
    given the identity, in the transaction's writes, so it commits, and is changelogged, with the
    first record decided there, and so is a shard holding an earlier identity the stage adopts
    (``StateIdentity.adopted``); a shard holding another identity is refused. A shard counts as
    checked only once such a transaction commits: after an abort its identity is written again.
    """

    def __init__(self, identity: StateIdentity) -> None:
        self._identity = identity
        self._checked: set[int] = set()
        self._pending: set[int] = set()

    def opened(self, partition: int, store: PartitionStore) -> None:
        found = {key: store.get(key) for key in self._identity.entries}
        if any(value is not None for value in found.values()):
            self._compare(partition, found)
            if found == self._identity.entries:
                self._checked.add(partition)

    def first_use(self, partition: int, state: BatchState) -> None:
        """Called when a transaction first reads shard ``partition``."""
        identity = self._identity
        if partition in self._checked:
            return
        found = {key: state.get(key) for key in identity.entries}
        if any(value is not None for value in found.values()):
            self._compare(partition, found)
        if found != identity.entries:
            for key, value in identity.entries.items():
                state.set(key, value)
        self._pending.add(partition)

    def _compare(self, partition: int, found: Mapping[bytes, bytes | None]) -> None:
        if not self._identity.accepts(found):
            raise self._identity.refusal(partition, found)

    def committed(self) -> None:
        self._checked |= self._pending
        self._pending = set()

    def aborted(self) -> None:
        self._pending = set()

    def refused(self) -> None:
        """Nothing: a refused record's state writes stand, and the shard's first use with them."""

    def revoked(self, partitions: Iterable[int]) -> None:
        self._checked.difference_update(partitions)
