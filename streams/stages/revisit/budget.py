"""The shard's shared allocation state: its pages' rate histogram, the multiplier, and spend feedback.

The default policy needs one number shared by all pages, the Lagrange multiplier ``mu``
(:mod:`streams.stages.revisit.allocation`). Where that state lives in a sharded stage is a real choice;
here it is per shard, with the shard's share of the budget. The stage is sharded by URL
fingerprint, so every shard holds an unbiased sample of the pages and finds the same ``mu`` up to
sampling noise, and no cross-shard coordination (nor a second topic) is needed. A shard of a few
hundred pages or more is large enough for that noise not to matter.

``mu`` is solved from a histogram of the shard's pages' estimated rates (feed-forward: it predicts
the spend if every page took its interval at that ``mu``). The prediction misses what it cannot
see: an interval that varies from fetch to fetch spends ``1 / E[I]``, less than the predicted
``E[1 / I]``, and per-host or per-type bounds pin some pages. So the realised spend is fed back
too: the shard counts the re-fetches of its pages that have an estimate (a page's second fetch is
the price of discovering it, set aside with the pages without an estimate: :meth:`BudgetState.solve`),
exponentially weighted over a window, and, once it has watched two windows, multiplies the budget
it solves for by a correction that creeps towards ``budget / realised`` (integral control, the
correction kept within :data:`CORRECTION_RANGE` so that fetchers running behind cannot wind it up).

Three choices keep that loop on its budget. The window spans :data:`SPEND_INTERVALS` of
the mean interval the budget buys (``pages / budget``; at least :data:`SPEND_WINDOW_S`): re-fetches
come in waves (pages first fetched together keep returning together), and a window shorter than
the intervals (two days against ten at 0.1 fetches a page a day) saw a wave as overspending and a
lull as underspending, in turn. And the correction integrates over time, not over solves
(:data:`CORRECTION_GAIN` per window, in proportion to the time since the last correction): solves
come every ``resolve_every`` updates, so most of them fall inside the waves, each one pulling the
correction down, and the few in the lulls pushed it back up too little. The two together kept a
shard 10 to 20 % under its budget in the simulation (docs/benchmarks.md, "Revisit"). And the first
correction waits two windows: a new crawl's first intervals are as long as a window, so its spend
shows late, and a correction made before winds up (on one real site it reached 2 and the shard then
overspent by half for two months).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from streams.errors import StateError
from streams.stages.revisit.allocation import RATE_BINS, bin_rates_per_s, solve_multiplier

SPEND_WINDOW_S: Final = 2 * 86_400.0    # the shortest spend window
SPEND_INTERVALS: Final = 3.0            # the window: this many mean intervals (pages / budget)
CORRECTION_GAIN: Final = 0.25           # of the log gap to the budget closed per window
CORRECTION_RANGE: Final = (0.5, 2.0)
UNESTIMATED: Final = -1   # a page fetched once, without a rate yet
NOT_COUNTED: Final = -2   # a page the histogram has not counted yet
_VERSION: Final = 2
_HEAD: Final = struct.Struct(">BdIIdddddd")
_HEAD_1: Final = struct.Struct(">BdIIdddd")   # version 1: a fixed window, corrected at every solve


@dataclass
class BudgetState:
    """Pages per rate bin, ``mu`` (seconds; 0 before the first solve) and the spend feedback."""

    counts: list[int] = field(default_factory=lambda: [0] * RATE_BINS)
    unestimated: int = 0
    mu_s: float = 0.0
    since_solve: int = 0
    correction: float = 1.0
    spend_weight: float = 0.0       # re-fetches, each weighted exp(-age / window_s)
    clock_s: float = 0.0            # time the weight is decayed to
    started_s: float = math.nan     # first re-fetch seen
    window_s: float = SPEND_WINDOW_S    # the spend weight's time constant (set at each solve)
    corrected_s: float = -math.inf  # time of the last correction (never)

    @property
    def pages(self) -> int:
        return sum(self.counts) + self.unestimated

    def move(self, old_bin: int, new_bin: int) -> None:
        """A page leaves ``old_bin`` for ``new_bin`` (bins, or :data:`UNESTIMATED`, :data:`NOT_COUNTED`)."""
        if old_bin >= 0:
            self.counts[old_bin] = max(0, self.counts[old_bin] - 1)
        elif old_bin == UNESTIMATED:
            self.unestimated = max(0, self.unestimated - 1)
        if new_bin >= 0:
            self.counts[new_bin] += 1
        else:
            self.unestimated += 1
        self.since_solve += 1

    def record_refetch(self, now_s: float) -> None:
        """Count one re-fetch (not a page's first fetch: discovery is not the budget's)."""
        self.spend_weight = self._decayed(now_s) + 1.0
        self.clock_s = max(self.clock_s, now_s)
        if math.isnan(self.started_s):
            self.started_s = now_s

    def realised_per_s(self, now_s: float) -> float | None:
        """Re-fetches per second over about the last window; ``None`` before two windows (the first
        intervals of a new crawl are as long as a window: what they spend shows only after it)."""
        if math.isnan(self.started_s) or now_s - self.started_s < 2 * self.window_s:
            return None
        exposure_s = self.window_s * -math.expm1(-(now_s - self.started_s) / self.window_s)
        return self._decayed(now_s) / exposure_s

    def _decayed(self, now_s: float) -> float:
        return self.spend_weight * math.exp(-max(0.0, now_s - self.clock_s) / self.window_s)

    def _correct(self, budget_per_s: float, now_s: float) -> None:
        """Move the correction towards ``budget / realised`` by :data:`CORRECTION_GAIN` of the log gap
        per window of time since the last correction (module docstring)."""
        realised = self.realised_per_s(now_s)
        if realised is None or realised <= 0:
            return
        elapsed_s = now_s - max(self.started_s, self.corrected_s)
        self.corrected_s = max(now_s, self.corrected_s)
        exponent = CORRECTION_GAIN * min(1.0, max(0.0, elapsed_s) / self.window_s)
        step = (budget_per_s / realised) ** exponent
        self.correction = min(max(self.correction * step, CORRECTION_RANGE[0]), CORRECTION_RANGE[1])

    def solve(self, budget_per_s: float, lo_per_s: float, hi_per_s: float, now_s: float) -> float:
        """Update the correction from the realised spend, then re-solve ``mu`` for the histogram.

        The pages without an estimate yet are set aside with their share of the budget, not with
        what they spend at ``initial_interval_s`` now: they take an estimate at their next fetch
        and spend their share from then on. Counted at the initial interval, a shard's first pages
        (a new crawl, a host added in bulk) spent more than a budget under one fetch a page a day
        by themselves, the multiplier went to its top, and every page that took its first estimate
        then got the longest interval and was not fetched again for that long (a month by
        default; docs/benchmarks.md, "Revisit", has the simulation that showed it). What the first
        fetches overspend meanwhile, the spend feedback sees."""
        window_s = max(SPEND_WINDOW_S, SPEND_INTERVALS * max(self.pages, 1) / budget_per_s)
        self.spend_weight *= window_s / self.window_s   # the same rate of re-fetches over the new window
        self.window_s = window_s
        self._correct(budget_per_s * (1.0 - self.unestimated / max(self.pages, 1)), now_s)
        counts = np.asarray(self.counts, dtype=np.float64)
        target = budget_per_s * self.correction
        self.mu_s = solve_multiplier(bin_rates_per_s(), counts, target, lo_per_s, hi_per_s,
                                     target * self.unestimated / max(self.pages, 1))
        self.since_solve = 0
        return self.mu_s

    def encode(self) -> bytes:
        head = _HEAD.pack(_VERSION, self.mu_s, self.unestimated, self.since_solve, self.correction,
                          self.spend_weight, self.clock_s, self.started_s, self.window_s, self.corrected_s)
        return head + struct.pack(f">{RATE_BINS}I", *self.counts)

    @classmethod
    def decode(cls, raw: bytes | None) -> BudgetState:
        """Version 2, or version 1 (its spend weight taken over the fixed window it was counted in)."""
        if raw is None:
            return cls()
        head = {1: _HEAD_1, _VERSION: _HEAD}.get(raw[0]) if raw else None
        if head is None or len(raw) != head.size + 4 * RATE_BINS:
            raise StateError(f"revisit budget state of format {raw[:1]!r}, {len(raw)} bytes: not readable")
        (_, mu_s, unestimated, since_solve, correction, weight, clock_s, started_s,
         *windows) = head.unpack_from(raw)
        window_s, corrected_s = windows if windows else (SPEND_WINDOW_S, -math.inf)
        counts = list(struct.unpack_from(f">{RATE_BINS}I", raw, head.size))
        return cls(counts=counts, unestimated=unestimated, mu_s=mu_s, since_solve=since_solve,
                   correction=correction, spend_weight=weight, clock_s=clock_s, started_s=started_s,
                   window_s=window_s, corrected_s=corrected_s)
