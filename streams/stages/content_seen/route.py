"""The route step: a fetched page analysed, then sent to its gather shard and to one shard per table.

Records of the fetched-pages topic (any partition): validate, decode, extract the main text, digest
and SimHash it (:mod:`streams.pages.analyze`; prepared a batch ahead, in child processes when there
are any, :mod:`streams.stages.content_seen.intake`). A page with no text to compare gets its
``skipped`` verdict here. Otherwise: one :class:`PageWaits` to the page's gather shard (keyed by its
order key: the page's head and where its input record is, plus that record itself when another
worker owns the gather shard) and one :class:`Probe` per block table to the shard owning that table
key.

When this worker owns the gather shard, the page arrives there now instead (its input record kept
in memory: :mod:`streams.stages.content_seen.local`), before any of its probes, so their replies
find it. The probes are records, each decided at once by the runtime when this worker owns its
shard (the local path, :mod:`streams.runtime.local_path`, which the ``shards`` topic declares for
probes), in table order, after the route step; a refused output (a page record carrying its input
record past the shard topic's limit) is refused before any of them touches the state.

With ``payload_digests`` (the default) the page's payload goes along: the probe of its first table is
a :class:`PayloadProbe` carrying the SHA-1 of its body after transfer decoding (the body of
``body_base64``, or ``body`` as UTF-8), its fetch time and ``warc_record_id``, and its head the
SHA-1 (:mod:`streams.stages.content_seen.payloads`).

A page whose URL is longer than :data:`MAX_URL_BYTES` is a dead letter (``url_too_long``): the URL
is stored in its SimHash's record in every shard holding one of its table keys (among up to
``max_bucket_entries`` pages) and written in verdicts, keys and replies, so its length bounds the
state and records of other pages too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from streams import records
from streams.errors import RecordRejected
from streams.pages.blocks import BlockDesign
from streams.pages.decode import Skipped
from streams.pages.sketch import empty_sketch
from streams.records import RecordKind
from streams.runtime.api import Emit, Message, StageContext
from streams.runtime.extras import OwnedShards
from streams.stages.content_seen import buckets, payloads
from streams.stages.content_seen.buckets import Page
from streams.stages.content_seen.decide import verdict
from streams.stages.content_seen.intake import Intake
from streams.stages.content_seen.last_verdicts import LastVerdict, LastVerdicts
from streams.stages.content_seen.relay import Relay
from streams.stages.content_seen.shard_records import PageWaits, PayloadProbe, Probe
from streams.stages.content_seen.waiting import PageCache, Source, encode_head
from streams.urls.canonical import CanonicalSettings

MAX_URL_BYTES: Final = CanonicalSettings().max_url_bytes  # the URL and revisit stages' bound (4,096)
EMPTY_SKETCH: Final = empty_sketch().encode()


def page_order(record: dict[str, Any], message: Message) -> bytes:
    """A page's place in the global "earlier" order: ``fetched_at``, else the record's timestamp."""
    fetched_at = record.get("fetched_at")
    if isinstance(fetched_at, str):
        millis = int(records.parse_rfc3339(fetched_at).timestamp() * 1000)
    else:
        millis = message.timestamp()[1]
    return buckets.order_key(millis, message.partition() or 0, message.offset() or 0)


class Router:
    """The stage's ``route`` step (see the module docstring)."""

    def __init__(self, context: StageContext, design: BlockDesign, intake: Intake, pages: PageCache,
                 relay: Relay, max_record_bytes: int,
                 last_verdicts: LastVerdicts, payload_digests: bool = True) -> None:
        self._design = design
        self._last_verdicts = last_verdicts
        self._intake = intake
        self._pages = pages
        self._relay = relay
        self._max_record_bytes = max_record_bytes
        self._payload_digests = payload_digests
        self._owned: OwnedShards = context.owned
        self._shards = context.internal("shards")
        self._verdicts = context.output("page-verdicts")
        self._decisions = context.decisions
        self._check = context.check_outputs

    def route(self, message: Message) -> list[Emit]:
        value = message.value() or b""
        record = records.decode(RecordKind.FETCHED_PAGE, value, max_record_bytes=self._max_record_bytes)
        _check_url_length(record["url"])
        analysis = self._intake.analyse(message, record)
        order = page_order(record, message)
        if isinstance(analysis, Skipped):
            self._decisions["skipped"] += 1
            said = verdict(self._verdicts, record["url"], "skipped", reason=analysis.reason)
            return [said, *self._last_verdicts.note(record["url"], LastVerdict(order, "skipped"))]
        sketch = analysis.sketch.encode() if analysis.sketch is not None else EMPTY_SKETCH
        page = Page(order, analysis.simhash, analysis.text_digest, record["url"], sketch)
        table_keys = self._design.keys(analysis.simhash)
        source = Source(message.topic() or "", message.partition() or 0, message.offset() or 0)
        payload = (payload_probe(record, message, page, analysis.payload_sha1) if self._payload_digests
                   else None)
        head = encode_head(page.url, page.simhash, page.text_digest, len(table_keys), source,
                           None if payload is None else payload.sha1)
        shards, owned = self._shards, self._owned
        gather = shards.shard_of(order)
        seed = self._relay.reported_ends
        if owned.settled(gather) is not None:  # arrives at once (the local path): the record waits in memory
            self._pages.put(source, value)
            emits = [shards.send(PageWaits(head, b"", seed), order, gather)]
        else:  # through the topic: the record goes along
            emits = [shards.send(PageWaits(head, value, seed), order, gather)]
            self._check(emits)  # refused now, before a probe here writes anything
        probe: bytes | None = None
        topic = shards.topic
        for table, table_key in enumerate(table_keys):
            shard = shards.shard_of(table_key)
            if table == 0 and payload is not None:
                emits.append(Emit(topic, shards.frame(payload), table_key, shard))
            else:
                probe = probe or shards.frame(Probe(page))
                emits.append(Emit(topic, probe, table_key, shard))
        return emits


def payload_probe(record: dict[str, Any], message: Message, page: Page,
                  sha1: bytes | None = None) -> PayloadProbe:
    """The probe of the page's first table with its payload along (module docstring); ``sha1``, the
    payload's digest when an analysis process computed it."""
    sha1 = payloads.payload_sha1(record) if sha1 is None else sha1
    fetched_at = record.get("fetched_at")
    if not isinstance(fetched_at, str):
        kind, millis = message.timestamp()
        fetched_at = records.rfc3339(datetime.fromtimestamp(millis / 1000, UTC)) if kind else None
    record_id = record.get("warc_record_id")
    return PayloadProbe(Probe(page), sha1, fetched_at, record_id if isinstance(record_id, str) else None)


def _check_url_length(url: str) -> None:
    if len(url) > MAX_URL_BYTES or len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise RecordRejected("url_too_long", f"URL exceeds {MAX_URL_BYTES} bytes")
