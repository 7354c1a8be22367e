"""Revisit benchmark on real change histories, closed loop through ``python -m streams revisit --offline``.

The pages are real: 300 files of five public documentation and content repositories over two years
(bench/revisit_histories.json, built by bench/revisit_history.py from their git history), served as
a website with boilerplate churn and, for half of them, conditional requests (bench/revisit_site.py).
Each policy drives the offline stage one fetch at a time, as bench/revisit_sim.py does: a page is
fetched when its ``next_fetch_at`` comes, with the conditional headers of its last update. Measured
over the window after the warm-up:

* freshness: the time-averaged share of pages whose stored article text equals the live one;
* fetches per page per day, and the rank correlation (Spearman) of each page's fetches with its true
  number of changes, and the share of fetches that went to the busiest pages (24 changes or more);
* change detection: of the re-fetches that found the article's text changed, the share called
  unchanged (missed); of those that found only boilerplate changed (a 200 with the same text), the
  share called changed (false).

Beside the policies, the hindsight optimum: Cho and Garcia-Molina's allocation
(:mod:`streams.stages.revisit.allocation`) from each page's true rate (its changes over the two
years) at the same spend and bounds, replayed on the same histories at a fixed interval per page
with random phases (so it is measured as the policies are, bursts and all). Results go to
bench/results/revisit_real.{md,json}. Without the mirrors it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.revisit_history import DEFAULT_MIRRORS, MirrorsMissing, burstiness, load
from bench.revisit_sim import Decide, OfflineStage, in_process_stage
from bench.revisit_site import EPOCH, Site, SitePage
from streams import records
from streams.stages.revisit.allocation import optimal_frequencies

RESULTS = Path(__file__).resolve().parent / "results"
HOUR, DAY = 3600.0, 86400.0
BUSY_CHANGES = 24
OPTIMUM_PHASES = 20


@dataclass(frozen=True)
class Scenario:
    warmup_days: float = 60.0
    budgets: tuple[float, ...] = (0.1, 1.0)
    min_interval_s: float = HOUR
    max_interval_s: float = 30 * DAY
    seed: int = 35


@dataclass(frozen=True)
class Run:
    name: str
    env: dict[str, str]
    budget: float | None = None     # the budget it was given (default and fixed)


@dataclass
class Tally:
    fresh_s: float = 0.0
    fetches: int = 0
    fetches_by_page: list[int] = field(default_factory=list)
    real_changes_found: int = 0      # re-fetches whose text changed since the last fetch
    missed: int = 0                  # ... called unchanged
    undecided: int = 0               # ... called neither
    churn_only: int = 0              # 200s with the same text (only boilerplate changed)
    false_changes: int = 0           # ... called changed
    not_modified: int = 0
    signals: dict[str, int] = field(default_factory=dict)


def env_for(policy: str, scenario: Scenario, **settings: Any) -> dict[str, str]:
    values = {"policy": policy, "min_interval_s": scenario.min_interval_s,
              "max_interval_s": scenario.max_interval_s, "initial_interval_s": DAY, **settings}
    return {f"STREAMS_REVISIT_{name.upper()}": str(value) for name, value in values.items()}


def standard_runs(scenario: Scenario) -> list[Run]:
    """Per budget, the default policy and the fixed interval spending it; Nutch's and StormCrawler's
    schedules with their own defaults (bounds included: Nutch 60 s to 365 d, StormCrawler 1 h to 14 d)."""
    runs = [Run("nutch", env_for("nutch", scenario, min_interval_s=60, max_interval_s=365 * DAY)),
            Run("stormcrawler", env_for("stormcrawler", scenario, min_interval_s=HOUR,
                                        max_interval_s=14 * DAY))]
    for budget in scenario.budgets:
        default = env_for("default", scenario, budget_fetches_per_page_per_day=budget)
        runs.append(Run(f"default {budget:g}", default, budget))
        fixed = env_for("fixed", scenario, fixed_interval_s=DAY / budget)
        runs.append(Run(f"fixed {1 / budget:g} d", fixed, budget))
    return runs


def replay(scenario: Scenario, run: Run, driver: str, mirrors: Path) -> dict[str, Any]:
    """One closed-loop run of ``run`` over the real histories."""
    site = Site(load(mirrors))
    rng = random.Random(scenario.seed)
    with tempfile.TemporaryDirectory(prefix="revisit-real-") as scratch:
        stage = OfflineStage(run.env, Path(scratch)) if driver == "subprocess" else None
        decide = stage.decide if stage is not None else in_process_stage(run.env)
        began = time.perf_counter()
        tally = _loop(site, decide, rng, scenario.warmup_days * DAY)
        elapsed = time.perf_counter() - began
        if stage is not None:
            stage.close()
    return _measures(site, scenario, run, tally, elapsed)


def _loop(site: Site, decide: Decide, rng: random.Random, start_s: float) -> Tally:
    pages, horizon_s = site.pages, site.window_s
    tally = Tally(fetches_by_page=[0] * len(pages))
    stored: list[tuple[float, int] | None] = [None] * len(pages)   # (fetched at, text id)
    headers: list[dict[str, str]] = [{} for _ in pages]
    queue = [(rng.uniform(0.0, DAY), page.index) for page in pages]
    heapq.heapify(queue)
    while queue and queue[0][0] < horizon_s:
        now_s, index = heapq.heappop(queue)
        page = pages[index]
        record = site.respond(page, now_s, headers[index])
        update = decide(record)
        live = page.at(now_s).text_id
        if stored[index] is not None:
            fetched_s, text_id = stored[index]  # type: ignore[misc]
            tally.fresh_s += _fresh_s(page, text_id, max(fetched_s, start_s), now_s)
            if now_s >= start_s:
                _count(tally, index, record, update, text_id != live)
        stored[index] = (now_s, live)
        headers[index] = update.get("conditional_headers", {})
        next_s = (records.parse_rfc3339(update["next_fetch_at"]) - EPOCH).total_seconds()
        heapq.heappush(queue, (max(next_s, now_s + 1.0), index))
    for page in pages:
        if stored[page.index] is not None:
            fetched_s, text_id = stored[page.index]  # type: ignore[misc]
            tally.fresh_s += _fresh_s(page, text_id, max(fetched_s, start_s), horizon_s)
    return tally


def _fresh_s(page: SitePage, text_id: int, begin_s: float, end_s: float) -> float:
    """Seconds of ``[begin_s, end_s)`` in which the live text is ``text_id``."""
    if end_s <= begin_s:
        return 0.0
    fresh = 0.0
    versions = page.versions
    for i, version in enumerate(versions):
        until_s = versions[i + 1].start_s if i + 1 < len(versions) else math.inf
        overlap = min(until_s, end_s) - max(version.start_s, begin_s)
        if overlap > 0 and version.text_id == text_id:
            fresh += overlap
    return fresh


def _count(tally: Tally, index: int, record: dict[str, Any], update: dict[str, Any],
           text_changed: bool) -> None:
    tally.fetches += 1
    tally.fetches_by_page[index] += 1
    signal = update.get("signal", "?")
    tally.signals[signal] = tally.signals.get(signal, 0) + 1
    changed = update.get("changed")
    if record["status"] == 304:
        tally.not_modified += 1
    if text_changed:
        tally.real_changes_found += 1
        tally.missed += changed is False
        tally.undecided += changed is None
    elif record["status"] == 200:
        tally.churn_only += 1
        tally.false_changes += changed is True


def _measures(site: Site, scenario: Scenario, run: Run, tally: Tally, elapsed: float) -> dict[str, Any]:
    window_days = site.window_s / DAY - scenario.warmup_days
    truth = [page.real_changes() for page in site.pages]
    return {
        "run": run.name, "budget": run.budget, "env": run.env, "seconds": round(elapsed, 1),
        "freshness": tally.fresh_s / (len(site.pages) * window_days * DAY),
        "fetches": tally.fetches, "fetches_per_page_per_day": tally.fetches / len(site.pages) / window_days,
        "spearman": spearman(tally.fetches_by_page, truth),
        "busy_fetch_share": _busy_share(tally.fetches_by_page, truth),
        "changes_found": tally.real_changes_found,
        "missed_share": tally.missed / max(tally.real_changes_found, 1),
        "undecided_share": tally.undecided / max(tally.real_changes_found, 1),
        "churn_only": tally.churn_only, "false_change_share": tally.false_changes / max(tally.churn_only, 1),
        "not_modified_share": tally.not_modified / max(tally.fetches, 1), "signals": tally.signals,
        "fetches_by_page": tally.fetches_by_page,
    }


def _busy_share(fetches: list[int] | np.ndarray, truth: list[int]) -> float:
    busy = np.asarray(truth) >= BUSY_CHANGES
    total = float(np.sum(fetches))
    return float(np.sum(np.asarray(fetches)[busy])) / total if total else 0.0


def spearman(x: list[int] | list[float] | np.ndarray, y: list[int] | list[float]) -> float:
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


def optimum(site: Site, fetches_per_page_per_day: float, bounds_s: tuple[float, float],
            warmup_days: float, seed: int) -> dict[str, Any]:
    """The hindsight optimum at this spend and these interval bounds (module docstring): its mean
    freshness over :data:`OPTIMUM_PHASES` random phases, its fetches' rank correlation with the true
    changes and its share for the busiest pages."""
    lo, hi = 1.0 / bounds_s[1], 1.0 / bounds_s[0]
    rates = np.array([page.real_changes() / site.window_s for page in site.pages])
    target = fetches_per_page_per_day * len(site.pages) / DAY

    def allocate(mu_s: float) -> np.ndarray:
        return np.where(rates > 0, optimal_frequencies(rates, mu_s, lo, hi), lo)  # never changed: lo

    low, high = math.log(1e-3), math.log(1e13)
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if allocate(math.exp(middle)).sum() > target else (low, middle)
    frequencies = allocate(math.exp(0.5 * (low + high)))
    start_s, rng = warmup_days * DAY, np.random.default_rng(seed)
    fresh = 0.0
    for page, frequency in zip(site.pages, frequencies, strict=True):
        timeline, interval_s = Timeline(page), 1.0 / frequency
        for phase_s in rng.uniform(0.0, interval_s, OPTIMUM_PHASES):
            fetched = np.arange(phase_s, site.window_s, interval_s)
            until = np.minimum(fetched + interval_s, site.window_s)
            fresh += timeline.fresh_s(timeline.text_at(fetched), np.maximum(fetched, start_s), until)
    truth = [page.real_changes() for page in site.pages]
    return {"freshness": fresh / (OPTIMUM_PHASES * len(site.pages) * (site.window_s - start_s)),
            "fetches_per_page_per_day": float(frequencies.mean() * DAY),
            "spearman": spearman(frequencies, truth), "busy_fetch_share": _busy_share(frequencies, truth)}


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


def run_all(scenario: Scenario, runs: list[Run], driver: str, jobs: int,
            mirrors: Path) -> list[dict[str, Any]]:
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(replay, scenario, run, driver, mirrors) for run in runs]
        return [future.result() for future in futures]


def bounds_of(run: Run, scenario: Scenario) -> tuple[float, float]:
    return (float(run.env.get("STREAMS_REVISIT_MIN_INTERVAL_S", scenario.min_interval_s)),
            float(run.env.get("STREAMS_REVISIT_MAX_INTERVAL_S", scenario.max_interval_s)))


def checks(results: dict[str, dict[str, Any]], budget: float = 0.1) -> list[dict[str, Any]]:
    """The acceptance targets of issue 35 at ``budget``, each with the measured value."""
    default, fixed = results[f"default {budget:g}"], results[f"fixed {1 / budget:g} d"]
    ratio = default["freshness"] / default["optimum_at_budget"]["freshness"]
    return [
        {"check": f"default {budget:g}: freshness >= the fixed interval's",
         "value": round(default["freshness"] - fixed["freshness"], 5),
         "passed": default["freshness"] >= fixed["freshness"]},
        {"check": f"default {budget:g}: freshness / hindsight optimum at the budget >= 0.995",
         "value": round(ratio, 4), "passed": ratio >= 0.995},
        {"check": f"default {budget:g}: real changes called unchanged <= 5 %",
         "value": round(default["missed_share"], 4), "passed": default["missed_share"] <= 0.05},
        {"check": f"default {budget:g}: boilerplate-only churn called changed <= 1 %",
         "value": round(default["false_change_share"], 5), "passed": default["false_change_share"] <= 0.01},
        {"check": f"default {budget:g}: rank correlation of fetches with true change rate >= 0.9",
         "value": round(default["spearman"], 4), "passed": default["spearman"] >= 0.9},
    ]


def report(scenario: Scenario, command: str, summary: dict[str, Any], results: list[dict[str, Any]],
           outcome: list[dict[str, Any]]) -> str:
    """The markdown written to bench/results/revisit_real.md."""
    lines = [
        "# Revisit policies on real change histories", "", f"Command: `{command}`", "",
        f"{summary['pages']} pages of five public repositories (bench/revisit_histories.json) over "
        f"{summary['window_days']:g} days: {summary['real_changes']} changes of their article text "
        f"({summary['file_changes']} commits touching them), {summary['quiet_pages']} pages never changed, "
        f"{summary['busy_pages']} changed {BUSY_CHANGES} times or more. Between a page's commits, gaps under "
        f"a day are {summary['real_gaps_under_a_day']:.1%} of all (a Poisson process of each page's rate: "
        f"{summary['poisson_gaps_under_a_day']:.1%}), the median per-page coefficient of variation of the "
        f"gaps {summary['real_median_cv_of_gaps']:.2f} "
        f"(Poisson: {summary['poisson_median_cv_of_gaps']:.2f}); "
        f"the largest one-commit batch changed {summary['largest_batch']} pages. "
        f"Measured over the last {summary['window_days'] - scenario.warmup_days:g} days (after "
        f"{scenario.warmup_days:g} of warm-up); default and fixed bounds "
        f"{scenario.min_interval_s / HOUR:g} h to {scenario.max_interval_s / DAY:g} d. Each policy drives "
        "`python -m streams revisit --offline` one fetch at a time (bench/revisit_real.py; the site, its "
        "churn and its validators: bench/revisit_site.py). The optimum: Cho and Garcia-Molina's allocation "
        "from each page's true rate at the same spend and bounds, replayed on the same histories.", "",
        "| policy | fetches/page/day | freshness | optimum at that spend | ratio | rank corr. "
        "| busiest pages' share of fetches | real changes missed | churn called changed | 304 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_row(r) for r in results), "",
        "The optimum's own rank correlation is 1 and its busiest pages' share "
        + ", ".join(f"{r['optimum']['busy_fetch_share']:.3f} ({r['run']})" for r in results
                    if r["run"].startswith("default")) + ".", "",
        "| check | value | passed |", "|---|---:|---|",
        *(f"| {c['check']} | {c['value']} | {'yes' if c['passed'] else 'NO'} |" for c in outcome),
    ]
    return "\n".join(lines) + "\n"


def _row(r: dict[str, Any]) -> str:
    best = r["optimum"]["freshness"]
    cells = [r["run"], f"{r['fetches_per_page_per_day']:.3f}", f"{r['freshness']:.4f}", f"{best:.4f}",
             f"{r['freshness'] / best:.4f}", f"{r['spearman']:.3f}", f"{r['busy_fetch_share']:.3f}",
             f"{r['missed_share']:.3f}", f"{r['false_change_share']:.4f}", f"{r['not_modified_share']:.3f}"]
    return "| " + " | ".join(cells) + " |"


def dataset_summary(site: Site, mirrors: Path) -> dict[str, Any]:
    truth = [page.real_changes() for page in site.pages]
    return {**burstiness(load(mirrors)), "window_days": site.window_s / DAY, "real_changes": sum(truth),
            "quiet_pages": truth.count(0), "busy_pages": sum(t >= BUSY_CHANGES for t in truth)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    parser.add_argument("--budgets", default="0.1,1",
                        help="default policy's budgets, fetches per page per day")
    parser.add_argument("--warmup-days", type=float, default=Scenario.warmup_days)
    parser.add_argument("--seed", type=int, default=Scenario.seed)
    parser.add_argument("--driver", choices=["subprocess", "inprocess"], default="subprocess",
                        help="inprocess calls the stage directly (quick experiments; not the benchmark)")
    parser.add_argument("--jobs", type=int, default=2, help="policies replayed at once")
    parser.add_argument("--output", type=Path, default=RESULTS / "revisit_real")
    args = parser.parse_args(argv)
    try:
        site = Site(load(args.mirrors))
    except MirrorsMissing as missing:
        print(f"revisit_real skipped: the repositories of bench/revisit_histories.json are not mirrored "
              f"({missing}); put a bare mirror of each at <mirrors>/<owner>+<name>/repo (git clone --mirror) "
              "and pass --mirrors or set REVISIT_MIRRORS")
        return 0
    budgets = tuple(float(b) for b in args.budgets.split(","))
    scenario = Scenario(args.warmup_days, budgets, seed=args.seed)
    runs = standard_runs(scenario)
    results = run_all(scenario, runs, args.driver, args.jobs, args.mirrors)
    for run, result in zip(runs, results, strict=True):
        result["optimum"] = optimum(site, result["fetches_per_page_per_day"], bounds_of(run, scenario),
                                    scenario.warmup_days, scenario.seed)
        if run.budget is not None:
            result["optimum_at_budget"] = optimum(site, run.budget, bounds_of(run, scenario),
                                                  scenario.warmup_days, scenario.seed)
    outcome = checks({r["run"]: r for r in results}) if 0.1 in budgets else []
    command = " ".join(["python -m bench.revisit_real", *(sys.argv[1:] if argv is None else argv)])
    markdown = report(scenario, command, dataset_summary(site, args.mirrors), results, outcome)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".md").write_text(markdown)
    document = {"command": command, "scenario": asdict(scenario), "runs": results, "checks": outcome}
    args.output.with_suffix(".json").write_text(json.dumps(document, indent=1, default=float) + "\n")
    print(markdown)
    return 0 if all(c["passed"] for c in outcome) else 1


if __name__ == "__main__":
    sys.exit(main())
