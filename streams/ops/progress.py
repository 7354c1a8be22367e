"""Live progress of running workers, read from their own ``/metrics`` endpoints.

The demo shows its progress this way, so what it prints is exactly what Prometheus would see:
per stage, records in and their rate, consumer lag, the duplicate ratio and dead letters.
"""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from streams.ops.metrics import duplicate_ratio


@dataclass
class StageProgress:
    """One stage's figures from one scrape."""

    records_in: float = 0.0
    lag: float = 0.0
    dead_letters: float = 0.0
    decisions: Counter[str] = field(default_factory=Counter)

    @property
    def duplicate_ratio(self) -> float | None:
        return duplicate_ratio(self.decisions)


def scrape(port: int, input_topic: str, host: str = "127.0.0.1", timeout_s: float = 2.0) -> StageProgress:
    """Read one worker's endpoint; a worker not serving yet reads as zeros."""
    progress = StageProgress()
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as response:
            text = response.read().decode()
    except OSError:
        return progress
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "crawl_dedup_records_in_total" and labels.get("topic") == input_topic:
                progress.records_in += value
            elif name == "crawl_dedup_consumer_lag_records":
                progress.lag += value  # one worker per stage here: its group's partitions, once each
            elif name == "crawl_dedup_dead_letters_total":
                progress.dead_letters += value
            elif name == "crawl_dedup_decisions_total":
                progress.decisions[labels["decision"]] += int(value)
    return progress


class ProgressBoard:
    """Renders each stage's line with its input rate since the previous render."""

    def __init__(self, stages: dict[str, tuple[int, str]]) -> None:
        self._stages = stages  # stage -> (metrics port, input topic)
        self._previous: dict[str, tuple[float, float]] = {}

    def render(self) -> list[str]:
        lines = []
        for stage, (port, topic) in self._stages.items():
            now, progress = time.monotonic(), scrape(port, topic)
            before_t, before_n = self._previous.get(stage, (now, progress.records_in))
            rate = (progress.records_in - before_n) / (now - before_t) if now > before_t else 0.0
            self._previous[stage] = (now, progress.records_in)
            ratio = progress.duplicate_ratio
            decided = ", ".join(f"{name} {n:,}" for name, n in sorted(progress.decisions.items()))
            lines.append(f"   {stage:<13} in {progress.records_in:>8,.0f} ({rate:>7,.0f}/s)  lag "
                         f"{progress.lag:>7,.0f}  dup {'-' if ratio is None else f'{ratio:.2f}':>4}  "
                         f"dead {progress.dead_letters:>3,.0f}  [{decided}]")
        return lines
