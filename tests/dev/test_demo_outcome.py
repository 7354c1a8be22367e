"""The demo's pass/fail predicate, apart from its printing and the broker: every planted copy counts."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from streams.dev.demo import MALFORMED_PAGES, NEAR_COPIES_FOUND_AT_LEAST, Outcome, PlantedCrawl, mismatches

CRAWL = PlantedCrawl(records=[], distinct_urls=5_000, malformed=20, respelled=0)
PLANTED = Counter({"original": 60, "mirror": 60, "near": 30, "refetch": 60})
TRUTH = Counter({"True": 32, "False": 28})
MISSED = PLANTED["near"] - NEAR_COPIES_FOUND_AT_LEAST

# What the demo reads back when it passes (its summary of a real run).
PASSING = Outcome(
    crawl=CRAWL, new_urls=5_000, planted=PLANTED, verdicts=210,
    kinds=Counter({"unique": 60 + 32 + MISSED, "exact": 60 + 28, "near": NEAR_COPIES_FOUND_AT_LEAST}),
    mirrors_found=60, updates=210, changed=Counter({"True": 32, "False": 28, "None": 150}), truth=TRUTH,
    letters=Counter({("url-dedup", "schema"): 20, ("content-seen", "schema"): len(MALFORMED_PAGES),
                     ("revisit", "invalid_json"): len(MALFORMED_PAGES)}))


def test_the_passing_outcome_passes() -> None:
    assert mismatches(PASSING) == []


@pytest.mark.parametrize(("changes", "named"), [
    ({"new_urls": 5_001}, "new URLs 5001"),
    ({"mirrors_found": 59}, "mirrors found 59 of 60"),
    ({"kinds": Counter({"unique": 60 + 32 + MISSED + 1, "exact": 88,
                        "near": NEAR_COPIES_FOUND_AT_LEAST - 1})},
     "near copies found"),
    ({"kinds": Counter({"unique": 60 + 32 + MISSED + 1, "exact": 87, "near": NEAR_COPIES_FOUND_AT_LEAST})},
     "unique pages"),
    ({"changed": Counter({"True": 31, "False": 29, "None": 150})}, "changes found 31"),
    ({"letters": Counter({("url-dedup", "schema"): 19, ("content-seen", "schema"): 3,
                          ("revisit", "schema"): 3})}, "url-dedup dead letters 19"),
    ({"verdicts": 209}, "page verdicts 209"),
], ids=["url-doubled", "mirror-missed", "near-copy-missed-beyond-promise", "duplicate-called-unique",
        "change-missed", "dead-letter-lost", "verdict-lost"])
def test_each_departure_from_the_planted_crawl_fails(changes: dict[str, object], named: str) -> None:
    failed = mismatches(replace(PASSING, **changes))  # type: ignore[arg-type]
    assert failed and any(named in message for message in failed), failed
