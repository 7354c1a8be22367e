"""The probe step: a page looked up in one block table's bucket, then inserted there.

The processor of the records sent to the shard of a table key (so a shard holds the buckets of its
table keys): a :class:`Probe` finds the best earlier page within the near-duplicate rule through the
bucket and *replies* with it to the page's gather shard, sends a *notice* to each later page it
meets (a copy probed before this, its original: :func:`streams.stages.content_seen.buckets.meet`),
and inserts the page; a :class:`Mark` tells the shard how far a worker has routed its input
(:mod:`streams.stages.content_seen.relay`).

A worker that owns a table key's shard probes it in the transaction that routes the page
(:meth:`Prober.probe_here`, the local path: :mod:`streams.stages.content_seen.local`), with the same
code and against the same state as a probe record would be; replies and notices go through
:meth:`Gatherer.tell <streams.stages.content_seen.gather.Gatherer.tell>`, at once to a gather shard
owned here where the page waits, else as records.

State keys (one prefix per kind, layout :data:`streams.stages.content_seen.buckets.LAYOUT`): ``t`` +
table key -> bucket (the SimHashes stored under it); ``s`` + SimHash -> the record of the pages with
that SimHash (order, digest, URL, sketch).
"""

from __future__ import annotations

from typing import Any

from streams.pages.sketch import NearDuplicateRule
from streams.runtime.api import BatchState, Emit, Message, On
from streams.stages.content_seen import buckets
from streams.stages.content_seen.buckets import Page, Record
from streams.stages.content_seen.gather import Gatherer
from streams.stages.content_seen.local import Ownership
from streams.stages.content_seen.relay import Relay
from streams.stages.content_seen.shard_records import Mark, Notice, Probe, Reply


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
        return [On(Probe, self.probe), On(Mark, self.mark)]

    def probe(self, probe: Probe, message: Message, state: BatchState) -> list[Emit]:
        return self.probe_here(probe.page, message.key() or b"", state)

    def probe_here(self, page: Page, table_key: bytes, state: BatchState) -> list[Emit]:
        """Match through the bucket, then insert: the page into its SimHash's record, the SimHash
        into the bucket (records first, so a full bucket can rank the new slot by its earliest page).
        The reply goes to the page; a notice to each later page met (it was probed first)."""
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
        emits = tell(page.order, Reply(met.best))
        for later, match in met.later:
            emits += tell(later, Notice(match))
        return emits

    def mark(self, mark: Mark, message: Message, state: BatchState) -> list[Emit]:
        shard = message.partition() or 0
        self._ownership.vouch(shard, mark.token, state)
        self._relay.take_mark(shard, mark.view, state)
        return []
