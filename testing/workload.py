"""The reliability suite's inputs (issue 7) and what the stages' offline mode decides on them.

Inputs for the three stages, run side by side as they are deployed (``make demo`` does the same):
``url-dedup`` reads the frontier; ``content-seen`` and ``revisit`` both read the fetched pages. The
offline answers are the reference each stage's committed outputs are compared with
(:mod:`testing.reliability`).

Why the offline run is the reference: ``--offline`` drives the stage's own processors over one
store, in input order, so it is what one uninterrupted worker decides whenever the decision does
not depend on how records of different input partitions interleave. The inputs are built so that
it does not:

- frontier records are keyed by the URL they spell (all spellings of one URL share an input
  partition, so the first spelling seen is the first produced, as offline);
- fetched pages are keyed by URL (all fetches of one URL in order, as offline), and the page
  stage's originals are produced, and decided, before any copy of them (see :class:`Phase`).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from streams.dev import simweb
from streams.topics import Topics

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STAGES = ("url-dedup", "content-seen", "revisit")
APP = "app"
FRONTIER, PAGES = "frontier", "fetched-pages"
Record = tuple[bytes | None, bytes]

INPUT_OF = {"url-dedup": FRONTIER, "content-seen": PAGES, "revisit": PAGES}


def input_topic(topics: Topics, stage: str) -> str:
    return topics.frontier if INPUT_OF[stage] == FRONTIER else topics.fetched_pages


def output_topic(topics: Topics, stage: str) -> str:
    return {"url-dedup": topics.new_urls, "content-seen": topics.page_verdicts,
            "revisit": topics.revisit_updates}[stage]


# -- inputs ------------------------------------------------------------------------------------------

BAD_FRONTIER: tuple[bytes, ...] = (b"{not json", b'{"url": 7}', b'{"url": "ftp://files.example/a"}')
BAD_PAGES: tuple[bytes, ...] = (b"{not json", b'{"url": 7}')


@dataclass
class Phase:
    """Part of the input, produced together. ``copies``: the page records of this phase copy pages of
    earlier phases (mirrors, near copies, refetches), so the page stage must have decided every earlier
    page before they are produced.

    That is the one order the page stage's answers depend on: a copy is a duplicate of the *earliest*
    page it matches among pages already inserted in the block tables. If a copy reached its buckets
    before its original (produced on another input partition, in the same moment), both would be
    unique: an honest outcome of a race, but not the offline answer. A crawl meets originals before
    their copies, and the tests produce them that way.
    """

    records: dict[str, list[Record]]
    copies: bool = False

    def size(self) -> int:
        return sum(len(items) for items in self.records.values())


@dataclass
class Workload:
    phases: list[Phase]
    bad: dict[str, int] = field(default_factory=dict)  # input kind -> planted bad records

    def lines(self, kind: str) -> bytes:
        """Every record of one input, in produce order, as offline input lines."""
        values = [value for phase in self.phases for _, value in phase.records.get(kind, [])]
        return b"".join(value.replace(b"\n", b" ") + b"\n" for value in values)

    def total(self) -> int:
        return sum(phase.size() for phase in self.phases)

    def pages_before(self, index: int) -> int:
        """Well-formed page records produced in the phases before ``index``."""
        return sum(len(phase.records.get(PAGES, [])) for phase in self.phases[:index]) - \
            sum(1 for phase in self.phases[:index] for _, value in phase.records.get(PAGES, [])
                if value in BAD_PAGES)


def frontier(seed: int, distinct: int, total: int) -> list[Record]:
    """``total`` frontier records over ``distinct`` URLs, each spelled several ways (safe-profile
    variants of one canonical URL), every URL at least once, keyed by the URL they spell."""
    rng = random.Random(seed)
    order = list(range(distinct)) + [rng.randrange(distinct) for _ in range(total - distinct)]
    rng.shuffle(order)
    out: list[Record] = []
    for number in order:
        host, path = f"site{number % 23}.example", f"/path/{number}/page"
        spelling = rng.choice([
            f"http://{host}{path}", f"HTTP://{host.upper()}{path}", f"http://{host}:80{path}",
            f"http://{host}/path/{number}/./page#top", f"http://{host}/path/{number}/%70age",
        ])
        out.append((f"{host}{path}".encode(), orjson.dumps({"url": spelling, "depth": number % 4})))
    return out


def crawl_pages(seed: int, articles: int, refetch_days: int = 2) -> tuple[list[Record], list[Record]]:
    """Fetched pages of a simulated crawl (:mod:`streams.dev.simweb`): the originals, then their copies
    (mirrors and near copies an hour later; every original fetched again each day for
    ``refetch_days`` days, each time half of them rewritten), each keyed by URL."""
    pages = simweb.crawl(seed=seed, articles=articles)
    rng = random.Random(seed)
    pages += [page for day in range(1, refetch_days + 1)
              for page in simweb.refetches(rng, pages, after=timedelta(days=day))]
    originals = [(p.url.encode(), orjson.dumps(p.record)) for p in pages if p.kind == "original"]
    copies = [(p.url.encode(), orjson.dumps(p.record)) for p in pages if p.kind != "original"]
    return originals, copies


def _split(items: list[Record], parts: int) -> list[list[Record]]:
    return [items[len(items) * i // parts:len(items) * (i + 1) // parts] for i in range(parts)]


def _with_bad(items: list[Record], bad: Iterable[bytes], seed: int) -> list[Record]:
    rng = random.Random(seed)
    out = list(items)
    for value in bad:
        out.insert(rng.randrange(len(out) + 1), (None, value))
    return out


def workload(seed: int = 1, articles: int = 40, urls: int = 600, repeats: int = 3,
             phases_per_half: int = 1) -> Workload:
    """Two halves: the first has the originals and the first half of the frontier, the second the
    copies and the rest of the frontier (repeats of earlier URLs and new ones); each half split in
    ``phases_per_half`` phases. Bad records (dead letters) are planted in the first half."""
    originals, copies = crawl_pages(seed, articles)
    urls_in = frontier(seed, urls, urls * repeats)
    first_f, second_f = _split(urls_in, 2)
    first_f, originals = _with_bad(first_f, BAD_FRONTIER, seed), _with_bad(originals, BAD_PAGES, seed)
    phases = [Phase({FRONTIER: f, PAGES: p})
              for f, p in zip(_split(first_f, phases_per_half), _split(originals, phases_per_half),
                              strict=True)]
    phases += [Phase({FRONTIER: f, PAGES: p}, copies=i == 0)
               for i, (f, p) in enumerate(zip(_split(second_f, phases_per_half),
                                              _split(copies, phases_per_half), strict=True))]
    return Workload(phases, {FRONTIER: len(BAD_FRONTIER), PAGES: len(BAD_PAGES)})


# -- the offline answers ----------------------------------------------------------------------------

def offline(stage: str, lines: bytes, state: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``python -m streams <stage> --offline`` over ``lines``: its outputs, in order."""
    result = subprocess.run([sys.executable, "-m", "streams", stage, "--offline", "--state-dir", str(state)],
                            input=lines, capture_output=True, timeout=300, cwd=PROJECT_ROOT, check=False,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return [orjson.loads(line) for line in result.stdout.splitlines()]
