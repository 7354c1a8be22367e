"""Which new URL a Scrapy request's work belongs to: what the hub writes in a request's meta (keys
starting with ``crawl_dedup``, which never travel: :mod:`streams.integrations.requests`) so that its
offset is done once the request and what it gave rise to are (:mod:`streams.integrations.offsets`).

A request taken from new-urls carries :class:`Taken`; its retries and redirects carry it on
(Scrapy copies meta). A request fetched only where it was made (``dont_filter``, not GET, not
serializable), yielded by the callback of a taken one, carries :class:`Held`: it holds that offset.
"""

from __future__ import annotations

from typing import NamedTuple

from scrapy import Request

TAKEN_META = "crawl_dedup"  # Taken: a request for a new URL from new-urls
HELD_META = "crawl_dedup_held"  # Held: fetched here only, holding the offset of the new URL it came from
PARENT_META = "crawl_dedup_parent"  # (partition, offset) of the new URL whose callback made the request
LOCAL_META = "crawl_dedup_local"  # queued here without the trip through the URL stage


class Taken(NamedTuple):
    """Which new URL a request stands for (its retries and redirects carry it on); never travels."""

    partition: int
    offset: int
    url: str
    generation: int  # the partition's assignment it was taken in


class Held(NamedTuple):
    partition: int
    offset: int
    token: int
    url: str


def lineage(request: Request) -> Taken | Held | None:
    """The new URL a request's work belongs to, if it carries one (a retry or redirect of ours)."""
    found: Taken | Held | None = request.meta.get(TAKEN_META) or request.meta.get(HELD_META)
    return found
