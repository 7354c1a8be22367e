"""content_seen stage: a verdict for every fetched page, and each page's content once.

Near-duplicates are found through SimHash block tables (Manku, Jain and Das Sarma, WWW 2007),
and the tables are sharded across partitions *by table key*, not by the page's host: a mirror of a
page on another host has other URLs but the same keys, so it meets the original in the same
buckets whichever input partition it came through, and each worker holds only its shards' buckets.
That makes a lookup a scatter and gather over the stage's shard topic, in three steps, each inside
the runtime's one-transaction-per-batch (so state, changelog, outputs and offsets commit together):

1. ``route`` (any fetched-pages partition): validate, decode, extract the main text, digest and
   SimHash it (:mod:`streams.pages.analyze`). A page with no text to compare gets its ``skipped``
   verdict here. Otherwise: one *page* record to the page's gather shard (keyed by its order key:
   the page's head and where its input record is, plus that record itself when another worker
   owns the gather shard) and one *probe* per block table to the shard owning that table key.
2. *probe* (the table key's shard): find the best earlier page within the Hamming threshold
   through the bucket and *reply* with it to the page's gather shard; send a *notice* to each
   later page met (a copy probed before this, its original: :func:`streams.stages.content_seen.buckets.meet`);
   insert the page.
3. *page*, *reply* and *notice* (the gather shard): keep the page's head and the best earlier page
   met (the page record was committed before any probe was answered, so it always arrives
   first); once its horizon is covered (:mod:`streams.stages.content_seen.horizon`: every input
   record that was in the topic when it was routed has been probed), emit the verdict, and the page
   to the unique-pages topic when nothing earlier matched: its input record, from the worker's
   memory or read back from the input topic (:mod:`streams.stages.content_seen.waiting` says why the
   page itself is never state).

Last in each transaction (:meth:`ContentSeenStage.end_of_part`) a worker sends every shard a
routing *mark*, and each shard that took one sends every gather shard its *progress*: how a gather
shard learns that a horizon is covered (:mod:`streams.stages.content_seen.gather` keeps the queue of
waiting pages).

State keys (one prefix per kind, layout :data:`streams.stages.content_seen.buckets.LAYOUT`): ``t`` + table key
-> bucket (the SimHashes stored under it); ``s`` + SimHash -> the record of the pages with that
SimHash (order, digest, URL); the gather shard's keys are
:mod:`streams.stages.content_seen.gather`'s. The block design and feature version are recorded per
shard and a worker with other settings refuses the shard instead of mixing two fingerprint spaces;
the state layout is recorded beside them and a shard in another layout is refused
(:class:`StateError`) instead of misread.

A page whose URL is longer than :data:`MAX_URL_BYTES` is a dead letter (``url_too_long``): the URL
is stored in its SimHash's record in every shard holding one of its table keys (among up to
``max_bucket_entries`` pages) and written in verdicts, keys and replies, so its length bounds the
state and records of other pages too.
"""

from __future__ import annotations

import dataclasses
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from streams import records
from streams.errors import ConfigError, RecordRejected, StateError, StreamsError
from streams.pages.analyze import PageSettings, design_for
from streams.pages.decode import Skipped
from streams.pages.extract import EXTRACTION_VERSION
from streams.pages.features import FEATURES_VERSION
from streams.pages.sketch import SKETCH_BYTES, SKETCH_VERSION, NearDuplicateRule, empty_sketch
from streams.records import RecordKind
from streams.runtime.batch import BatchState, Emit, OwnedShards
from streams.runtime.partitioner import partition_for
from streams.runtime.stage import InputPositions, InputReader, Message, Needs, StageContext, StateIdentity
from streams.stages.content_seen import buckets, gather
from streams.stages.content_seen.buckets import Match, Page, Record
from streams.stages.content_seen.intake import Intake
from streams.stages.content_seen.move import ContentSeenMove
from streams.stages.content_seen.relay import MARK, PROGRESS, Relay, progress_of
from streams.stages.content_seen.waiting import (
    PageCache,
    Source,
    decode_head,
    encode_head,
    encode_match,
    source_of,
)
from streams.topics import Topics
from streams.urls.canonical import CanonicalSettings

