"""Transaction listeners: what hears of a transaction's end, of a refused record and of shards gone.

Services that keep something per transaction (the shards' first uses, a stage's own memory of
what it routed) must let it go when the transaction aborts and keep it when it commits. Each
driver used to call each of them by hand, in its own order, and a stage's memory was a runtime
service that only the URL stage used. Now each is a
:class:`TransactionListener`, a stage registers its own in ``init``
(:meth:`streams.runtime.context.StageContext.listen`), and a driver (the engine, ``--offline``)
tells them all, once, through :class:`Listeners`: after the transaction committed and its state was
applied, after it aborted, after a record's outputs were refused (the record became a dead letter
instead), and when shards went to another worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TransactionListener(Protocol):
    """Told of the transactions of one worker (see the module docstring). A class that names it as
    its base inherits doing nothing, and writes out only what it listens to."""

    def committed(self) -> None:
        """The open transaction committed; its state writes are applied."""
        return None

    def aborted(self) -> None:
        """The open transaction aborted: nothing of it stands (its records are processed again)."""
        return None

    def refused(self) -> None:
        """The record just processed was refused, its outputs replaced by a dead letter."""
        return None

    def revoked(self, shards: Sequence[int]) -> None:
        """These shards went to another worker (their transactions are over)."""
        return None


class Listeners:
    """Every listener of one worker, told in the order they were registered."""

    __slots__ = ("_listeners",)

    def __init__(self, listeners: Sequence[TransactionListener]) -> None:
        self._listeners = tuple(listeners)

    def committed(self) -> None:
        for listener in self._listeners:
            listener.committed()

    def aborted(self) -> None:
        for listener in self._listeners:
            listener.aborted()

    def refused(self) -> None:
        for listener in self._listeners:
            listener.refused()

    def revoked(self, shards: Sequence[int]) -> None:
        for listener in self._listeners:
            listener.revoked(shards)
