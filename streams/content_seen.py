"""content_seen stage: a verdict for every fetched page, and each page's content once.

Near-duplicates are found through SimHash block tables (Manku, Jain and Das Sarma, WWW 2007),
and the tables are sharded across partitions *by table key*, not by the page's host: a mirror of a
page on another host has other URLs but the same keys, so it meets the original in the same
buckets whichever input partition it came through, and each worker holds only its shards' buckets.
That makes a lookup a scatter and gather over the stage's shard topic, in three steps, each inside
the runtime's one-transaction-per-batch (so state, changelog, outputs and offsets commit together):

1. ``route`` (any fetched-pages partition): validate, decode, extract the main text, digest and
   SimHash it (:mod:`streams.pages.analyze`). A page with no text to compare gets its ``skipped``
   verdict here. Otherwise: one *page* record to the page's gather shard (keyed by its order key)
   and one *probe* per block table to the shard owning that table key.
2. *probe* (the table key's shard): find the best earlier page within the Hamming threshold
   through the bucket (:func:`streams.pages.buckets.best_match`), insert the page, and send a
   *reply* to the gather shard.
3. *page* and *reply* (the gather shard): keep the page until all its replies are in (the page
   record was committed before any probe was answered, so it always arrives first), then emit the
   verdict, and the page itself to the unique-pages topic when nothing earlier matched.

State keys (one prefix per kind, layout :data:`streams.pages.buckets.LAYOUT`): ``t`` + table key
-> bucket (the SimHashes stored under it); ``s`` + SimHash -> the record of the pages with that
SimHash (order, digest, URL); ``p`` + order -> waiting page; ``a`` + order -> replies so far. The
block design and feature version are recorded per shard and a worker with other settings refuses
the shard instead of mixing two fingerprint spaces; the state layout is recorded beside them and a
shard in another layout is refused (:class:`StateError`) instead of misread.

A page whose URL is longer than :data:`MAX_URL_BYTES` is a dead letter (``url_too_long``): the URL
is stored in its SimHash's record in every shard holding one of its table keys (among up to
``max_bucket_entries`` pages) and written in verdicts, keys and replies, so its length bounds the
state and records of other pages too.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from streams import records
from streams.errors import ConfigError, RecordRejected, StateError
from streams.pages import buckets
from streams.pages.analyze import PageAnalysis, PageSettings, analyze_page, design_for
from streams.pages.buckets import Match, Page, Record
from streams.pages.decode import Skipped
from streams.pages.extract import EXTRACTION_VERSION
from streams.pages.features import FEATURES_VERSION
from streams.pages.simhash import from_hex, to_hex
from streams.records import RecordKind
from streams.runtime.batch import BatchState, Emit
from streams.runtime.parallel import Pending, ProcessMap
from streams.runtime.stage import Message
from streams.runtime.store import PartitionStore
from streams.topics import Topics
from streams.urls.canonical import CanonicalSettings

STAGE = "content-seen"
DESIGN_KEY = b"meta:block_design"
LAYOUT_KEY = b"meta:state_layout"
PAGE, PROBE, REPLY = b"P", b"Q", b"R"
_PROBE_HEAD = struct.Struct(">16sQ16s")
_REPLY_HEAD = struct.Struct(">16sBB")
MAX_URL_BYTES = CanonicalSettings().max_url_bytes  # the URL and revisit stages' bound (4,096)
Body = bytes | str  # a page's body as records.body_bytes returns it


@dataclass(frozen=True)
class ContentSeenSettings(PageSettings):
    """Settings of the page stage (``[content_seen]`` in TOML, ``STREAMS_CONTENT_SEEN_*``)."""

    max_bucket_entries: int = 64     # slots a bucket keeps, pages a SimHash record keeps (the earliest)
    analysis_processes: int = 0      # child processes analysing pages in parallel (0: in the worker)


def fingerprint_space(settings: PageSettings) -> bytes:
    """What the stored fingerprints and table keys depend on: every page-analysis setting, and the
    versions of the main-text extraction and of the features (bumped when their output changes)."""
    fields: dict[str, object] = {f.name: getattr(settings, f.name) for f in dataclasses.fields(PageSettings)}
    fields.update(extraction_version=EXTRACTION_VERSION, features_version=FEATURES_VERSION)
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
    route_topics: Sequence[str] = field(init=False)
    state_topic: str = field(init=False)

    def __post_init__(self) -> None:
        self.route_topics = [self.topics.fetched_pages]
        self.state_topic = self.topics.shards(self.app_id, self.name)
        self._design = design_for(self.settings)
        self._design_id = fingerprint_space(self.settings)
        self._checked: set[int] = set()
        self._prepared: dict[tuple[int | None, int | None], bytes] = {}
        self._pool: ProcessMap | None = None
        self._pending: tuple[list[tuple[int | None, int | None]], Pending] | None = None
        if self.settings.analysis_processes > 0:
            context = orjson.dumps({"settings": dataclasses.asdict(self.settings),
                                    "max_record_bytes": self.max_record_bytes})
            self._pool = ProcessMap("streams.content_seen:analyze_value", context,
                                    self.settings.analysis_processes)

    # -- shards --------------------------------------------------------------------------------

    def open_shard(self, partition: int, store: PartitionStore) -> None:
        found = store.get(DESIGN_KEY)
        if found is not None:
            self._refuse_other_design(partition, found, store.get(LAYOUT_KEY))
            self._checked.add(partition)

    def _check_design(self, partition: int, state: BatchState) -> None:
        if partition in self._checked:
            return
        found = state.get(DESIGN_KEY)
        if found is None:
            state.set(DESIGN_KEY, self._design_id)
            state.set(LAYOUT_KEY, buckets.LAYOUT)
        else:
            self._refuse_other_design(partition, found, state.get(LAYOUT_KEY))
        self._checked.add(partition)

    def _refuse_other_design(self, partition: int, found: bytes, layout: bytes | None) -> None:
        if found != self._design_id:
            raise ConfigError(
                f"shard {partition} holds block tables built as {found.decode(errors='replace')}, this "
                f"worker uses {self._design_id.decode()}: keep the old settings, or start a new app_id")
        if layout != buckets.LAYOUT:  # layout 1 recorded none: order, digest and URL in every slot
            old = (layout or b"1").decode(errors="replace")
            raise StateError(
                f"shard {partition} holds content-seen state in layout {old}, this version reads layout "
                f"{buckets.LAYOUT.decode()}: its changelog holds the old layout too, so start a new app_id "
                "(and replay the pages to rebuild the tables)")

    # -- 1. route ------------------------------------------------------------------------------

    def prepare(self, messages: Sequence[Message]) -> None:
        """Start analysing a batch's pages in the child processes, if there are any
        (``analysis_processes``); :meth:`route` takes each page's result, waiting for it if need be."""
        if self._pool is None or not messages:
            return
        places = [(message.partition(), message.offset()) for message in messages]
        self._pending = (places, self._pool.submit([message.value() or b"" for message in messages]))

    def _take_prepared(self, place: tuple[int | None, int | None]) -> bytes | None:
        if place not in self._prepared and self._pending is not None:
            places, pending = self._pending
            self._pending = None
            self._prepared = dict(zip(places, pending.results(), strict=True))
        return self._prepared.pop(place, None)

    def _analyse(self, message: Message, record: dict[str, Any]) -> Skipped | tuple[PageAnalysis, Body]:
        """Why the page is not compared, or its analysis and body: from the child that analysed
        it (which sends the decoded body along), or done here."""
        prepared = self._take_prepared((message.partition(), message.offset()))
        if prepared is None:
            body = records.body_bytes(record)
            analysis = analyze_page(record, self.settings, body)
            return analysis if isinstance(analysis, Skipped) else (analysis, body)
        found, sent = _analysis_from_child(prepared)
        if isinstance(found, str):  # the child failed: decoding here tells bad base64 precisely
            records.body_bytes(record)
            raise RecordRejected("processing_error", found)
        if isinstance(found, Skipped):
            return found
        return found, records.body_bytes(record) if sent is None else sent  # None: a text body

    def route(self, message: Message) -> list[Emit]:
        record = records.decode(RecordKind.FETCHED_PAGE, message.value(),
                                max_record_bytes=self.max_record_bytes)
        _check_url_length(record["url"])
        analysed = self._analyse(message, record)
        if isinstance(analysed, Skipped):
            self.decisions["skipped"] += 1
            return [self._verdict(record["url"], "skipped", reason=analysed.reason)]
        analysis, body = analysed
        order = page_order(record, message)
        page = Page(order, analysis.simhash, analysis.text_digest, record["url"])
        table_keys = self._design.keys(analysis.simhash)
        emits = [Emit(self.state_topic, PAGE + _encode_page(record, body, analysis, len(table_keys)), order)]
        probe = probe_value(page)
        emits.extend(Emit(self.state_topic, probe, table_key) for table_key in table_keys)
        return emits

    # -- 2. and 3. the shard steps ---------------------------------------------------------------

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key, value = message.key(), message.value() or b""
        if key is None or not value:
            raise RecordRejected("invalid_shard_record", "shard record without a key or value")
        self._check_design(message.partition() or 0, state)
        kind, body = value[:1], value[1:]
        if kind == PROBE:
            return self._probe(key, body, state)
        if kind == PAGE:  # committed before any probe was answered, so it precedes its replies here
            state.set(b"p" + key, body)
            state.set(b"a" + key, _encode_progress(0, _page_head(body)["tables"], None))
            return []
        if kind == REPLY:
            return self._reply(key, body, state)
        raise RecordRejected("invalid_shard_record", f"unknown shard record kind {kind!r}")

    def _probe(self, table_key: bytes, body: bytes, state: BatchState) -> list[Emit]:
        """Match through the bucket, then insert: the page into its SimHash's record, the SimHash
        into the bucket (records first, so a full bucket can rank the new slot by its earliest page)."""
        order, simhash, digest = _PROBE_HEAD.unpack_from(body)
        page = Page(order, simhash, digest, body[_PROBE_HEAD.size:].decode("utf-8", "surrogatepass"))
        records: dict[int, Record] = {}

        def read(slot: int) -> Record:
            if slot not in records:
                records[slot] = buckets.decode_record(state.get(buckets.record_key(slot)), slot)
            return records[slot]

        limit = self.settings.max_bucket_entries
        bucket = buckets.decode_bucket(state.get(b"t" + table_key))
        match = buckets.best_match(bucket, page, self.settings.hamming_threshold, read)
        grown = buckets.with_page(read(simhash), page, limit)
        if grown is not None:
            records[simhash] = grown
            state.set(buckets.record_key(simhash), buckets.encode_record(grown))
        slots = buckets.with_slot(bucket, simhash, limit, read)
        if slots is not None:
            state.set(b"t" + table_key, buckets.encode_bucket(slots))
        return [Emit(self.state_topic, REPLY + _encode_match(match), order)]

    def _reply(self, order: bytes, body: bytes, state: BatchState) -> list[Emit]:
        """Count a reply; the waiting page is read (it may be large) only once all are in."""
        progress = state.get(b"a" + order)
        waiting = state.get(b"p" + order) if progress is not None else None
        if progress is None or waiting is None:
            raise RecordRejected("orphan_reply", f"no waiting page for order key {order.hex()}")
        count, tables, best = _decode_progress(progress)
        count, best = count + 1, _better(best, _decode_match(body))
        if count < tables:
            state.set(b"a" + order, _encode_progress(count, tables, best))
            return []
        state.delete(b"p" + order)
        state.delete(b"a" + order)
        return self._decide(_page_head(waiting), waiting, best)

    def _decide(self, head: dict[str, Any], waiting: bytes, best: Match | None) -> list[Emit]:
        url, simhash, digest = head["url"], head["simhash"], head["digest"]
        self.decisions["unique" if best is None else "exact" if best.exact else "near"] += 1
        if best is not None:
            return [self._verdict(url, "duplicate", kind="exact" if best.exact else "near",
                                  duplicate_of=best.url, distance=best.distance, simhash=simhash,
                                  digest=digest)]
        record = {**_page_record(waiting, head), "simhash": simhash, "digest": digest}
        unique = records.encode(RecordKind.UNIQUE_PAGE, record)
        return [Emit(self.topics.unique_pages, unique, url.encode("utf-8", "surrogatepass")),
                self._verdict(url, "unique", simhash=simhash, digest=digest)]

    def _verdict(self, url: str, verdict: str, **fields: Any) -> Emit:
        value = records.encode(RecordKind.PAGE_VERDICT, {
            "url": url, "verdict": verdict, "kind": None, "duplicate_of": None, "distance": None,
            "simhash": None, "digest": None, "reason": None, **fields})
        return Emit(self.topics.page_verdicts, value, url.encode("utf-8", "surrogatepass"))


