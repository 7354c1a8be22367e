"""URL dedup stage: emit each URL of the frontier the first time it is seen, exactly once.

route (any frontier partition): decode and validate the record, resolve the URL against its
``source_url``, canonicalize it (:mod:`streams.urls.canonical`, profile ``safe`` or
``aggressive``), fingerprint it (128-bit mmh3; a record of a named ``crawl``: of the name and the
URL, so each named crawl has a seen-set of its own in the same state) and send it to the stage's
shard topic keyed by the fingerprint. A bad record or URL becomes a dead letter with the reason.
A fingerprint this worker routed before (a bounded set, :mod:`.routing_memory`) is a repeat, and
goes nowhere; a URL of a shard this worker owns is decided by ``process`` in the open transaction,
without the trip through the shard topic (the runtime's local path,
:mod:`streams.runtime.local_path`). A sighting of the same URL that another worker routed to the
shard topic is decided there later and finds this one: the URL is emitted once, by whichever
sighting the owner decides first.

process (shard *i*): look the fingerprint up in shard *i*'s seen-set; the first sighting is
recorded (a *mark*: the URL itself, so the set can be re-fingerprinted when canonicalization
changes, and the time, :mod:`streams.stages.url_dedup.marks`) and emitted to the new-URLs topic
keyed by host, so fetchers keep per-host politeness. Repeats are counted, not emitted. The seen-set
is the exact RocksDB set behind a Bloom filter (default) or a Bloom filter alone (``seen_set =
"bloom"``), see :mod:`streams.stages.url_dedup.bloom_store`.

Letting URLs go (exact mode): a mark older than ``forget_after_days`` has expired, and its URL is
new again at its next sighting; ``crawl-dedup forget`` writes control records to the shard topic,
which each shard's owner applies here (:mod:`streams.stages.url_dedup.forgetting`). Either way the
routing memory must not answer for a URL its shard let go: it is cleared by a forget, on every
change of assignment, while expiry is on at least every :func:`memory_window_ms`, and a worker
that owns no shard keeps none (it would hear of no forget).

The canonicalization version is part of the state (a metadata key, changelogged like the rest):
a worker whose version differs from its state's refuses to start until the state is migrated
(``python -m streams url-dedup-migrate``), instead of mixing two fingerprint spaces silently.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import orjson

from streams import records
from streams.errors import ConfigError, RecordRejected, StreamsError
from streams.records import RecordKind
from streams.runtime.api import (
    BatchState,
    Emit,
    Message,
    PartitionStore,
    Processors,
    StageContext,
    StateIdentity,
    StoreSpec,
    partition_for,
)
from streams.runtime.extras import OwnedShards, RocksStore
from streams.stages.url_dedup import marks
from streams.stages.url_dedup.forgetting import (
    CONTROL_KEY,
    FORGETTING_KEY,
    Forgetter,
    UrlDedupMove,
    decode_pending,
    forgotten_meanwhile,
)
from streams.stages.url_dedup.marks import Expiry
from streams.stages.url_dedup.migrate import Refingerprint
from streams.stages.url_dedup.routing_memory import RoutingMemory
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.urls import canonical
from streams.urls.canonical import CANONICALIZATION_VERSION

STAGE: Final = "url-dedup"
VERSION_KEY: Final = b"meta:canonicalization_version"
REPLIES: Final = "url-dedup-replies"  # the output forget's replies go to
_MARK_HEAD: Final = struct.Struct(">Bq")  # a mark's head (marks.mark, here on the hot path)
_TIMED: Final = marks.TIMED
TIMED_MARK: Final = bytes([_TIMED])
MEMORY_WINDOW_MAX_MS: Final = 3_600_000


def state_version(settings: UrlDedupSettings) -> bytes:
    """What the state records: the canonicalization version and the profile it was built with."""
    return f"{CANONICALIZATION_VERSION}:{settings.profile}".encode()


def memory_window_ms(expiry: Expiry) -> int:
    """How long the routing memory may answer for a URL while expiry is on (0: expiry off): an hour,
    or a 24th of the expiry when that is shorter. A repeat answered from memory never reaches its
    shard, so a URL may be answered "seen" up to this long after its mark expired."""
    return min(MEMORY_WINDOW_MAX_MS, max(1, expiry.after_ms // 24)) if expiry.after_ms else 0


def _wall_clock() -> float:
    return time.time()


@dataclass
class UrlDedupStage:
    """The stage as the runtime drives it (see :class:`streams.runtime.stage.Stage`)."""

    settings: UrlDedupSettings = field(default_factory=UrlDedupSettings)
    max_record_bytes: int = records.DEFAULT_MAX_RECORD_BYTES
    decisions: Counter[str] = field(default_factory=Counter)  # new / seen, for the metrics
    clock: Callable[[], float] = _wall_clock  # seconds since the epoch: when a URL is marked seen

    def __post_init__(self) -> None:
        self._canonical = self.settings.canonical()
        self._decode = records.Decoder(RecordKind.FRONTIER_URL, max_record_bytes=self.max_record_bytes)
        self._version = state_version(self.settings)
        self._keep_urls = self.settings.seen_set == "exact"
        self._expiry = Expiry.of_days(self.settings.forget_after_days)
        if self._expiry.after_ms and not self._keep_urls:
            raise ConfigError("forget_after_days needs seen_set = exact: a Bloom filter alone keeps no "
                              "time, and cannot let a URL go")
        self._expire_after_ms = self._expiry.after_ms
        self._memory_window_ms = memory_window_ms(self._expiry)
        self._memory_until_ms = 0
        self._head_ms, self._head = -1, b""  # the last mark head packed (_mark_head)
        self._owned = OwnedShards({})
        self._shard_count = 1
        self._shards_topic = ""
        self._new_urls = ""
        self._routing = RoutingMemory(1)
        self._generation = -1  # of the assignment the routing memory was kept under
        self._remembers = False  # this worker owns a shard: it keeps a routing memory
        self.events: Counter[str] = Counter()
        self._forgetter: Forgetter | None = None
        # The last URL routed, as its shard record says it: the local path decides it next.
        self._routed_key, self._routed_url, self._routed_crawl, self._routed_host = b"", "", "", ""

    def store(self) -> StoreSpec:
        """Seen-sets behind Bloom filters; the canonicalization the state was built with; resharded
        fingerprint by fingerprint (a Bloom-only set too: its changelog keeps every fingerprint it
        stored, and the new shards' filters are built from them); a state of another
        canonicalization re-fingerprinted (:mod:`streams.stages.url_dedup.migrate`)."""
        return StoreSpec(open=partial(open_seen_set, self.settings),
                         identity=StateIdentity({VERSION_KEY: self._version}, self._other_version),
                         layout=UrlDedupMove, rewrite=partial(Refingerprint, self.settings))

    def init(self, context: StageContext) -> Processors:
        """Its topics, and a memory of routed fingerprints (kept while it owns a shard)."""
        self._owned, self._shard_count = context.owned, context.shards
        self._shards_topic = context.internal("shards").topic
        self._new_urls = context.output("new-urls")
        self.decisions, self.events = context.decisions, context.events
        self._routing = RoutingMemory(max(1, self.settings.route_cache_urls))
        context.listen(self._routing)
        self._forgetter = Forgetter(self._shards_topic, context.output(REPLIES), context.input_topics[0],
                                    self._routing, self.events, self._now_ms, self._keep_urls,
                                    lambda: self._shard_count, max(1, self.settings.forget_part_marks))
        return Processors(route=self.route, shards={"shards": self.process})

    def close(self) -> None:
        """Nothing of its own to stop."""

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def route(self, message: Message) -> list[Emit]:
        record = self._decode(message.value())
        source = record.get("source_url")
        url = canonical.canonicalize(record["url"], self._canonical, base=source or None)
        crawl: str = record.get("crawl") or ""
        key = canonical.fingerprint(url, crawl)
        if key in self._routing and self._memory_holds():
            self.decisions["seen"] += 1
            return []
        self._note(key)
        host = canonical.host_of(url)
        self._routed_key, self._routed_url, self._routed_crawl, self._routed_host = key, url, crawl, host
        # The shard record is the new-URL record itself: the shard passes its bytes on unchanged.
        value = self._new_url_record(record, url, key, host)
        return [Emit(self._shards_topic, value, key, partition_for(key, self._shard_count))]

    def _memory_holds(self) -> bool:
        """Whether the routing memory's answer stands, now that it has a key: not after a change of
        assignment (cleared: a forget may have been applied by a shard's owner before this worker
        took it), nor past its window while expiry is on (cleared), nor while this worker owns no
        shard (it keeps none: it would hear of no forget)."""
        if self._owned.generation != self._generation:
            self._reassigned()
            return False
        if self._memory_window_ms:
            now = self._now_ms()
            if now >= self._memory_until_ms:
                self._routing.clear()
                self._memory_until_ms = now + self._memory_window_ms
                return False
        return self._remembers

    def _note(self, key: bytes) -> None:
        if self._owned.generation != self._generation:
            self._reassigned()
        if self._remembers:
            self._routing.note(key)

    def _reassigned(self) -> None:
        self._generation = self._owned.generation
        self._routing.clear()
        self._remembers = any(shard in self._owned for shard in range(self._shard_count))
        if self._memory_window_ms:
            self._memory_until_ms = self._now_ms() + self._memory_window_ms

    @staticmethod
    def _new_url_record(record: dict[str, Any], url: str, key: bytes, host: str) -> bytes:
        return records.encode(RecordKind.NEW_URL,
                              {**record, "canonical": url, "host": host, "fingerprint": key.hex()})

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if key is None or len(key) != 16:
            if key == CONTROL_KEY and self._forgetter is not None:
                return self._forgetter.process(message, state)
            raise RecordRejected("invalid_shard_record", "shard record without a 16-byte fingerprint key")
        if self._is_seen(state, key):
            return []
        value = message.value() or b"{}"
        if key == self._routed_key:  # routed here just now (the local path): no need to decode it
            url, crawl, host = self._routed_url, self._routed_crawl, self._routed_host
        else:
            record = orjson.loads(value)
            url, crawl, host = record["canonical"], record.get("crawl") or "", record["host"]
        self._record_new(state, key, canonical.scoped(url, crawl))
        return [Emit(self._new_urls, value, host.encode())]

    def _is_seen(self, state: BatchState, key: bytes) -> bool:
        value = state.get(key)
        if value is None:
            return False
        if self._keep_urls and not self._still_seen(state, key, value):
            return False
        self.decisions["seen"] += 1
        return True

    def _still_seen(self, state: BatchState, key: bytes, value: bytes) -> bool:
        """Whether a mark still stands: not selected by a forget under way in its shard, not expired.
        A mark of a version before marks had times is given one the first time expiry finds it."""
        if state.get(FORGETTING_KEY) is not None and forgotten_meanwhile(state, key, value):
            self.events["forgotten"] += 1
            return False
        if self._expire_after_ms:
            now = self._now_ms()
            if self._expiry.expired(value, now):
                self.events["expired"] += 1
                return False
            if value[:1] != TIMED_MARK:
                state.set(key, marks.stamped(value, now))
        return True

    def _record_new(self, state: BatchState, key: bytes, scoped_url: str) -> None:
        """The first sighting: the seen mark keeps the URL itself (with its crawl's name, as it was
        hashed: :func:`~streams.urls.canonical.scoped`), so the set can be re-fingerprinted when
        canonicalization changes (``url-dedup-migrate``), and the time it was marked seen."""
        state.set(key, self._mark_head() + scoped_url.encode() if self._keep_urls else b"")
        self.decisions["new"] += 1

    def _mark_head(self) -> bytes:
        """A mark's head for now, packed once a millisecond: new URLs come tens a millisecond, and
        packing each one's was a good part of what marking it seen cost (docs/benchmarks.md)."""
        now = self._now_ms()
        if now != self._head_ms:
            self._head_ms, self._head = now, _MARK_HEAD.pack(_TIMED, now)
        return self._head

    def status(self, store: PartitionStore, key: bytes) -> dict[str, Any]:
        """What shard ``store`` says of fingerprint ``key``, from its committed state (a worker's
        ``/status``; another thread than the engine's, which only reads): whether it is seen, since
        when, and when it is new again with expiry on."""
        value = store.get(key)
        if value is None:
            return {"seen": False}
        if not self._keep_urls:
            return {"seen": True, "first_seen_at": None, "bloom_only": True}
        at = marks.seen_at_ms(value)
        found: dict[str, Any] = {"seen": True, "first_seen_at": None if at is None else marks.rfc3339_ms(at)}
        forgetting = store.get(FORGETTING_KEY)
        if forgetting and any(each.selects(key, value) for each in decode_pending(forgetting).values()):
            return {**found, "seen": False, "forgetting": True}
        if self._expire_after_ms and at is not None:
            found["new_again_at"] = marks.rfc3339_ms(at + self._expire_after_ms)
            if self._expiry.expired(value, self._now_ms()):
                found.update(seen=False, expired=True)
        return found

    def _other_version(self, partition: int, found: Mapping[bytes, bytes | None]) -> StreamsError:
        stored = (found.get(VERSION_KEY) or b"none").decode(errors="replace")
        return ConfigError(
            f"shard {partition} was built with canonicalization {stored}, "
            f"this worker uses {self._version.decode()}: stop all workers and run "
            "'python -m streams url-dedup-migrate' (docs/url-dedup.md, 'Canonicalization upgrades')")


def open_seen_set(settings: UrlDedupSettings, path: Path, shards: int, block_cache_mb: int,
                  memtable_mb: int) -> PartitionStore:
    """Shard ``path``'s seen-set (one of ``shards``) in the configured mode: the exact RocksDB set
    behind a Bloom filter, or a Bloom filter alone, each sized for its share of ``expected_urls``."""
    from streams.stages.url_dedup.bloom_store import BloomFrontStore, BloomOnlyStore

    per_shard = max(1, settings.expected_urls // max(1, shards))
    if settings.seen_set == "bloom":
        return BloomOnlyStore(path, per_shard, settings.bloom_false_positive_rate)
    if settings.seen_set != "exact":
        raise ConfigError(f"seen_set must be exact or bloom, not {settings.seen_set!r}")
    inner = RocksStore(path / "rocksdb", block_cache_mb=block_cache_mb, memtable_mb=memtable_mb)
    return BloomFrontStore(inner, path, per_shard, settings.bloom_false_positive_rate)
