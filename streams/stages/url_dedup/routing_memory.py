"""What the URL stage's router remembers across transactions: fingerprints it routed, answered from
memory later.

The stage's combiner in front of its shards. Why: most of a frontier is repeats
(bench/results/url.md gives the benchmark's share; more in a real crawl, where every page links its
site's navigation again). A repeat's only outcome is "seen", yet without a local answer each one
costs a trip through the shard topic: encoded, produced, fetched back, decided. A worker that has
itself routed a fingerprint in a committed transaction knows that this URL's first sighting is in
the shard topic and will be decided before anything routed after it, so every later sighting is a
repeat, whichever worker owns the shard. Dropping it at routing is a map-side combiner (the idea of
MapReduce's combiners, Dean and Ghemawat, OSDI 2004): the same decisions, less traffic. Only
membership matters and a miss costs only the trip, so the set may forget: it is bounded, never
exact.

Bounded by two generations (the "2Q"/generational trick without per-entry bookkeeping): keys go
to the young set; when it holds half the capacity it becomes the old set and the previous old set
is dropped. A key is found while it is in either, so every key is remembered for at least
``capacity / 2`` later insertions, and at most ``capacity`` keys are held. Memory is about 90 bytes
per key held (a 16-byte ``bytes`` object and its set slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class RecentKeys:
    """At most ``capacity`` keys; each remembered for at least ``capacity // 2`` later additions."""

    __slots__ = ("_half", "_old", "_young", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._half = max(1, capacity // 2)
        self._young: set[bytes] = set()
        self._old: set[bytes] = set()

    def __contains__(self, key: bytes) -> bool:
        return key in self._young or key in self._old

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def update(self, keys: Iterable[bytes]) -> None:
        young = self._young
        for key in keys:
            young.add(key)
            if len(young) >= self._half:
                self._old, young = young, set()
        self._young = young


class RoutingMemory:
    """Keys a router routed, remembered only as long as what they stand for is certain to commit.

    The router notes the key of a record as it routes it (:meth:`note`, at most one key a record):
    the key joins the open transaction's. It is the stage's transaction listener
    (:class:`streams.runtime.api.TransactionListener`): when the runtime refuses the record's
    outputs (one too large becomes a dead letter), the last key noted is dropped (:meth:`refused`;
    if that record noted none, an earlier key goes, which costs a trip and nothing else); the open
    transaction's keys are kept (bounded, :class:`RecentKeys`) once it commits and forgotten when
    it aborts. So ``key in memory`` is true only for a key whose record is in a committed
    transaction or in the open one, whose fate a repeat shares: a repeat answered from memory is
    never the only sighting of a URL that was lost.
    """

    __slots__ = ("_last", "_open", "_recent")

    def __init__(self, capacity: int) -> None:
        self._recent = RecentKeys(capacity)
        self._open: set[bytes] = set()  # noted in the open transaction
        self._last: bytes | None = None  # noted last, dropped if its record is refused

    def __contains__(self, key: bytes) -> bool:
        return key in self._open or key in self._recent

    def note(self, key: bytes) -> None:
        self._open.add(key)
        self._last = key

    def refused(self) -> None:
        if self._last is not None:
            self._open.discard(self._last)
            self._last = None

    def committed(self) -> None:
        self._recent.update(self._open)
        self._open = set()
        self._last = None

    def revoked(self, shards: Sequence[int]) -> None:
        """Nothing: the stage clears the memory itself when its assignment changes."""

    def clear(self) -> None:
        """Forget every key, committed or noted in the open transaction: always safe, as a key the
        memory lacks costs only a trip. A stage calls it when what the keys stood for may no longer
        hold (the URL stage when its seen-set lets URLs go: a forget, expiry, another assignment)."""
        self._recent = RecentKeys(self._recent.capacity)
        self._open = set()
        self._last = None

    def aborted(self) -> None:
        self._open = set()
        self._last = None
