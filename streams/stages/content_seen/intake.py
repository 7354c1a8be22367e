"""Which of a batch's pages the page stage takes in, and their analyses: in child processes while the
worker routes the previous batch, or in the worker.

The engine hands a preparing stage each batch's input records before routing them, and routes them
in the next batch, or in the same one when it is a light batch's few
(:mod:`streams.runtime.inflow`). :meth:`Intake.prepare` takes the first of them while the pages in
flight (awaiting their replies here, or prepared and not routed yet; a page that waits only for its
horizon is not counted, :class:`~streams.stages.content_seen.waiting.PageCache`) stay under three
quarters of ``page_cache_mb`` (at least one when none is), and starts analysing them in the
children, if there are any (``analysis_processes``, by default one per usable core:
:mod:`streams.stages.content_seen.cores`) and the batch has two pages or more (one page alone is
analysed in the worker, without a pipe's cost or a wait); by the next batch their analysis is mostly
done. The offline driver hands it windows of lines read ahead the same way. The engine feeds the
rest in again once :meth:`Intake.ready` (in flight at half): without that, a worker catching up on a
backlog would route pages far faster than their replies come back through the shard topic, each
waiting in memory. A page is in flight for about four batches (prepared, routed, probed, replied
to), each up to the consumer's 64 MB queue, so much less than 384 MB in flight stalls the input
(docs/content-seen.md has the measurements).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import orjson

from streams import records
from streams.errors import RecordRejected
from streams.pages.analyze import (
    PageAnalysis,
    PageSettings,
    analysis_from_json,
    analysis_to_json,
    analyze_page,
)
from streams.pages.decode import Skipped
from streams.records import RecordKind
from streams.runtime.api import Message
from streams.runtime.extras import Pending, ProcessMap
from streams.stages.content_seen import payloads
from streams.stages.content_seen.waiting import PageCache

Place = tuple[int | None, int | None]  # a page's input partition and offset


class Intake:
    """The pages a stage takes from each batch, and their analyses."""

    def __init__(self, settings: PageSettings, processes: int, max_record_bytes: int,
                 pages: PageCache, payload_digests: bool = False) -> None:
        self._settings = settings
        self._payload_digests = payload_digests
        self._max_record_bytes = max_record_bytes
        self._pages = pages
        self._unrouted_bytes = 0  # pages taken in the last batch, routed in this one
        self._prepared: dict[Place, bytes] = {}
        self._pending: tuple[list[Place], Pending] | None = None
        self._pending_places: set[Place] = set()
        self._processes = processes
        self._pool: ProcessMap | None = None

    @property
    def processes(self) -> int:
        return self._processes

    def _children(self) -> ProcessMap:
        """The analysis processes, started with the first batch they get (a stage built and never
        given two pages at once, as in most tests and a line-at-a-time offline run, starts none)."""
        if self._pool is None:
            settings = self._settings
            analysis = {each.name: getattr(settings, each.name) for each in dataclasses.fields(PageSettings)}
            context = orjson.dumps({"settings": analysis, "max_record_bytes": self._max_record_bytes,
                                    "payload_digests": self._payload_digests})
            self._pool = ProcessMap(f"{__name__}:analyze_value", context, self._processes)
        return self._pool

    def close(self) -> None:
        """Stop the analysis processes, if they started; analyses under way are dropped."""
        pool, self._pool = self._pool, None
        self._pending, self._pending_places = None, set()
        if pool is not None:
            pool.close()

    def prepare(self, messages: Sequence[Message]) -> int:
        """How many of ``messages``, the first ones, to take (see the module docstring); their
        analysis starts in the children."""
        self._collect()  # the last batch's pages, routed in this one: the children are free
        budget = self._pages.max_bytes * 3 // 4 - self._pages.size_bytes - self._unrouted_bytes
        taken = 0
        for message in messages:
            budget -= len(message.value() or b"")
            if budget < 0 and (taken or len(self._pages) or self._unrouted_bytes):
                break
            taken += 1
        chosen = messages[:taken]
        self._unrouted_bytes = sum(len(message.value() or b"") for message in chosen)
        if self._processes > 0 and len(chosen) >= 2:  # one page alone is analysed in the worker, sooner
            places = [(message.partition(), message.offset()) for message in chosen]
            self._pending = (places, self._children().submit([message.value() or b"" for message in chosen]))
            self._pending_places = set(places)
        return taken

    def settle(self) -> None:
        """Wait for the children's analyses of the pages taken last (before the engine consumes the
        next batch: what it fetched meanwhile then goes to the children before these are routed)."""
        self._collect()

    def ready(self) -> bool:
        return self._pages.size_bytes + self._unrouted_bytes <= self._pages.max_bytes // 2

    def analyse(self, message: Message, record: dict[str, Any]) -> PageAnalysis | Skipped:
        """The page's analysis, or why it is not compared: from the child that analysed it, or done here."""
        place = (message.partition(), message.offset())
        if place in self._pending_places:
            self._collect()
        prepared = self._prepared.pop(place, None)
        if prepared is None:
            return analyze_page(record, self._settings)
        found = analysis_from_json(prepared)
        if isinstance(found, str):  # the child failed: decoding here tells bad base64 precisely
            records.body_bytes(record)
            raise RecordRejected("processing_error", found)
        return found

    def forget(self) -> None:
        """After a rebalance: pages taken may be another worker's to route now."""
        self._collect()
        self._prepared.clear()
        self._unrouted_bytes = 0

    def _collect(self) -> None:
        """The results of the pages handed to the children last, waiting for the last of them."""
        if self._pending is not None:
            places, pending = self._pending
            self._pending = None
            self._pending_places = set()
            self._prepared.update(zip(places, pending.results(), strict=True))


@functools.cache
def _child_settings(context: bytes) -> tuple[PageSettings, int, bool]:
    loaded = orjson.loads(context)
    return PageSettings(**loaded["settings"]), loaded["max_record_bytes"], loaded["payload_digests"]


def analyze_value(context: bytes, value: bytes) -> bytes:
    """Child side of ``analysis_processes``: a fetched-page record's bytes -> its analysis, as JSON.

    Never raises: a record the parent will reject anyway, or a failure, is an ``error`` result
    (the parent decodes the record itself and dead-letters it with the real reason).
    """
    settings, max_record_bytes, payload_digests = _child_settings(context)
    try:
        record = records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=max_record_bytes)
        found = analyze_page(record, settings)
        if payload_digests and isinstance(found, PageAnalysis):  # off the worker
            found = dataclasses.replace(found, payload_sha1=payloads.payload_sha1(record))
        return analysis_to_json(found)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which decides
        return orjson.dumps({"error": repr(error)})
