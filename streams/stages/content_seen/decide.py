"""The decide step: a page off its gather shard's queue gets its verdict, and, when nothing earlier
matched, its input record goes on to ``unique-pages``.

The record is taken from the worker's memory (:class:`~streams.stages.content_seen.waiting.PageCache`)
or read back from the input topic by its position (:mod:`streams.stages.content_seen.waiting` says
why the page itself is never state). A unique page whose input record is gone (retention) keeps its
verdict, and a ``page_unavailable`` dead letter says which page ``unique-pages`` lacks.

A page is decided by the processor of the progress (or drain) record that covers its horizon, in
that record's transaction, with no decide record of its own (:meth:`Decider.decide_covered`; on
the local path, :mod:`streams.stages.content_seen.local`, the progress a worker's own shards give
it is decided at once). A page whose outputs a topic refuses becomes a dead letter alone
(``output_too_large``) that names and carries its input record, so it can be replayed from the
letter, and the other pages decided with it keep theirs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from streams import records
from streams.archives.payload import format_sha1
from streams.errors import RecordRejected
from streams.records import RecordKind
from streams.runtime.api import BatchState, Emit, Message, StageContext
from streams.runtime.extras import InputReader
from streams.stages.content_seen.buckets import Match
from streams.stages.content_seen.last_verdicts import LastVerdict, LastVerdicts
from streams.stages.content_seen.payloads import Capture
from streams.stages.content_seen.shard_records import Decide
from streams.stages.content_seen.waiting import PageCache, Source, source_of, take


def payload_fields(head: dict[str, Any], first: Capture | None) -> dict[str, str | None]:
    """The verdict's payload fields, for a page whose head has its payload's SHA-1 (none else, so
    a verdict is as earlier versions wrote it): the WARC payload digest, and the first capture of
    the same payload, what a WARC writer names in a revisit record (WARC-Refers-To-Target-URI,
    -Date, WARC-Refers-To)."""
    sha1 = head.get("payload")
    if not isinstance(sha1, str):
        return {}
    return {"payload_digest": format_sha1(bytes.fromhex(sha1)),
            "first_capture_url": None if first is None else first.url,
            "first_capture_fetched_at": None if first is None else first.fetched_at,
            "first_capture_warc_record_id": None if first is None else first.record_id}


def verdict(topic: str, url: str, verdict: str, **fields: Any) -> Emit:
    """A ``page_verdict`` record, keyed by the page's URL."""
    value = records.encode(RecordKind.PAGE_VERDICT, {
        "url": url, "verdict": verdict, "kind": None, "duplicate_of": None, "distance": None,
        "simhash": None, "digest": None, "reason": None, **fields})
    return Emit(topic, value, url.encode("utf-8", "surrogatepass"))


class Decider:
    """The processor of :class:`Decide` records (a gather shard's to itself)."""

    def __init__(self, context: StageContext, pages: PageCache, max_record_bytes: int,
                 last_verdicts: LastVerdicts) -> None:
        self._context = context
        self._last_verdicts = last_verdicts
        self._reader: InputReader = context.input_reader
        self._pages = pages
        self._max_record_bytes = max_record_bytes
        self._verdicts = context.output("page-verdicts")
        self._unique = context.output("unique-pages")
        self.decisions: Counter[str] = context.decisions

    def decide(self, record: Decide, message: Message, state: BatchState) -> list[Emit]:
        """A decide record's page (records an earlier version sent; pages are now decided where
        their horizon is covered, :meth:`decide_covered`)."""
        return self.decide_covered(state, message.key() or b"")

    def decide_covered(self, state: BatchState, order: bytes) -> list[Emit]:
        """The page of ``order``, decided by the processor of the record that covered its horizon
        at its gather shard (a progress or drain record). The engine checks and counts what a
        processor returns, but its letter for a refused output would name and carry that record,
        from which the page cannot be replayed: so the page's own outputs are checked here first."""
        page = take(state, order)
        return (self._outputs_or_letter(page.head, page.best, page.first)
                + self._note(order, page.head, page.best))

    def _note(self, order: bytes, head: dict[str, Any], best: Match | None) -> list[Emit]:
        """The verdict, to its URL's shard (:mod:`streams.stages.content_seen.last_verdicts`)."""
        if best is None:
            record = LastVerdict(order, "unique")
        else:
            record = LastVerdict(order, "exact" if best.exact else "near", best.distance, best.url)
        return self._last_verdicts.note(head["url"], record)

    def _outputs_or_letter(self, head: dict[str, Any], best: Match | None, first: Capture | None,
                           ) -> list[Emit]:
        """The page's outputs; when a topic refuses one (``output_too_large``), a dead letter that
        names and carries the page's input record instead, as a bad record's letter carries it:
        read back (the verdict took it from memory), so the page can be replayed from the letter.
        Only the page's verdict and unique page are checked here: the runtime checks and counts
        everything a processor returns (the letter too), on the local path as from the topic."""
        emits = self.verdict(head, best, first)
        context = self._context
        try:
            context.check_outputs([emit for emit in emits if emit.topic in (self._verdicts, self._unique)])
        except RecordRejected as refused:
            source = source_of(head)
            return [context.dead_letter(reason=refused.reason, detail=refused.detail, topic=source.topic,
                                        partition=source.partition, offset=source.offset,
                                        value=self._reader.read(*source))]
        return emits

    def verdict(self, head: dict[str, Any], best: Match | None, first: Capture | None = None) -> list[Emit]:
        """The verdict of the page of ``head``, whose best earlier match is ``best`` and the first
        capture of whose payload is ``first``."""
        url, simhash, digest = head["url"], head["simhash"], head["digest"]
        source = source_of(head)
        self.decisions["unique" if best is None else "exact" if best.exact else "near"] += 1
        payload = payload_fields(head, first)
        if best is not None:
            self._pages.pop(source)
            return [verdict(self._verdicts, url, "duplicate", kind="exact" if best.exact else "near",
                            duplicate_of=best.url, distance=best.distance, simhash=simhash, digest=digest,
                            **payload)]
        said = verdict(self._verdicts, url, "unique", simhash=simhash, digest=digest, **payload)
        found = self._input_record(source)
        if found is None:
            return [said, self._body_unavailable(source)]
        unique = records.encode(RecordKind.UNIQUE_PAGE, {**found, "simhash": simhash, "digest": digest})
        return [Emit(self._unique, unique, url.encode("utf-8", "surrogatepass")), said]

    def _input_record(self, source: Source) -> dict[str, Any] | None:
        """A waiting page's input record, decoded as ``route`` decoded it: from memory, or read back
        from the input topic (None when it is gone from there)."""
        value = self._pages.pop(source)
        if value is None:
            value = self._reader.read(*source)
            if value is None:
                return None
        return records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=self._max_record_bytes)

    def _body_unavailable(self, source: Source) -> Emit:
        return self._context.dead_letter(
            reason="page_unavailable", detail="the input record was deleted before the page's verdict",
            topic=source.topic, partition=source.partition, offset=source.offset)
