"""Revisit benchmark on real change histories, closed loop through ``python -m streams revisit --offline``.

The pages are real: files of public documentation and content repositories over two years
(bench/revisit_histories.json, built by bench/revisit_history.py from their git history), served as
websites with boilerplate churn, churn inside the article and, for half the pages, conditional
requests (bench/revisit_site.py). Each policy drives the offline stage one fetch at a time, as
bench/revisit_sim.py does: a page is fetched when its ``next_fetch_at`` comes, with the conditional
headers of its last update. Measured over the window after the warm-up, for the whole set and for
each site (host) alone, since a stage can do well on the sum of slow sites and badly on a fast one:

* freshness: the time-averaged share of pages whose stored article text equals the live one;
* fetches per page per day, and the rank correlation (Spearman) of each page's fetches with its true
  number of changes, and the share of fetches that went to the busiest pages (24 changes or more);
* change detection: of the re-fetches that found the article's text changed, the share called
  unchanged (missed), and of those the ones whose words stayed and only numbers moved; of the
  re-fetches that found only churn changed (a 200 with the same text), the share called changed
  (false), with the signals that decided them.

The pages are first fetched spread over one fixed interval at the run's budget, each with its own
phase (:func:`first_fetches_s`); ``--seeds N`` replays every run at N seeds and reports the means,
since on sites whose pages change once or twice in two years a seed moves freshness by more than
the policies differ.

Beside the policies, the hindsight optimum (bench/revisit_oracle.py) at each run's spend and at its
budget, for the whole set and per site. ``--tree PATH`` also runs the default policy of another
checkout's stage (its ``python -m streams revisit --offline``, in a subprocess whatever the driver)
on the same site, for before-and-after rows of the same run. Results go to
bench/results/revisit_real.{md,json} (bench/revisit_real_report.py writes and judges them). Without
the mirrors it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import multiprocessing
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.revisit_history import DEFAULT_MIRRORS, Dataset, MirrorsMissing, burstiness, load
from bench.revisit_oracle import BUSY_CHANGES, busy_share, optimum, spearman
from bench.revisit_real_report import checks, report
from bench.revisit_sim import Decide, OfflineStage, in_process_stage
from bench.revisit_site import EPOCH, Site, SitePage, Version
from streams import records

RESULTS = Path(__file__).resolve().parent / "results"
HOUR, DAY = 3600.0, 86400.0
CHECKED_BUDGETS = (0.1, 0.3)


@dataclass(frozen=True)
class Scenario:
    warmup_days: float = 60.0
    budgets: tuple[float, ...] = (0.1, 0.3, 1.0)
    min_interval_s: float = HOUR
    max_interval_s: float = 30 * DAY
    seed: int = 35
    seeds: int = 1      # replays of each run, at seed, seed + 1, ...; the rows are their means


@dataclass(frozen=True)
class Run:
    name: str
    env: dict[str, str]
    budget: float | None = None     # the budget it was given (default and fixed)
    tree: str | None = None         # another checkout whose stage it drives (--tree)


@dataclass
class Tally:
    fresh_s: float = 0.0
    fetches: int = 0
    real_changes_found: int = 0      # re-fetches whose text changed since the last fetch
    missed: int = 0                  # ... called unchanged
    undecided: int = 0               # ... called neither
    numbers_only: int = 0            # ... whose words stayed (only numbers moved)
    numbers_only_missed: int = 0     # ... of those, called unchanged
    churn_only: int = 0              # 200s with the same text (only churn changed)
    false_changes: int = 0           # ... called changed
    not_modified: int = 0
    signals: dict[str, int] = field(default_factory=dict)
    churn_signals: dict[str, int] = field(default_factory=dict)    # of the churn-only 200s


def env_for(policy: str, scenario: Scenario, **settings: Any) -> dict[str, str]:
    values = {"policy": policy, "min_interval_s": scenario.min_interval_s,
              "max_interval_s": scenario.max_interval_s, "initial_interval_s": DAY, **settings}
    return {f"STREAMS_REVISIT_{name.upper()}": str(value) for name, value in values.items()}


def standard_runs(scenario: Scenario, trees: dict[str, str] | None = None) -> list[Run]:
    """Per budget, the default policy and the fixed interval spending it; Nutch's and StormCrawler's
    schedules with their own defaults (bounds included: Nutch 60 s to 365 d, StormCrawler 1 h to 14 d);
    and per other tree (label to path), its default policy at every budget."""
    runs = [Run("nutch", env_for("nutch", scenario, min_interval_s=60, max_interval_s=365 * DAY)),
            Run("stormcrawler", env_for("stormcrawler", scenario, min_interval_s=HOUR,
                                        max_interval_s=14 * DAY))]
    for budget in scenario.budgets:
        default = env_for("default", scenario, budget_fetches_per_page_per_day=budget)
        runs.append(Run(f"default {budget:g}", default, budget))
        runs.extend(Run(f"default {budget:g} @{label}", default, budget, path)
                    for label, path in (trees or {}).items())
        fixed = env_for("fixed", scenario, fixed_interval_s=DAY / budget)
        runs.append(Run(f"fixed {1 / budget:g} d", fixed, budget))
    return runs


_SHARED: dict[str, Site] = {}


def _adopt(site: Site) -> None:
    """A worker's initializer: the site its parent rendered (forked, not pickled: rendering every
    version of the busier sites takes the better part of a minute)."""
    _SHARED["site"] = site


def replay(scenario: Scenario, run: Run, driver: str, mirrors: Path) -> dict[str, Any]:
    """One closed-loop run of ``run`` over the real histories."""
    site = _SHARED.get("site") or Site(load(mirrors))
    site.reset()
    rng = random.Random(scenario.seed)
    with tempfile.TemporaryDirectory(prefix="revisit-real-") as scratch:
        tree = Path(run.tree) if run.tree else None
        stage = OfflineStage(run.env, Path(scratch), tree) if driver == "subprocess" or tree else None
        decide = stage.decide if stage is not None else in_process_stage(run.env)
        began = time.perf_counter()
        tallies = _loop(site, decide, rng, scenario.warmup_days * DAY, first_fetches_s(run))
        elapsed = time.perf_counter() - began
        if stage is not None:
            stage.close()
    return _measures(site, scenario, run, tallies, elapsed)


def first_fetches_s(run: Run) -> float:
    """The time over which the pages are first fetched: one interval of the fixed schedule at the
    run's budget (a day for the runs without one). Staggered over it, every page's fetches have their
    own phase; a site's pages first fetched within one day would share one phase for as long as their
    intervals stay equal (the fixed interval's always), and where a site's changes come in batches
    that one draw, not the policy, would decide the comparison (docs/revisit.md, "Real change
    histories", has the figures)."""
    return DAY / run.budget if run.budget else DAY


def _loop(site: Site, decide: Decide, rng: random.Random,
          start_s: float, first_fetch_spread_s: float) -> tuple[dict[str, Tally], list[int]]:
    """Per host its tally, and every page's fetches after the warm-up."""
    pages, horizon_s = site.pages, site.window_s
    tallies = {host: Tally() for host in site.by_host}
    fetches = [0] * len(pages)
    stored: list[tuple[float, Version] | None] = [None] * len(pages)   # (fetched at, version)
    headers: list[dict[str, str]] = [{} for _ in pages]
    queue = [(rng.uniform(0.0, first_fetch_spread_s), page.index) for page in pages]
    heapq.heapify(queue)
    while queue and queue[0][0] < horizon_s:
        now_s, index = heapq.heappop(queue)
        page = pages[index]
        record = site.respond(page, now_s, headers[index])
        update = decide(record)
        live = page.at(now_s)
        if stored[index] is not None:
            fetched_s, kept = stored[index]  # type: ignore[misc]
            tally = tallies[page.host]
            tally.fresh_s += _fresh_s(page, kept.text_id, max(fetched_s, start_s), now_s)
            if now_s >= start_s:
                fetches[index] += 1
                _count(tally, record, update, kept, live)
        stored[index] = (now_s, live)
        headers[index] = update.get("conditional_headers", {})
        next_s = (records.parse_rfc3339(update["next_fetch_at"]) - EPOCH).total_seconds()
        heapq.heappush(queue, (max(next_s, now_s + 1.0), index))
    for page in pages:
        if stored[page.index] is not None:
            fetched_s, kept = stored[page.index]  # type: ignore[misc]
            tallies[page.host].fresh_s += _fresh_s(page, kept.text_id, max(fetched_s, start_s), horizon_s)
    return tallies, fetches


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


def _count(tally: Tally, record: dict[str, Any], update: dict[str, Any], kept: Version,
           live: Version) -> None:
    tally.fetches += 1
    signal = update.get("signal", "?")
    tally.signals[signal] = tally.signals.get(signal, 0) + 1
    changed = update.get("changed")
    if record["status"] == 304:
        tally.not_modified += 1
    if kept.text_id != live.text_id:
        tally.real_changes_found += 1
        tally.missed += changed is False
        tally.undecided += changed is None
        if kept.words_id == live.words_id:
            tally.numbers_only += 1
            tally.numbers_only_missed += changed is False
    elif record["status"] == 200:
        tally.churn_only += 1
        tally.false_changes += changed is True
        tally.churn_signals[signal] = tally.churn_signals.get(signal, 0) + 1


def _merge(tallies: list[Tally]) -> Tally:
    total = Tally()
    for tally in tallies:
        for name, value in vars(tally).items():
            if isinstance(value, dict):
                mine = getattr(total, name)
                for key, count in value.items():
                    mine[key] = mine.get(key, 0) + count
            else:
                setattr(total, name, getattr(total, name) + value)
    return total


def _measures(site: Site, scenario: Scenario, run: Run, counted: tuple[dict[str, Tally], list[int]],
              elapsed: float) -> dict[str, Any]:
    tallies, fetches = counted
    whole = _measure(site.pages, _merge(list(tallies.values())), fetches, site.window_s, scenario)
    return {"run": run.name, "budget": run.budget, "tree": run.tree, "env": run.env,
            "seconds": round(elapsed, 1), **whole, "fetches_by_page": fetches,
            "sites": {host: _measure(pages, tallies[host], [fetches[p.index] for p in pages], site.window_s,
                                     scenario)
                      for host, pages in site.by_host.items()}}


def _measure(pages: list[SitePage], tally: Tally, fetches: list[int], window_s: float,
             scenario: Scenario) -> dict[str, Any]:
    window_days = window_s / DAY - scenario.warmup_days
    truth = [page.real_changes() for page in pages]
    return {
        "freshness": tally.fresh_s / (len(pages) * window_days * DAY),
        "fetches": tally.fetches, "fetches_per_page_per_day": tally.fetches / len(pages) / window_days,
        "spearman": spearman(fetches, truth), "busy_fetch_share": busy_share(fetches, truth),
        "changes_found": tally.real_changes_found,
        "missed_share": tally.missed / max(tally.real_changes_found, 1),
        "undecided_share": tally.undecided / max(tally.real_changes_found, 1),
        "numbers_only_found": tally.numbers_only, "numbers_only_missed": tally.numbers_only_missed,
        "churn_only": tally.churn_only, "false_change_share": tally.false_changes / max(tally.churn_only, 1),
        "not_modified_share": tally.not_modified / max(tally.fetches, 1), "signals": tally.signals,
        "churn_signals": tally.churn_signals,
    }


def run_all(scenario: Scenario, runs: list[Run], driver: str, jobs: int, site: Site,
            mirrors: Path) -> list[dict[str, Any]]:
    """Each run replayed at each of the scenario's seeds, with its optima, and averaged (:func:`mean_of`)."""
    seeded = [replace(scenario, seed=scenario.seed + k) for k in range(scenario.seeds)]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                             initializer=_adopt, initargs=(site,)) as pool:
        futures = [[pool.submit(replay, at, run, driver, mirrors) for at in seeded] for run in runs]
        results = [[future.result() for future in by_seed] for by_seed in futures]
    for run, by_seed in zip(runs, results, strict=True):
        for at, result in zip(seeded, by_seed, strict=True):
            add_optima(site, at, run, result)
    return [mean_of(by_seed) for by_seed in results]


def mean_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's results at several seeds as one: numbers (and lists of them) averaged, counts of
    signals too, anything else the first seed's; each site keeps its freshness at every seed
    (``freshness_by_seed``), the spread the report quotes beside the mean."""
    merged: dict[str, Any] = _mean(results)
    if len(results) > 1:
        for host, measured in merged["sites"].items():
            measured["freshness_by_seed"] = [result["sites"][host]["freshness"] for result in results]
        merged["freshness_by_seed"] = [result["freshness"] for result in results]
    return merged


def _mean(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        keys = dict.fromkeys(key for value in values for key in value)
        return {key: _mean([value.get(key, 0) for value in values]) for key in keys}
    if isinstance(first, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in first):
        return [sum(column) / len(values) for column in zip(*values, strict=True)]
    if isinstance(first, int | float) and not isinstance(first, bool):
        return sum(values) / len(values)
    return first


def bounds_of(run: Run, scenario: Scenario) -> tuple[float, float]:
    return (float(run.env.get("STREAMS_REVISIT_MIN_INTERVAL_S", scenario.min_interval_s)),
            float(run.env.get("STREAMS_REVISIT_MAX_INTERVAL_S", scenario.max_interval_s)))


def add_optima(site: Site, scenario: Scenario, run: Run, result: dict[str, Any]) -> None:
    """The hindsight optimum at the run's spend and at its budget, for the whole set and per site."""
    bounds, warmup, seed = bounds_of(run, scenario), scenario.warmup_days, scenario.seed
    parts = [(site.pages, result), *((site.by_host[host], m) for host, m in result["sites"].items())]
    for pages, measured in parts:
        measured["optimum"] = optimum(pages, site.window_s, measured["fetches_per_page_per_day"], bounds,
                                      warmup, seed)
        if run.budget is not None:
            measured["optimum_at_budget"] = optimum(pages, site.window_s, run.budget, bounds, warmup, seed)
    # The whole set's optimum at the budget, read on each site: what a site gets when the budget goes
    # where the changes are (a slow site's share can be below its fixed interval's, for the optimum too).
    whole = result.get("optimum_at_budget", {}).get("freshness_by_page")
    for host, measured in result["sites"].items():
        if whole is not None:
            measured["whole_optimum_at_budget"] = sum(whole[p.index] for p in site.by_host[host]) / len(
                site.by_host[host])
        for key in ("optimum", "optimum_at_budget"):
            measured.get(key, {}).pop("freshness_by_page", None)
    for key in ("optimum", "optimum_at_budget"):
        result.get(key, {}).pop("freshness_by_page", None)


def each_site_alone(scenario: Scenario, runs: list[Run], args: argparse.Namespace, dataset: Dataset,
                    hosts: list[str], order: list[str]) -> dict[str, dict[str, Any]]:
    """Per run with a budget (default, fixed, other trees) and per site: the site crawled alone, by a
    stage of its own spending the budget on its pages only. A shared budget goes where the changes
    are, so a slow site's share of the whole set's fetches can be below its fixed interval's (the
    optimum's too); alone, the site's rows answer "is the policy better than a fixed interval on
    this site?" (``--each-site``). ``order``: every site's host in the manifest's order, which
    gives each site its template churn (:class:`~bench.revisit_site.Site`), whichever sites run."""
    chosen = [run for run in runs if run.budget is not None]
    alone: dict[str, dict[str, Any]] = {}
    for host in hosts:
        site = Site(replace(dataset, pages=tuple(p for p in dataset.pages if p.host == host)), order)
        for run, result in zip(chosen, run_all(scenario, chosen, args.driver, args.jobs, site, args.mirrors),
                               strict=True):
            result["sites"][host].pop("whole_optimum_at_budget", None)   # the site is the whole set here
            alone.setdefault(run.name, {})[host] = result["sites"][host]
    return alone


def dataset_summary(site: Site, dataset: Dataset) -> dict[str, Any]:
    """What the pages hold, whole and per site (the report's first paragraph and table)."""
    truth = [page.real_changes() for page in site.pages]
    repos = {page.host: page.site for page in dataset.pages}
    per_site = {}
    for host, pages in site.by_host.items():
        changes = sorted(page.real_changes() for page in pages)
        numbers = sum(a.text_id != b.text_id and a.words_id == b.words_id
                      for page in pages for a, b in zip(page.versions, page.versions[1:], strict=False))
        per_site[host] = {"repo": repos[host], "pages": len(pages), "changes": sum(changes),
                          "median_changes": statistics.median(changes), "busiest": changes[-1],
                          "quiet_pages": changes.count(0), "numbers_only_changes": numbers,
                          "commits": sum(len(page.versions) - 1 for page in pages)}
    return {**burstiness(dataset), "window_days": site.window_s / DAY, "real_changes": sum(truth),
            "quiet_pages": truth.count(0), "busy_pages": sum(t >= BUSY_CHANGES for t in truth),
            "sites": per_site}


def _trees(paths: list[Path]) -> dict[str, str]:
    """Label (the checkout's short commit, else its folder's name) to path of each ``--tree``."""
    labels: dict[str, str] = {}
    for path in paths:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False)
        label = done.stdout.strip() if done.returncode == 0 else path.name
        labels[label if label not in labels else f"{label}-{len(labels)}"] = str(path.resolve())
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    parser.add_argument("--budgets", default="0.1,0.3,1",
                        help="default policy's budgets, fetches per page per day")
    parser.add_argument("--warmup-days", type=float, default=Scenario.warmup_days)
    parser.add_argument("--seed", type=int, default=Scenario.seed)
    parser.add_argument("--seeds", type=int, default=Scenario.seeds,
                        help="replay every run at this many seeds (from --seed on) and report their means: "
                             "a site's freshness moves by a few thousandths from one seed to the next")
    parser.add_argument("--driver", choices=["subprocess", "inprocess"], default="subprocess",
                        help="inprocess calls the stage directly (quick experiments; not the benchmark)")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="also run the default policy of the stage of this checkout (repeatable)")
    parser.add_argument("--sites", default="", help="only these hosts, comma-separated (quick experiments)")
    parser.add_argument("--policies", default="nutch,stormcrawler,default,fixed",
                        help="which of the standard runs to replay (Nutch's is the slowest: its 60 s "
                             "shortest interval on pages that change often)")
    parser.add_argument("--each-site", action="store_true",
                        help="per-site rows and checks from each site crawled alone, with its own budget")
    parser.add_argument("--jobs", type=int, default=2, help="policies replayed at once")
    parser.add_argument("--output", type=Path, default=RESULTS / "revisit_real")
    args = parser.parse_args(argv)
    try:
        dataset = load(args.mirrors)
    except MirrorsMissing as missing:
        print(f"revisit_real skipped: the repositories of bench/revisit_histories.json are not mirrored "
              f"({missing}); put a bare mirror of each at <mirrors>/<owner>+<name>/repo (git clone --mirror) "
              "and pass --mirrors or set REVISIT_MIRRORS")
        return 0
    hosts = list(dict.fromkeys(page.host for page in dataset.pages))
    if args.sites:
        wanted = set(args.sites.split(","))
        dataset = replace(dataset, pages=tuple(p for p in dataset.pages if p.host in wanted))
    site = Site(dataset, hosts)
    budgets = tuple(float(b) for b in args.budgets.split(","))
    scenario = Scenario(args.warmup_days, budgets, seed=args.seed, seeds=args.seeds)
    wanted_policies = tuple(args.policies.split(","))
    runs = [run for run in standard_runs(scenario, _trees(args.tree)) if run.name.startswith(wanted_policies)]
    results = run_all(scenario, runs, args.driver, args.jobs, site, args.mirrors)
    if args.each_site:
        alone = each_site_alone(scenario, runs, args, dataset, [h for h in hosts if h in site.by_host], hosts)
        for result in results:
            result["sites_alone"] = result["run"] in alone
            result["sites"] = alone.get(result["run"], result["sites"])
    outcome = checks({r["run"]: r for r in results}, [b for b in budgets if b in CHECKED_BUDGETS])
    command = " ".join(["python -m bench.revisit_real", *(sys.argv[1:] if argv is None else argv)])
    markdown = report(scenario, command, dataset_summary(site, dataset), results, outcome)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".md").write_text(markdown)
    document = {"command": command, "scenario": asdict(scenario), "runs": results, "checks": outcome}
    args.output.with_suffix(".json").write_text(json.dumps(document, indent=1, default=float) + "\n")
    print(markdown)
    return 0 if all(c["passed"] for c in outcome if c["tree"] is None) else 1


if __name__ == "__main__":
    sys.exit(main())
