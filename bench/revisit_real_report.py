"""The acceptance checks and the markdown report of bench/revisit_real.py.

Checks are judged per site as well as for the whole set: five slow documentation sites can hide one
fast site's misses in the sum (a site of 60 pages is a seventh of the bench, its misses a seventh of
the average). At every budget of :data:`CHECKED`, a site passes when the default policy is at least
as fresh there as the fixed interval of the same spend, reaches 0.99 of the hindsight optimum of
that site's pages at the budget, misses at most 5 % of the real changes it re-fetched, calls at most
1 % of its churn-only re-fetches changed, and spreads its fetches with a rank correlation of at
least 0.9 with the pages' true changes. The whole set keeps the targets it had (0.995 of its
optimum). Runs of another tree (``--tree``) are judged the same way, for comparison only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bench.revisit_oracle import BUSY_CHANGES

if TYPE_CHECKING:
    from bench.revisit_real import Scenario

HOUR, DAY = 3600.0, 86400.0
WHOLE_RATIO, SITE_RATIO = 0.995, 0.99


def checks(results: dict[str, dict[str, Any]], budgets: Iterable[float]) -> list[dict[str, Any]]:
    """Every target (module docstring) at each of ``budgets`` that was run, for each default run (this
    tree's and the others'), with the measured value."""
    outcome = []
    for budget in budgets:
        fixed = results.get(f"fixed {1 / budget:g} d")
        for name, default in results.items():
            if default["budget"] != budget or not name.startswith("default") or fixed is None:
                continue
            outcome.extend(_targets(name, default, fixed, None, WHOLE_RATIO))
            outcome.extend(row for host in default["sites"]
                           for row in _targets(name, default["sites"][host], fixed["sites"][host], host,
                                               SITE_RATIO))
    for row in outcome:
        row["tree"] = results[row["run"]]["tree"]
    return outcome


def _targets(name: str, default: dict[str, Any], fixed: dict[str, Any], site: str | None,
             least: float) -> list[dict[str, Any]]:
    ratio = default["freshness"] / default["optimum_at_budget"]["freshness"]
    where = f"{name}{f' {site}' if site else ''}"
    rows = [
        ("fresher", "freshness >= the fixed interval's", round(default["freshness"] - fixed["freshness"], 5),
         default["freshness"] >= fixed["freshness"]),
        ("ratio", f"freshness / hindsight optimum at the budget >= {least}", round(ratio, 4), ratio >= least),
        ("missed", "real changes called unchanged <= 5 %", round(default["missed_share"], 4),
         default["missed_share"] <= 0.05),
        ("churn", "churn-only re-fetches called changed <= 1 %", round(default["false_change_share"], 5),
         default["false_change_share"] <= 0.01),
        ("rank", "rank correlation of fetches with true change rate >= 0.9", round(default["spearman"], 4),
         default["spearman"] >= 0.9),
    ]
    checked = [{"check": f"{where}: {text}", "run": name, "site": site, "target": key, "value": value,
                "passed": bool(passed)} for key, text, value, passed in rows]
    if "whole_optimum_at_budget" in default:    # could the whole set's optimum pass "fresher" here?
        gap = default["whole_optimum_at_budget"] - fixed["freshness"]
        checked[0]["whole_optimum_minus_fixed"] = round(gap, 5)
    if "freshness_by_seed" in default:      # the differences seed by seed, for the spread
        checked[0]["by_seed"] = [round(a - b, 5) for a, b in zip(default["freshness_by_seed"],
                                                                  fixed["freshness_by_seed"], strict=True)]
    return checked


def report(scenario: Scenario, command: str, summary: dict[str, Any], results: list[dict[str, Any]],
           outcome: list[dict[str, Any]]) -> str:
    """The markdown written to bench/results/revisit_real.md."""
    sites = summary["sites"]
    lines = [
        "# Revisit policies on real change histories", "", f"Command: `{command}`", "",
        f"{summary['pages']} pages of {len(sites)} public repositories (bench/revisit_histories.json) over "
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
        f"{scenario.min_interval_s / HOUR:g} h to {scenario.max_interval_s / DAY:g} d; the pages first "
        "fetched spread over one fixed interval at the run's budget, each with its own phase. "
        + (f"Every run replayed at {scenario.seeds} seeds ({scenario.seed} on): the rows are their means, "
           "the per-site checks' freshness range beside them. " if scenario.seeds > 1 else "")
        + "Each policy drives "
        "`python -m streams revisit --offline` one fetch at a time (bench/revisit_real.py; the site, its "
        "churn and its validators: bench/revisit_site.py). The optimum: Cho and Garcia-Molina's allocation "
        "from each page's true rate at the same spend and bounds, replayed on the same histories "
        "(bench/revisit_oracle.py).", "",
        "| site | repository | pages | article changes | commits | median per page | busiest page "
        "| never changed | numbers-only changes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *(f"| {host} | {s['repo']} | {s['pages']} | {s['changes']} | {s['commits']} "
          f"| {s['median_changes']:g} | {s['busiest']} | {s['quiet_pages']} | {s['numbers_only_changes']} |"
          for host, s in sites.items()),
        "", "All sites:", "",
        "| policy | fetches/page/day | freshness | optimum at that spend | ratio | rank corr. "
        "| busiest pages' share of fetches | real changes missed | churn called changed | 304 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_row(r["run"], r) for r in results), "",
        "The optimum's own rank correlation is 1 and its busiest pages' share "
        + ", ".join(f"{r['optimum']['busy_fetch_share']:.3f} ({r['run']})" for r in results
                    if r["run"].startswith("default")) + ".", "",
        *_per_site(results), "", *_check_tables(outcome),
    ]
    return "\n".join(lines) + "\n"


def _row(name: str, r: dict[str, Any]) -> str:
    best = r["optimum"]["freshness"]
    cells = [name, f"{r['fetches_per_page_per_day']:.3f}", f"{r['freshness']:.4f}", f"{best:.4f}",
             f"{r['freshness'] / best:.4f}", f"{r['spearman']:.3f}", f"{r['busy_fetch_share']:.3f}",
             f"{r['missed_share']:.3f}", f"{r['false_change_share']:.4f}", f"{r['not_modified_share']:.3f}"]
    return "| " + " | ".join(cells) + " |"


def _per_site(results: list[dict[str, Any]]) -> list[str]:
    """Each site's rows (every run), then how the churn-only re-fetches of the default runs were called."""
    alone = any(r.get("sites_alone") for r in results)
    lines = [("Per site, the default and fixed runs crawling each site alone, with a stage of its own and "
              "the budget for its pages only (--each-site); Nutch and StormCrawler on the whole set. "
              if alone else "Per site, every run on the whole set. ") +
             "(The optimum of the site's own pages; at the budget: the site given the budget alone; "
             "the whole set's: the optimum of all pages at the budget, on this site's pages; missed: of the "
             "real changes re-fetched, and in brackets the numbers-only changes missed of those re-fetched):",
             "", "| site | policy | fetches/page/day | freshness | optimum at that spend "
             "| optimum at the budget | ratio to it | the whole set's optimum here | rank corr. "
             "| real changes missed | churn called changed | 304 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for host in results[0]["sites"]:
        for r in results:
            if host not in r["sites"]:
                continue
            m = r["sites"][host]
            at_budget = m.get("optimum_at_budget", {}).get("freshness")
            cells = [host, r["run"], f"{m['fetches_per_page_per_day']:.3f}", f"{m['freshness']:.4f}",
                     f"{m['optimum']['freshness']:.4f}", f"{at_budget:.4f}" if at_budget else "",
                     f"{m['freshness'] / at_budget:.4f}" if at_budget else "",
                     f"{m['whole_optimum_at_budget']:.4f}" if "whole_optimum_at_budget" in m else "",
                     f"{m['spearman']:.3f}",
                     f"{m['missed_share']:.3f} ({m['numbers_only_missed']}/{m['numbers_only_found']})",
                     f"{m['false_change_share']:.4f}", f"{m['not_modified_share']:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Signals of the churn-only re-fetches (200s whose article text had not changed) and of all "
              "re-fetches, default runs:", "",
              "| site | policy | churn-only 200s: signals | all re-fetches: signals |",
              "|---|---|---|---|"]
    for host in results[0]["sites"]:
        for r in results:
            if r["run"].startswith("default"):
                m = r["sites"][host]
                signals = f"{_counts(m['churn_signals'])} | {_counts(m['signals'])}"
                lines.append(f"| {host} | {r['run']} | {signals} |")
    return lines


def _counts(signals: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(signals.items(), key=lambda kv: -kv[1]))


def _check_tables(outcome: list[dict[str, Any]]) -> list[str]:
    """Per-site checks as one row per run and site (a failed target's value marked NO), then the
    whole set's checks as before."""
    keys = ["fresher", "ratio", "missed", "churn", "rank"]
    by_row: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in outcome:
        if row["site"] is not None:
            by_row.setdefault((row["run"], row["site"]), {})[row["target"]] = row
    lines = ["Per-site checks: freshness minus the fixed interval's (>= 0), freshness / optimum at the "
             f"budget (>= {SITE_RATIO}), real changes missed (<= 0.05), churn called changed (<= 0.01), rank "
             "correlation (>= 0.9); NO marks a failed target. Beside the first, the same difference for the "
             "whole set's optimum at the budget on this site (negative: the optimum would fail it too, its "
             "fetches going to busier sites); with several seeds, after it the difference at each seed.", "",
             "| run | site | fresher | the optimum's | ratio | missed | churn | rank corr. | passed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for (run, host), rows in by_row.items():
        cells = [f"{rows[k]['value']}{'' if rows[k]['passed'] else ' NO'}" for k in keys]
        by_seed = rows["fresher"].get("by_seed")
        if by_seed:
            cells[0] += " (" + ", ".join(f"{d:+.5f}" for d in by_seed) + ")"
        cells.insert(1, str(rows["fresher"].get("whole_optimum_minus_fixed", "")))
        passed = all(rows[k]["passed"] for k in keys)
        lines.append(f"| {run} | {host} | " + " | ".join(cells) + f" | {'yes' if passed else 'NO'} |")
    lines += ["", "| check | value | passed |", "|---|---:|---|",
              *(f"| {c['check']} | {c['value']} | {'yes' if c['passed'] else 'NO'} |" for c in outcome
                if c["site"] is None)]
    return lines