STAGE = "content-seen"
DESIGN_KEY = b"meta:block_design"
LAYOUT_KEY = b"meta:state_layout"
PAGE, PROBE, REPLY, NOTICE = b"P", b"Q", b"R", b"N"
DRAIN = b"D"  # "go on": the front of a gather shard's queue was taken off up to the limit
DECIDE = b"E"  # a page off the queue: decide it (one page's outputs per shard record)
DECISIONS_PER_RECORD = 1000  # pages a progress or drain record takes off the queue (the rest: a drain)
_PROBE_HEAD = struct.Struct(f">16sQ16s{SKETCH_BYTES}s")  # order, SimHash, text digest, sketch; then the URL
# PlainTable's hash index hashes this much of each state key: ``t`` and a whole bucket key of the
# default design (table byte and 4 bytes of blocks), ``s`` and 5 bytes of a record's SimHash.
STATE_KEY_PREFIX_BYTES = 6
MAX_URL_BYTES = CanonicalSettings().max_url_bytes  # the URL and revisit stages' bound (4,096)
EMPTY_SKETCH = empty_sketch().encode()


@dataclass(frozen=True)
class ContentSeenSettings(PageSettings):
    """Settings of the page stage (``[content_seen]`` in TOML, ``STREAMS_CONTENT_SEEN_*``)."""

    max_bucket_entries: int = 64     # slots a bucket keeps, pages a SimHash record keeps (the earliest)
    analysis_processes: int = 0      # child processes analysing pages in parallel (0: in the worker)
    page_cache_mb: int = 512         # input records of pages awaiting their verdict, kept in memory
    # The near-duplicate decision on the tables' candidates (streams/pages/sketch.py, NearDuplicateRule):
    near_radius: int = 10              # SimHash bits a candidate may differ in
    near_min_resemblance: float = 0.65  # estimated Jaccard resemblance of the word pairs
    near_min_length_ratio: float = 0.96  # the smaller page's share of the larger's distinct word pairs

    def near_rule(self) -> NearDuplicateRule:
        try:
            return NearDuplicateRule(self.near_radius, self.near_min_resemblance, self.near_min_length_ratio)
        except ValueError as error:
            raise ConfigError(str(error)) from error


def fingerprint_space(settings: PageSettings) -> bytes:
    """What the stored fingerprints, sketches and table keys depend on: every page-analysis setting,
    and the versions of the main-text extraction, the features and the sketch (bumped when their
    output changes). The near-duplicate rule's thresholds are not in it: they decide, and store
    nothing."""
    fields: dict[str, object] = {f.name: getattr(settings, f.name) for f in dataclasses.fields(PageSettings)}
    fields.update(extraction_version=EXTRACTION_VERSION, features_version=FEATURES_VERSION,
                  sketch_version=SKETCH_VERSION)
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def page_order(record: dict[str, Any], message: Message) -> bytes:
    """A page's place in the global "earlier" order: ``fetched_at``, else the record's timestamp."""
    fetched_at = record.get("fetched_at")
    if isinstance(fetched_at, str):
        millis = int(records.parse_rfc3339(fetched_at).timestamp() * 1000)
    else:
        millis = message.timestamp()[1]
    return buckets.order_key(millis, message.partition() or 0, message.offset() or 0)


