"""Where a Scrapy process's time goes on the stages, as Scrapy stats (the bench reads them).

A new URL costs a crawl through the stages three waits a crawl on Scrapy's own scheduler does not
have: the URL's round trip (written to the frontier, decided by the URL stage, read back from
new-urls: ``crawl_dedup/url_round_trip_*``), the page's verdict (``CRAWL_DEDUP_SKIP_DUPLICATES``:
``crawl_dedup/verdict_wait_*``), and the buffer (the intake paused because ``CRAWL_DEDUP_BUFFER``
new URLs are taken and not yet done: ``crawl_dedup/buffer_full_s``). What they cost the crawl is
``crawl_dedup/downloader_waiting_s``: time the downloader had a free slot and nothing queued while
this process still had new URLs in flight, i.e. waited for the stages, not for the site. Totals in
seconds and counts as the crawl goes; the medians and 90th percentiles when the spider closes.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import datetime
from typing import Any, Final

from scrapy.crawler import Crawler

SAMPLES: Final = 10_000  # kept per measure (a uniform sample beyond: Vitter's algorithm R)


class Measure:
    def __init__(self, stats: Any, name: str) -> None:
        self._stats = stats
        self.name = name
        self.count = 0
        self.total_s = 0.0
        self.samples: list[float] = []
        self._random = random.Random(0)

    def add(self, seconds: float) -> None:
        self.count += 1
        self._stats.inc_value(f"crawl_dedup/{self.name}s")
        # The total is summed unrounded and rounded as a whole: each wait rounded to the millisecond
        # first made a crawl whose verdicts were all there already (sub-millisecond waits) total 0.
        self.total_s += seconds
        self._stats.set_value(f"crawl_dedup/{self.name}_s", round(self.total_s, 6))
        if len(self.samples) < SAMPLES:
            self.samples.append(seconds)
        else:
            slot = self._random.randrange(self.count)
            if slot < SAMPLES:
                self.samples[slot] = seconds

    def close(self) -> None:
        if len(self.samples) >= 2:
            deciles = statistics.quantiles(self.samples, n=10)
            self._stats.set_value(f"crawl_dedup/{self.name}_p50_s", round(statistics.median(self.samples), 3))
            self._stats.set_value(f"crawl_dedup/{self.name}_p90_s", round(deciles[8], 3))


class Pacing:
    def __init__(self, stats: Any) -> None:
        self._stats = stats
        self.round_trip = Measure(stats, "url_round_trip")
        self.verdict_wait = Measure(stats, "verdict_wait")
        self._last_s: float | None = None
        self._totals: dict[str, float] = {}

    def turn(self, now: float, crawler: Crawler, paused: bool, queued: int, in_flight: int) -> None:
        """One turn of the hub's loop: what the time since the last turn was spent on."""
        elapsed = 0.0 if self._last_s is None else now - self._last_s
        self._last_s = now
        if paused:
            self._add("buffer_full_s", elapsed)
        downloader = crawler.engine.downloader if crawler.engine is not None else None
        if downloader is not None and not queued and in_flight \
                and len(downloader.active) < downloader.total_concurrency:
            self._add("downloader_waiting_s", elapsed)

    def taken(self, discovered_at: Any) -> None:
        """A new URL taken: how long since its frontier record was written (wall clocks)."""
        if isinstance(discovered_at, str):
            try:
                written = datetime.fromisoformat(discovered_at.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return
            self.round_trip.add(max(0.0, time.time() - written))

    def committed(self, seconds: float) -> None:
        self._stats.inc_value("crawl_dedup/commits")
        self._add("commit_s", seconds)

    def _add(self, name: str, seconds: float) -> None:
        self._totals[name] = self._totals.get(name, 0.0) + seconds
        self._stats.set_value(f"crawl_dedup/{name}", round(self._totals[name], 3))

    def close(self) -> None:
        self.round_trip.close()
        self.verdict_wait.close()
