"""How the revisit stage's state moves to another shard count (``python -m streams reshard``).

Histories (``h`` + URL fingerprint) go to the shard their fingerprint routes to. Each shard's budget
state (:mod:`streams.stages.revisit.budget`) is about the shard's own pages and its share of the
fetch budget, so it is rebuilt for each new shard rather than copied:

- the rate histogram is recounted from the histories the new shard receives (each history keeps
  the bin it is counted in), so every new histogram is exact;
- the multiplier ``mu`` and the spend correction are the old shards' page-weighted means: shards
  sample the same pages (they are split by fingerprint) and solve for the same ``mu`` up to noise,
  and a budget split N ways over pages split N ways leaves ``mu`` as it was; the next fetch in each
  new shard re-solves it for its own histogram;
- the realised spend (re-fetches, exponentially weighted) is the old shards' total, decayed to their
  latest clock, split evenly, so the feedback of the new shards adds up to the old one's.

Each host's changes (``p`` + host, :mod:`streams.stages.revisit.hosts`) are about the host's pages in
one shard: the old shards' are added up (decayed to their latest clock) and every new shard gets an
even share, as it gets an even share of the host's pages. Each host's number votes (``n`` + host,
:mod:`streams.stages.revisit.numbers`) are its pages' evidence about its template, not a share of
its pages: the old shards' are added up and every new shard gets them all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from streams.errors import StateError
from streams.runtime.extras import KeyedMove, Placed
from streams.stages.revisit.budget import UNESTIMATED, BudgetState
from streams.stages.revisit.history import decode_history
from streams.stages.revisit.hosts import HOST_PREFIX, HostChanges, merge_hosts
from streams.stages.revisit.numbers import HOST_NUMBERS_PREFIX, HostNumbers, merge_host_numbers

HISTORY_PREFIX = b"h"
ALLOCATION_KEY = b"meta:allocation"
IDENTITY_KEY = b"meta:revisit-state"
_RESOLVE_AT_ONCE = 1 << 30  # since_solve: re-solve mu at the new shard's first fetch


class RevisitMove:
    """A :class:`~streams.runtime.moves.StateMove` of the revisit stage's histories and budgets."""

    def __init__(self, old_shards: int, shards: int) -> None:
        self._histories = KeyedMove(old_shards, shards, prefix_bytes=len(HISTORY_PREFIX))
        self._old: list[BudgetState] = []
        self._new = [BudgetState() for _ in range(shards)]
        self._hosts: dict[bytes, list[HostChanges]] = {}
        self._numbers: dict[bytes, list[HostNumbers]] = {}

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        if key == ALLOCATION_KEY:
            self._old.append(BudgetState.decode(value))
            return ()
        if key.startswith(HOST_PREFIX):
            self._hosts.setdefault(key, []).append(HostChanges.decode(value))
            return ()
        if key.startswith(HOST_NUMBERS_PREFIX):
            self._numbers.setdefault(key, []).append(HostNumbers.decode(value))
            return ()
        if not key.startswith(HISTORY_PREFIX) or len(key) != len(HISTORY_PREFIX) + 16:
            raise StateError(f"revisit state holds a key it does not know: {key[:40]!r}")
        shard = self._histories.shard_of(key)
        rate_bin = decode_history(value).rate_bin
        budget = self._new[shard]
        if rate_bin >= 0:
            budget.counts[rate_bin] += 1
        elif rate_bin == UNESTIMATED:
            budget.unestimated += 1
        return ((shard, key, value),)

    def finish(self) -> Iterable[Placed]:
        shards = len(self._new)
        hosts = [(shard, key, merge_hosts(states, shards).encode())
                 for key, states in self._hosts.items() for shard in range(shards)]
        hosts += [(shard, key, merge_host_numbers(states).encode())
                  for key, states in self._numbers.items() for shard in range(shards)]
        if not self._old:
            return hosts
        merged = merge_budgets(self._old)
        for budget in self._new:
            budget.mu_s, budget.correction = merged.mu_s, merged.correction
            budget.since_solve = _RESOLVE_AT_ONCE
            budget.spend_weight = merged.spend_weight / shards
            budget.clock_s, budget.started_s = merged.clock_s, merged.started_s
            budget.window_s, budget.corrected_s = merged.window_s, merged.corrected_s
        return [*hosts, *((shard, ALLOCATION_KEY, budget.encode()) for shard, budget in enumerate(self._new))]


def merge_budgets(budgets: list[BudgetState]) -> BudgetState:
    """One budget state standing for all of ``budgets``: counts added, ``mu`` and the correction
    weighted by pages, the spend weights decayed to the latest clock and added."""
    clock_s = max(budget.clock_s for budget in budgets)
    pages = [max(budget.pages, 0) for budget in budgets]
    weights = [count / sum(pages) for count in pages] if sum(pages) else [1 / len(budgets)] * len(budgets)
    started = [budget.started_s for budget in budgets if not math.isnan(budget.started_s)]
    merged = BudgetState(
        counts=[sum(column) for column in zip(*(budget.counts for budget in budgets), strict=True)],
        unestimated=sum(budget.unestimated for budget in budgets),
        mu_s=sum(weight * budget.mu_s for weight, budget in zip(weights, budgets, strict=True)),
        correction=sum(weight * budget.correction for weight, budget in zip(weights, budgets, strict=True)),
        spend_weight=sum(budget.spend_weight * math.exp(-(clock_s - budget.clock_s) / budget.window_s)
                         for budget in budgets),
        clock_s=clock_s, started_s=min(started) if started else math.nan,
        window_s=max(budget.window_s for budget in budgets),
        corrected_s=max(budget.corrected_s for budget in budgets))
    return merged