@dataclass
class ContentSeenStage:
    """The stage as the runtime drives it (see :class:`streams.runtime.stage.Stage`)."""

    topics: Topics
    app_id: str
    settings: ContentSeenSettings = field(default_factory=ContentSeenSettings)
    max_record_bytes: int = records.DEFAULT_MAX_RECORD_BYTES
    name: str = STAGE
    decisions: Counter[str] = field(default_factory=Counter)  # unique / exact / near / skipped
    races: Counter[str] = field(default_factory=Counter)  # earlier pages met in time, or late (decided)
    route_topics: Sequence[str] = field(init=False)
    state_topic: str = field(init=False)

    def __post_init__(self) -> None:
        self.route_topics = [self.topics.fetched_pages]
        self.state_topic = self.topics.shards(self.app_id, self.name)
        self._design = design_for(self.settings)
        self._design_id = fingerprint_space(self.settings)
        self._rule = self.settings.near_rule()
        self._pages = PageCache(self.settings.page_cache_mb * 1024 * 1024)
        self._intake = Intake(self.settings, self.settings.analysis_processes, self.max_record_bytes,
                              self._pages)
        self._owned = OwnedShards({})
        self._shard_count = 0  # offline: every gather is here
        self._reader: InputReader | None = None
        self._context: StageContext | None = None
        self._topic_index = {topic: number for number, topic in enumerate(self.route_topics)}
        self._relay = Relay(self.state_topic, self._topic_index)

    # -- what the stage asks of the runtime, and gets --------------------------------------------

    def needs(self) -> Needs:
        """Shards read bucket by bucket, 10 random ones a page (PlainTable); pages analysed a batch
        ahead, as many as fit in memory; a unique page's body read back when this worker no longer
        holds it; the input's progress relayed to the shards; the tables' design in every shard;
        resharded table by table (:mod:`streams.stages.content_seen.move`)."""
        return Needs(identity=StateIdentity({DESIGN_KEY: self._design_id, LAYOUT_KEY: buckets.LAYOUT},
                                            self._other_design),
                     input_reader=True, point_read_prefix_bytes=STATE_KEY_PREFIX_BYTES,
                     prepare=self.prepare, ready_for_input=self.ready_for_input,
                     end_of_part=self.end_of_part, revoked=self.revoked,
                     state_move=partial(ContentSeenMove, self._design))

    def bind(self, context: StageContext) -> None:
        """The shards this worker owns (a page whose gather shard is one of them waits here), and
        how a unique page's input record is read back when this worker no longer holds it."""
        self._owned, self._shard_count, self._reader = context.owned, context.shards, context.input_reader
        self._context = context
        self.decisions, self.races = context.decisions, context.race_matches

    def revoked(self, shards: Sequence[int]) -> None:
        """Pages gathered on a shard gone elsewhere are decided there: forget every value kept (the
        ones still decided here are read back), so none waits in memory for a verdict never taken;
        and analyses of pages that another worker may route now."""
        self._intake.forget()
        if shards:
            self._pages.clear()

    def end_of_part(self, inputs: InputPositions | None, states: Mapping[int, BatchState]) -> list[Emit]:
        """Last in each transaction: routing marks and shard progress
        (:mod:`streams.stages.content_seen.relay`)."""
        return self._relay.end_of_part(inputs, states, self._shard_count)

    # -- shards --------------------------------------------------------------------------------

    def _other_design(self, partition: int, found: Mapping[bytes, bytes | None]) -> StreamsError:
        design, layout = found.get(DESIGN_KEY), found.get(LAYOUT_KEY)
        if design != self._design_id:
            return ConfigError(
                f"shard {partition} holds block tables built otherwise than this worker's: "
                f"{_differences(design or b'{}', self._design_id)}; keep the old settings (a version "
                "cannot be kept: start a new app_id, and replay the pages to rebuild them)")
        # Layout 1 recorded none (order, digest, URL in every slot); 2 had no sketch.
        old = (layout or b"1").decode(errors="replace")
        return StateError(
            f"shard {partition} holds content-seen state in layout {old}, this version reads layout "
            f"{buckets.LAYOUT.decode()}: its changelog holds the old layout too, so start a new app_id "
            "(and replay the pages to rebuild the tables)")

    # -- 1. route ------------------------------------------------------------------------------

    def prepare(self, messages: Sequence[Message]) -> int:
        """Take the first of a batch's pages, as many as there is room for, and start analysing them
        (:mod:`streams.stages.content_seen.intake`); the engine routes them in the next batch."""
        return self._intake.prepare(messages)

    def ready_for_input(self) -> bool:
        return self._intake.ready()

    def route(self, message: Message) -> list[Emit]:
        value = message.value() or b""
        record = records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=self.max_record_bytes)
        _check_url_length(record["url"])
        analysis = self._intake.analyse(message, record)
        if isinstance(analysis, Skipped):
            self.decisions["skipped"] += 1
            return [self._verdict(record["url"], "skipped", reason=analysis.reason)]
        order = page_order(record, message)
        sketch = analysis.sketch.encode() if analysis.sketch is not None else EMPTY_SKETCH
        page = Page(order, analysis.simhash, analysis.text_digest, record["url"], sketch)
        table_keys = self._design.keys(analysis.simhash)
        source = Source(message.topic() or "", message.partition() or 0, message.offset() or 0)
        head = PAGE + encode_head(page.url, page.simhash, page.text_digest, len(table_keys), source)
        gather = partition_for(order, self._shard_count) if self._shard_count else None
        if gather is None or gather in self._owned:
            self._pages.put(source, value)  # decided by this worker: the record waits in its memory
        else:
            head += b"\n" + value  # decided by the worker owning the gather shard: the record goes along
        emits = [Emit(self.state_topic, head, order, gather)]
        probe = probe_value(page)
        emits.extend(Emit(self.state_topic, probe, table_key) for table_key in table_keys)
        return emits

    # -- 2. and 3. the shard steps ---------------------------------------------------------------

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key, value = message.key(), message.value() or b""
        if key is None or not value:
            raise RecordRejected("invalid_shard_record", "shard record without a key or value")
        shard = message.partition() or 0
        kind, body = value[:1], value[1:]
        if kind == PROBE:
            return self._probe(key, body, state)
        if kind == PAGE:  # committed before any probe was answered, so it precedes its replies here
            self._wait(key, body, state)
            return []
        if kind == REPLY:
            return self._reply(key, body, state)
        if kind == NOTICE:
            self.races["in_time" if gather.notice(state, key, body) else "late"] += 1
            return []
        if kind == MARK:
            self._relay.take_mark(shard, body, state)
            return []
        if kind in (PROGRESS, DRAIN):
            return self._progress(shard, body if kind == PROGRESS else None, state)
        if kind == DECIDE:
            page = gather.take(state, key)
            return self._decide(page.head, page.best)
        raise RecordRejected("invalid_shard_record", f"unknown shard record kind {kind!r}")

    def _probe(self, table_key: bytes, body: bytes, state: BatchState) -> list[Emit]:
        """Match through the bucket, then insert: the page into its SimHash's record, the SimHash
        into the bucket (records first, so a full bucket can rank the new slot by its earliest page).
        The reply goes to the page; a notice to each later page met (it was probed first)."""
        order, simhash, digest, sketch = _PROBE_HEAD.unpack_from(body)
        page = Page(order, simhash, digest, body[_PROBE_HEAD.size:].decode("utf-8", "surrogatepass"), sketch)
        records: dict[int, Record] = {}

        def read(slot: int) -> Record:
            if slot not in records:
                records[slot] = buckets.decode_record(state.get(buckets.record_key(slot)), slot)
            return records[slot]

        limit = self.settings.max_bucket_entries
        bucket = buckets.decode_bucket(state.get(b"t" + table_key))
        met = buckets.meet(bucket, page, read, self._rule)
        grown = buckets.with_page(read(simhash), page, limit)
        if grown is not None:
            records[simhash] = grown
            state.set(buckets.record_key(simhash), buckets.encode_record(grown))
        slots = buckets.with_slot(bucket, simhash, limit, read)
        if slots is not None:
            state.set(b"t" + table_key, buckets.encode_bucket(slots))
        emits = [Emit(self.state_topic, REPLY + encode_match(met.best), order)]
        emits += [Emit(self.state_topic, NOTICE + encode_match(match), later) for later, match in met.later]
        return emits

    def _wait(self, order: bytes, body: bytes, state: BatchState) -> None:
        """A page waits for its replies (and, through Kafka, its horizon): its head as state, the
        input record sent along kept in memory."""
        head = decode_head(body)
        source = source_of(head)
        stored, newline, carried = body.partition(b"\n")
        if newline:
            self._pages.put(source, carried)
        topic = self._topic_index.get(source.topic)
        if topic is None or not self._shard_count:  # decided on its last reply (offline, or no horizon)
            gather.arrive(state, order, stored, head["tables"], None, 0)
        else:
            gather.arrive(state, order, stored, head["tables"], (topic, source.partition), source.offset)

    def _reply(self, order: bytes, body: bytes, state: BatchState) -> list[Emit]:
        """Count a reply; the waiting page is read (it may be large) only once all are in."""
        replied = gather.reply(state, order, body)
        if isinstance(replied, gather.Ready):
            return self._decide(replied.head, replied.best)
        if replied:  # all replies in, it waits for its horizon only: its record may leave memory first
            self._pages.park(source_of(gather.waiting_head(state, order)))
        return []

    def _progress(self, shard: int, body: bytes | None, state: BatchState) -> list[Emit]:
        """A shard's progress, or a drain record (``body`` None): take the front of the queue off as
        far as its horizons are covered, a decide record for each, and ask for more with a drain
        record past the limit."""
        progress = progress_of(body) if body is not None else None
        found, drain = gather.ready(state, self._shard_count, DECISIONS_PER_RECORD, progress)
        emits = [Emit(self.state_topic, DECIDE, order, shard) for order in found]
        if drain:
            emits.append(Emit(self.state_topic, DRAIN, b"drain", shard))
        return emits

    def _decide(self, head: dict[str, Any], best: Match | None) -> list[Emit]:
        url, simhash, digest = head["url"], head["simhash"], head["digest"]
        source = source_of(head)
        self.decisions["unique" if best is None else "exact" if best.exact else "near"] += 1
        if best is not None:
            self._pages.pop(source)
            return [self._verdict(url, "duplicate", kind="exact" if best.exact else "near",
                                  duplicate_of=best.url, distance=best.distance, simhash=simhash,
                                  digest=digest)]
        verdict = self._verdict(url, "unique", simhash=simhash, digest=digest)
        record = self._input_record(source)
        if record is None:
            return [verdict, self._body_unavailable(source)]
        unique = records.encode(RecordKind.UNIQUE_PAGE, {**record, "simhash": simhash, "digest": digest})
        return [Emit(self.topics.unique_pages, unique, url.encode("utf-8", "surrogatepass")), verdict]

    def _input_record(self, source: Source) -> dict[str, Any] | None:
        """A waiting page's input record, decoded as ``route`` decoded it: from memory, or read back
        from the input topic (None when it is gone from there)."""
        value = self._pages.pop(source)
        if value is None:
            if self._reader is None:  # offline, every page is decided by the run that routed it
                raise StateError(f"page {source} is neither in memory nor readable from Kafka")
            value = self._reader.read(*source)
            if value is None:
                return None
        return records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=self.max_record_bytes)

    def _body_unavailable(self, source: Source) -> Emit:
        """A unique page whose input record was deleted (retention) before its verdict: its verdict
        stands, and this dead letter says which page ``unique-pages`` lacks."""
        assert self._context is not None  # bound: the input reader that found it gone came with it
        return self._context.dead_letter(
            reason="page_unavailable", detail="the input record was deleted before the page's verdict",
            topic=source.topic, partition=source.partition, offset=source.offset)

    def _verdict(self, url: str, verdict: str, **fields: Any) -> Emit:
        value = records.encode(RecordKind.PAGE_VERDICT, {
            "url": url, "verdict": verdict, "kind": None, "duplicate_of": None, "distance": None,
            "simhash": None, "digest": None, "reason": None, **fields})
        return Emit(self.topics.page_verdicts, value, url.encode("utf-8", "surrogatepass"))


def probe_value(page: Page) -> bytes:
    """A probe's shard record value (its key is the table key): order, SimHash, digest, URL."""
    head = _PROBE_HEAD.pack(page.order, page.simhash, page.text_digest, page.sketch)
    return PROBE + head + page.url.encode("utf-8", "surrogatepass")


def _differences(found: bytes, mine: bytes) -> str:
    """The settings and versions two fingerprint spaces differ in, as ``name stored -> this worker's``."""
    try:
        stored, wanted = orjson.loads(found), orjson.loads(mine)
    except orjson.JSONDecodeError:
        return f"{found.decode(errors='replace')} -> {mine.decode()}"
    names = sorted(name for name in {*stored, *wanted} if stored.get(name) != wanted.get(name))
    return ", ".join(f"{name} {stored.get(name)!r} -> {wanted.get(name)!r}" for name in names)


def _check_url_length(url: str) -> None:
    if len(url) > MAX_URL_BYTES or len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise RecordRejected("url_too_long", f"URL exceeds {MAX_URL_BYTES} bytes")