def probe_value(page: Page) -> bytes:
    """A probe's shard record value (its key is the table key): order, SimHash, digest, URL."""
    return PROBE + _PROBE_HEAD.pack(page.order, page.simhash, page.text_digest) + page.url.encode(
        "utf-8", "surrogatepass")


def _check_url_length(url: str) -> None:
    if len(url) > MAX_URL_BYTES or len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise RecordRejected("url_too_long", f"URL exceeds {MAX_URL_BYTES} bytes")


# -- the analysis in a child process ----------------------------------------------------------------


@functools.cache
def _child_settings(context: bytes) -> tuple[ContentSeenSettings, int]:
    loaded = orjson.loads(context)
    return ContentSeenSettings(**loaded["settings"]), loaded["max_record_bytes"]


def analyze_value(context: bytes, value: bytes) -> bytes:
    """Child side of ``analysis_processes``: a fetched-page record's bytes -> its analysis, as JSON,
    then a newline and the decoded body when the record's body was base64 (the worker needs the
    bytes for the page's shard record, and decoding 200 KB of base64 again took a tenth of its time).

    Never raises: a record the parent will reject anyway, or a failure, is an ``error`` result
    (the parent decodes the record itself and dead-letters it with the real reason).
    """
    settings, max_record_bytes = _child_settings(context)
    try:
        record = records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=max_record_bytes)
        body = records.body_bytes(record)
        analysis = analyze_page(record, settings, body)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which decides
        return orjson.dumps({"error": repr(error)})
    if isinstance(analysis, Skipped):
        return orjson.dumps({"skipped": analysis.reason})
    found = orjson.dumps({**dataclasses.asdict(analysis), "text_digest": analysis.text_digest.hex(),
                          "body_digest": analysis.body_digest.hex(), "simhash": to_hex(analysis.simhash)})
    return found + b"\n" + body if isinstance(body, bytes) else found


