"""The hindsight optimum of the real-history revisit benchmark, and the rank correlation it is judged by.

:func:`optimum` is Cho and Garcia-Molina's allocation (:mod:`streams.stages.revisit.allocation`)
from each page's true rate (its changes over the window) at a given spend and interval bounds,
replayed on the same histories at a fixed interval per page with random phases, so that it is
measured as the policies are, bursts and all. It takes any set of pages: the whole bench, or one
site's pages, at that site's own spend or at the budget (bench/revisit_real.py asks for both, since
each site is judged on its own). :func:`spearman` is the rank correlation of per-page fetches with
the true change counts, the one measure that says whether a policy found which pages are busy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.revisit_site import SitePage
from streams.stages.revisit.allocation import optimal_frequencies

DAY = 86400.0
BUSY_CHANGES = 24
OPTIMUM_PHASES = 20


def optimum(pages: Sequence[SitePage], window_s: float, fetches_per_page_per_day: float,
            bounds_s: tuple[float, float], warmup_days: float, seed: int) -> dict[str, Any]:
    """The hindsight optimum of ``pages`` at this spend and these interval bounds (module docstring):
    its mean freshness over :data:`OPTIMUM_PHASES` random phases (and each page's, so that the
    optimum of a whole set can be read per site), its fetches' rank correlation with the true
    changes and its share for the busiest pages."""
    lo, hi = 1.0 / bounds_s[1], 1.0 / bounds_s[0]
    rates = np.array([page.real_changes() / window_s for page in pages])
    target = fetches_per_page_per_day * len(pages) / DAY

    def allocate(mu_s: float) -> np.ndarray:
        return np.where(rates > 0, optimal_frequencies(rates, mu_s, lo, hi), lo)  # never changed: lo

    low, high = math.log(1e-3), math.log(1e13)
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if allocate(math.exp(middle)).sum() > target else (low, middle)
    frequencies = allocate(math.exp(0.5 * (low + high)))
    start_s, rng = warmup_days * DAY, np.random.default_rng(seed)
    fresh = np.zeros(len(pages))
    for i, (page, frequency) in enumerate(zip(pages, frequencies, strict=True)):
        timeline, interval_s = Timeline(page), 1.0 / frequency
        for phase_s in rng.uniform(0.0, interval_s, OPTIMUM_PHASES):
            fetched = np.arange(phase_s, window_s, interval_s)
            until = np.minimum(fetched + interval_s, window_s)
            fresh[i] += timeline.fresh_s(timeline.text_at(fetched), np.maximum(fetched, start_s), until)
    fresh /= OPTIMUM_PHASES * (window_s - start_s)
    truth = [page.real_changes() for page in pages]
    return {"freshness": float(fresh.mean()), "freshness_by_page": fresh.tolist(),
            "fetches_per_page_per_day": float(frequencies.mean() * DAY),
            "spearman": spearman(frequencies, truth), "busy_fetch_share": busy_share(frequencies, truth)}


class Timeline:
    """A page's versions as arrays, to measure the freshness of many fetches at once: ``time_in[x, j]``
    is the time its live text was ``x`` before version ``j`` began."""

    def __init__(self, page: SitePage) -> None:
        self.starts = np.array([v.start_s for v in page.versions])
        ids = sorted({v.text_id for v in page.versions})
        self.ids = np.array([ids.index(v.text_id) for v in page.versions])
        lengths = np.diff(self.starts, append=math.inf)
        self.time_in = np.zeros((len(ids), len(self.starts)))
        for j in range(1, len(self.starts)):
            self.time_in[:, j] = self.time_in[:, j - 1]
            self.time_in[self.ids[j - 1], j] += lengths[j - 1]

    def text_at(self, times: np.ndarray) -> np.ndarray:
        return self.ids[np.maximum(np.searchsorted(self.starts, times, side="right") - 1, 0)]

    def fresh_s(self, texts: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> float:
        """Total seconds of each ``[begin, end)`` in which the live text was the matching ``texts``."""
        keep = ends > begins
        texts, begins, ends = texts[keep], begins[keep], ends[keep]
        return float(np.sum(self._time_in(texts, ends) - self._time_in(texts, begins)))

    def _time_in(self, texts: np.ndarray, times: np.ndarray) -> np.ndarray:
        version = np.maximum(np.searchsorted(self.starts, times, side="right") - 1, 0)
        inside = np.maximum(times - self.starts[version], 0.0) * (self.ids[version] == texts)
        result: np.ndarray = self.time_in[texts, version] + inside
        return result


def busy_share(fetches: Sequence[int] | np.ndarray, truth: Sequence[int]) -> float:
    """The share of ``fetches`` that went to the pages that changed :data:`BUSY_CHANGES` times or more."""
    busy = np.asarray(truth) >= BUSY_CHANGES
    total = float(np.sum(fetches))
    return float(np.sum(np.asarray(fetches)[busy])) / total if total else 0.0


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float]) -> float:
    """Spearman's rank correlation, ties at their mean rank."""
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0
        i = j + 1
    return ranks
