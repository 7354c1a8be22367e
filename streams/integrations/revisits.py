"""The re-fetches the revisit stage schedules, for a long-running crawl (``CRAWL_DEDUP_REVISIT``).

Each ``revisit_update`` (schemas/revisit_update.schema.json) says when a URL should be fetched
again (``next_fetch_at``) and with which conditional headers (``If-None-Match``,
``If-Modified-Since``). :class:`RevisitSchedule` keeps the latest update per URL, in due order; an
update superseded by a later one for its URL is done at once, the others once their re-fetch is
(the offsets bookkeeping is :class:`~streams.integrations.offsets.Offsets`, as for new URLs, so a
restarted process reads again the updates still waiting and the re-fetches in flight).

``ahead_s`` (``CRAWL_DEDUP_REVISIT_AHEAD_S``) also counts as due what comes due within that long of
the process's start, for updates written before it started: a crawl run as rounds (``scrapy crawl``
from cron, a test) takes the next round's re-fetches without waiting for their hour, and never loops
on the updates its own re-fetches produce, whichever process reads them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Position = tuple[int, int]  # (partition, offset) of an update


@dataclass(order=True)
class _Due:
    due_s: float
    url: str = field(compare=False)
    position: Position = field(compare=False)


@dataclass(frozen=True)
class Refetch:
    url: str
    headers: dict[str, str]
    position: Position


class RevisitSchedule:
    def __init__(self, started_s: float, ahead_s: float = 0.0) -> None:
        self._started_s = started_s
        self._horizon_s = started_s + ahead_s
        self._heap: list[_Due] = []  # written before the start: may be taken ahead, up to the horizon
        self._later: list[_Due] = []  # written since: only when really due
        self._latest: dict[str, tuple[Position, dict[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._latest)

    def add(self, update: dict[str, Any], position: Position, written_s: float) -> Position | None:
        """Schedule ``update`` (written to its topic at ``written_s``); return the position of the
        update it supersedes, if any."""
        url = update["url"]
        due_s = datetime.fromisoformat(update["next_fetch_at"].replace("Z", "+00:00")).timestamp()
        previous = self._latest.get(url)
        self._latest[url] = (position, update)
        heap = self._heap if written_s < self._started_s else self._later
        heapq.heappush(heap, _Due(due_s, url, position))
        return previous[0] if previous is not None else None

    def drop(self, partitions: set[int]) -> None:
        """Another process reads these partitions now."""
        self._latest = {url: entry for url, entry in self._latest.items() if entry[0][0] not in partitions}

    def due(self, now_s: float) -> list[Refetch]:
        out = []
        for heap, until_s in ((self._heap, max(now_s, self._horizon_s)), (self._later, now_s)):
            while heap and heap[0].due_s <= until_s:
                entry = heapq.heappop(heap)
                latest = self._latest.get(entry.url)
                if latest is None or latest[0] != entry.position:
                    continue  # superseded, or its partition went to another process
                del self._latest[entry.url]
                headers = {str(k): str(v) for k, v in (latest[1].get("conditional_headers") or {}).items()}
                out.append(Refetch(entry.url, headers, entry.position))
        return out
