"""The probe step: a page looked up in one block table's bucket, then inserted there.

The processor of the records sent to the shard of a table key (so a shard holds the buckets of its
table keys): a :class:`Probe` finds the best earlier page within the near-duplicate rule through the
bucket and *replies* with it to the page's gather shard, sends a *notice* to each later page it
meets (a copy probed before this, its original: :func:`streams.stages.content_seen.buckets.meet`),
and inserts the page; a :class:`Mark` tells the shard how far a worker has routed its input
(:mod:`streams.stages.content_seen.relay`).

A probe for a shard this worker owns is decided in the transaction that routes the page, by the
runtime's local path (:mod:`streams.runtime.local_path`: the ``shards`` topic declares it for
:class:`Probe` and :class:`PayloadProbe`), with the same processor as a probe read from the topic;
replies and notices go through :meth:`Gatherer.tell
<streams.stages.content_seen.gather.Gatherer.tell>`, at once to a gather shard owned here where the
page waits, else as records.

State keys (one prefix per kind, layout :data:`streams.stages.content_seen.buckets.LAYOUT`): ``t`` +
table key -> bucket (the SimHashes stored under it); ``s`` + SimHash -> the record of the pages with
that SimHash (order, digest, URL, sketch); ``y`` + SimHash + SHA-1 -> the captures of a payload, in
the shard of the SimHash's first table (:mod:`streams.stages.content_seen.payloads`: a
:class:`PayloadProbe` looks its page's payload up there, and its reply carries the first capture).
"""

from __future__ import annotations

from typing import Any

from streams.pages.sketch import NearDuplicateRule
from streams.runtime.api import BatchState, Emit, Message, On
from streams.stages.content_seen import buckets, payloads
from streams.stages.content_seen.buckets import Page, Record
from streams.stages.content_seen.gather import Gatherer
from streams.stages.content_seen.local import Ownership
from streams.stages.content_seen.relay import Relay
from streams.stages.content_seen.shard_records import (
    Mark,
    Notice,
    PayloadNotice,
    PayloadProbe,
    PayloadReply,
    Probe,
    Reply,
)


class Prober:
    """The processor of :class:`Probe` and :class:`Mark` records (see the module docstring)."""

    def __init__(self, gatherer: Gatherer, relay: Relay, ownership: Ownership, rule: NearDuplicateRule,
                 max_bucket_entries: int) -> None:
        self._gatherer = gatherer
        self._relay = relay
        self._ownership = ownership
        self._rule = rule
        self._limit = max_bucket_entries

    def processors(self) -> list[On[Any]]:
        return [On(Probe, self.probe), On(PayloadProbe, self.payload_probe), On(Mark, self.mark)]

    def probe(self, probe: Probe, message: Message, state: BatchState) -> list[Emit]:
        return self._probe(probe.page, message.key() or b"", state)

    def payload_probe(self, probe: PayloadProbe, message: Message, state: BatchState) -> list[Emit]:
        return self._probe(probe.probe.page, message.key() or b"", state, probe)

    def _probe(self, page: Page, table_key: bytes, state: BatchState,
               payload: PayloadProbe | None = None) -> list[Emit]:
        """Match through the bucket, then insert: the page into its SimHash's record, the SimHash
        into the bucket (records first, so a full bucket can rank the new slot by its earliest page).
        The reply goes to the page; a notice to each later page met (it was probed first). With
        ``payload`` (the page's first table), the page's payload too: its first capture goes with
        the reply, a payload notice to each later capture of it."""
        found: dict[int, Record] = {}

        def read(slot: int) -> Record:
            if slot not in found:
                found[slot] = buckets.decode_record(state.get(buckets.record_key(slot)), slot)
            return found[slot]

        bucket = buckets.decode_bucket(state.get(b"t" + table_key))
        met = buckets.meet(bucket, page, read, self._rule)
        grown = buckets.with_page(read(page.simhash), page, self._limit)
        if grown is not None:
            found[page.simhash] = grown
            state.set(buckets.record_key(page.simhash), buckets.encode_record(grown))
        slots = buckets.with_slot(bucket, page.simhash, self._limit, read)
        if slots is not None:
            state.set(b"t" + table_key, buckets.encode_bucket(slots))
        tell = self._gatherer.tell
        if payload is None:
            emits = tell(page.order, Reply(met.best))
        else:
            first, later_captures = self._payload(payload, state)
            emits = tell(page.order, PayloadReply(met.best, first))
            for capture in later_captures:
                emits += tell(capture.order, PayloadNotice(payload.capture()))
        for later, match in met.later:
            emits += tell(later, Notice(match))
        return emits

    def _payload(self, probe: PayloadProbe, state: BatchState) -> tuple[payloads.Capture | None,
                                                                          list[payloads.Capture]]:
        """The page's payload looked up and inserted: its first capture, and the later ones to tell."""
        key = payloads.payload_key(probe.probe.page.simhash, probe.sha1)
        met = payloads.meet_payload(payloads.decode_entry(state.get(key)), probe.capture(), self._limit)
        if met.grown is not None:
            state.set(key, payloads.encode_entry(met.grown))
        return met.first, met.later

    def mark(self, mark: Mark, message: Message, state: BatchState) -> list[Emit]:
        shard = message.partition() or 0
        self._ownership.vouch(shard, mark.token, state)
        self._relay.take_mark(shard, mark.view, state)
        return []
