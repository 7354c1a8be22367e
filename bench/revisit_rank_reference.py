"""How well an online policy could rank a site's pages by their true changes, for the real-history bench.

The bench judges a policy's fetches per page by their rank correlation with the pages' true numbers
of changes over two years (:func:`bench.revisit_oracle.spearman`). The hindsight optimum ranks them
perfectly, since it knows every rate from the start; no policy that learns from its fetches can.
This reference is what a policy with perfect change detection and no foresight could reach: each
page's score is the time-average, over the measured window, of the square root of its posterior
rate given every change as it happened (a Gamma prior of shape ``alpha`` at the site's mean rate;
slow pages' optimal frequencies go as the square root of the rate, Cho and Garcia-Molina 2003).
Where the reference stays under a target, the histories, not the policy, put it out of reach.

``python -m bench.revisit_rank_reference`` prints the reference per site for shapes 0.5 and 0.125.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from bench.revisit_history import DEFAULT_MIRRORS, MirrorsMissing, load
from bench.revisit_oracle import spearman
from bench.revisit_site import Site, SitePage

DAY = 86400.0
GRID_POINTS = 2000


def reference_rank(pages: Sequence[SitePage], window_s: float, warmup_s: float, alpha: float) -> float:
    """The rank correlation of the reference scores (module docstring) with the true changes."""
    truth = [page.real_changes() for page in pages]
    mean_per_s = max(sum(truth), 1) / (len(pages) * window_s)
    grid = np.linspace(warmup_s, window_s, GRID_POINTS)
    scores = []
    for page in pages:
        seen = np.searchsorted(np.array(page.change_times_s()), grid)
        posterior = (alpha + seen) / (alpha / mean_per_s + grid)
        scores.append(float(np.mean(np.sqrt(posterior))))
    return spearman(scores, truth)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup-days", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        site = Site(load(DEFAULT_MIRRORS))
    except MirrorsMissing as missing:
        print(f"revisit rank reference: {missing}; nothing to measure")
        return 0
    for host, pages in site.by_host.items():
        values = {alpha: round(reference_rank(pages, site.window_s, args.warmup_days * DAY, alpha), 3)
                  for alpha in (0.5, 0.125)}
        print(f"{host}: shape 0.5 {values[0.5]}, shape 0.125 {values[0.125]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
