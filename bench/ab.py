"""What the A/B scripts (url_ab, content_ab) share: the workers' CPU clock and the closing report.

Each round runs both checkouts' stages in alternating order; the report gives the best wall-clock
round of each and the median rate per CPU second, which other load on a shared machine disturbs
far less (a change's speed is the ratio of the two, printed for both), and the median of the
rounds' own ratios of rates: a round's two runs are side by side, so a burst of other load that
lifts or sinks one run of one round moves one ratio, where it can make either side's best."""

from __future__ import annotations

import resource
import statistics
from collections.abc import Mapping, Sequence


def cpu_s() -> float:
    """CPU seconds of this process's finished children (each stage worker is waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def round_line(round_: int, rates: Mapping[str, Sequence[float]], per_cpu_s: Mapping[str, Sequence[float]],
               unit: str) -> str:
    return (f"round {round_}: {({name: found[-1] for name, found in rates.items()})} "
            f"{unit} per CPU second: {({name: found[-1] for name, found in per_cpu_s.items()})}")


def report(rates: Mapping[str, Sequence[float]], per_cpu_s: Mapping[str, Sequence[float]], rounds: int,
           unit: str) -> str:
    """The best round of each and the median per CPU second, each with this / other, and the
    median of the rounds' ratios."""
    best = {name: max(found) for name, found in rates.items()}
    medians = {name: statistics.median(found) for name, found in per_cpu_s.items()}
    paired = statistics.median(this / other
                               for this, other in zip(rates["this"], rates["other"], strict=True))
    return (f"best of {rounds}: {best}; this / other {best['this'] / best['other']:.3f}\n"
            f"{unit} per CPU second, median of {rounds}: {medians}; this / other "
            f"{medians['this'] / medians['other']:.3f}\n"
            f"rate, this / other, median of the {rounds} rounds' ratios: {paired:.3f}")