def _analysis_from_child(raw: bytes) -> tuple[PageAnalysis | Skipped | str, bytes | None]:
    """A child's result: the analysis (or the child's error, as text) and the decoded body, if it
    sent one. JSON holds no raw newline (orjson escapes them), so the first one ends it."""
    head, newline, body = raw.partition(b"\n")
    loaded = orjson.loads(head)
    if "error" in loaded:
        error: str = loaded["error"]
        return error, None
    if "skipped" in loaded:
        return Skipped(loaded["skipped"]), None
    analysis = PageAnalysis(**{**loaded, "text_digest": bytes.fromhex(loaded["text_digest"]),
                               "body_digest": bytes.fromhex(loaded["body_digest"]),
                               "simhash": from_hex(loaded["simhash"])})
    return analysis, body if newline else None


# -- page, reply and progress encodings -------------------------------------------------------------

def _encode_page(record: dict[str, Any], body: bytes | str, analysis: PageAnalysis, tables: int) -> bytes:
    """The waiting page: what the verdict needs, the record without its body, then the raw body.

    The body travels (and is changelogged while the page waits) as raw bytes, not base64 JSON: a
    quarter smaller before the producer's lz4, and several times smaller after it.
    """
    head = {"url": record["url"], "simhash": to_hex(analysis.simhash), "digest": analysis.text_digest.hex(),
            "tables": tables, "body": "text" if isinstance(body, str) else "base64"}
    shell = {name: value for name, value in record.items() if name not in ("body", "body_base64")}
    return orjson.dumps(head) + b"\n" + orjson.dumps(shell) + b"\n" + records.raw_body(body)


def _page_head(value: bytes) -> dict[str, Any]:
    head: dict[str, Any] = orjson.loads(value[:value.index(b"\n")])
    return head


def _page_record(value: bytes, head: dict[str, Any]) -> dict[str, Any]:
    """The fetched-page record as it came in, the body re-encoded the way it was sent."""
    head_end = value.index(b"\n")
    shell_end = value.index(b"\n", head_end + 1)
    record: dict[str, Any] = orjson.loads(value[head_end + 1:shell_end])
    raw = value[shell_end + 1:]
    if head["body"] == "text":
        record["body"] = raw.decode("utf-8", "surrogatepass")
    else:
        record["body_base64"] = base64.b64encode(raw).decode("ascii")
    return record


def _encode_match(match: Match | None) -> bytes:
    if match is None:
        return b""
    return _REPLY_HEAD.pack(match.order, match.distance, match.exact) + match.url.encode(
        "utf-8", "surrogatepass")


def _decode_match(raw: bytes) -> Match | None:
    if not raw:
        return None
    order, distance, exact = _REPLY_HEAD.unpack_from(raw)
    return Match(order, raw[_REPLY_HEAD.size:].decode("utf-8", "surrogatepass"), distance, bool(exact))


def _better(current: Match | None, found: Match | None) -> Match | None:
    if current is None:
        return found
    if found is None:
        return current
    return found if found.rank() < current.rank() else current


_PROGRESS = struct.Struct(">HH")


def _encode_progress(count: int, tables: int, best: Match | None) -> bytes:
    return _PROGRESS.pack(count, tables) + _encode_match(best)


def _decode_progress(raw: bytes) -> tuple[int, int, Match | None]:
    count, tables = _PROGRESS.unpack_from(raw)
    return count, tables, _decode_match(raw[_PROGRESS.size:])
