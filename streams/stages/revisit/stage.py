"""revisit stage: change detection and the next fetch time for every fetched page.

route (any fetched-pages partition): decode and validate the record, canonicalize its URL with the
URL stage's rules (:mod:`streams.urls.canonical`) and fingerprint it, read the page's features
(body and main-text digests, SimHash: :mod:`streams.pages.analyze`, the page stage's code), and send
a small shard record (features and validators, not the body) to the shard that owns the fingerprint.

process (shard *i*): load the URL's :class:`~streams.stages.revisit.history.FetchHistory` and the shard's
allocation state, run the pure step (:func:`streams.stages.revisit.schedule.apply_fetch`), store both, and
emit exactly one revisit update, keyed by host, for every fetched page (HEAD-only records included:
their update carries the pre-fetch answer ``fetch_needed``). Policies, estimators and signals are in
:mod:`streams.stages.revisit`; ``docs/revisit.md`` describes them with their sources.

State keys: ``h`` + 16-byte fingerprint -> history; ``p`` + host -> the changes the host's pages
showed in this shard, their rates' prior (:mod:`streams.stages.revisit.hosts`); ``meta:allocation``
-> the shard's rate histogram, Lagrange multiplier and spend feedback (per shard, with its share of
the budget; see :mod:`streams.stages.revisit.budget`); ``meta:revisit-state`` -> the state's
identity (:data:`STATE_IDENTITY`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from streams import records
from streams.errors import RecordRejected, StateError, StreamsError
from streams.pages.analyze import PageSettings, digest
from streams.pages.changes import CHANGE_FEATURES_VERSION, ChangeFeatures, change_features
from streams.pages.decode import parse_content_type
from streams.pages.features import Weighting
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
)
from streams.stages.revisit.budget import BudgetState
from streams.stages.revisit.history import FORMAT_VERSION, READABLE_VERSIONS, decode_history, encode_history
from streams.stages.revisit.hosts import HostChanges, host_key
from streams.stages.revisit.move import ALLOCATION_KEY, HISTORY_PREFIX, IDENTITY_KEY, RevisitMove
from streams.stages.revisit.numbers import HostNumbers, host_numbers_key
from streams.stages.revisit.policies import IntervalBounds, PolicyConfig, parse_bound_rules
from streams.stages.revisit.schedule import CoreConfig, RevisitOutcome, apply_fetch
from streams.stages.revisit.signals import Fetch
from streams.urls import canonical
from streams.urls.canonical import CanonicalSettings

STAGE = "revisit"
MAX_VALIDATOR_CHARS = 1024      # longer ETag or Last-Modified values are not kept (nor sent back)
MAX_CONTENT_LENGTH_DIGITS = 18  # a longer Content-Length is unreadable: it may not fit the history's int64
# RFC 3339 years have four digits: a fetch time near 9999 schedules its next fetch at the last instant.
_LAST_INSTANT_S = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
_FIRST_INSTANT_S = datetime(1, 1, 1, tzinfo=UTC).timestamp()
STATE_IDENTITY = (f"histories {FORMAT_VERSION}; change features {CHANGE_FEATURES_VERSION}; "
                  "host priors 2; host numbers 1; allocation 2").encode()
"""What a shard's state holds: the history format written (``decode_history`` also reads the formats
of :data:`~streams.stages.revisit.history.READABLE_VERSIONS`, so a shard written before this identity
existed is adopted as it is), the change features' version, the host states'. A shard that says
otherwise is refused, except one of :data:`ADOPTED_IDENTITIES`."""
ADOPTED_IDENTITIES = frozenset({f"histories 2; change features {CHANGE_FEATURES_VERSION}; "
                                "host priors 1".encode(),
                                f"histories 3; change features {CHANGE_FEATURES_VERSION}; "
                                "host priors 1; host numbers 1".encode()})
"""Earlier identities this build reads and upgrades as it goes: histories of format 2 (no number
buckets) are read as they are and written in the current format at their next fetch; host states
of format 1 (no shape scores) and budget states of format 1 (a fixed spend window) likewise, at
their host's or shard's next update."""


@dataclass(frozen=True)
class RevisitSettings:
    """Settings of the revisit stage (``[revisit]`` in TOML, ``STREAMS_REVISIT_*``); docs/revisit.md."""

    policy: str = "default"                    # default | nutch | stormcrawler | fixed
    budget_fetches_per_page_per_day: float = 0.1   # default policy: fetches per page per day (docs)
    budget_fetches_per_day: float = 0.0        # or a total per day over all shards (0: per page)
    min_interval_s: float = 3600.0             # every policy's shortest interval
    max_interval_s: float = 30 * 86400.0       # and longest
    initial_interval_s: float = 86400.0        # after a page's first fetch (no estimate yet)
    fixed_interval_s: float = 86400.0          # fixed policy
    host_interval_bounds: tuple[str, ...] = ()          # "host=min_s:max_s" (parent domains match)
    content_type_interval_bounds: tuple[str, ...] = ()  # "text/html=min_s:max_s" or "image/*=..."
    resolve_every: int = 64                    # updates between re-solving the Lagrange multiplier
    simhash_threshold: int = -1                # >= 0: word changes within this many bits are "unchanged"
    history_fetches: int = 32                  # observations kept per URL for the estimators
    error_retry_interval_s: float = 3600.0     # after a failed fetch, at most this long
    nutch_inc_rate: float = 0.4                # db.fetch.schedule.adaptive.inc_rate
    nutch_dec_rate: float = 0.2                # db.fetch.schedule.adaptive.dec_rate
    nutch_sync_delta: bool = True              # db.fetch.schedule.adaptive.sync_delta
    nutch_sync_delta_rate: float = 0.3         # db.fetch.schedule.adaptive.sync_delta_rate
    stormcrawler_inc_rate: float = 0.5         # scheduler.adaptive.fetchInterval.rate.incr
    stormcrawler_dec_rate: float = 0.5         # scheduler.adaptive.fetchInterval.rate.decr
    profile: str = "safe"                      # URL canonicalization: the URL stage's profile
    # Change features: 2-word shingles by term frequency. Copies are found with single words (the
    # page stage's default), but word order matters for "did this page change": the simulation
    # measured the 6-bit threshold on these (docs/revisit.md).
    shingle_words: int = 2
    weighting: Weighting = "tf"
    cjk_ngram_chars: int = 2
    min_main_chars: int = PageSettings.min_main_chars

    def core(self, shards: int) -> CoreConfig:
        """The core's settings; a total budget is split evenly over the runtime's ``shards``."""
        policy = PolicyConfig(
            policy=self.policy, bounds=IntervalBounds(self.min_interval_s, self.max_interval_s),
            initial_interval_s=self.initial_interval_s,
            budget_fetches_per_page_per_day=self.budget_fetches_per_page_per_day,
            budget_fetches_per_day=self.budget_fetches_per_day, shards=shards,
            resolve_every=self.resolve_every, fixed_interval_s=self.fixed_interval_s,
            host_bounds=parse_bound_rules(self.host_interval_bounds, "host"),
            content_type_bounds=parse_bound_rules(self.content_type_interval_bounds, "content type"),
            nutch_inc_rate=self.nutch_inc_rate, nutch_dec_rate=self.nutch_dec_rate,
            nutch_sync_delta=self.nutch_sync_delta, nutch_sync_delta_rate=self.nutch_sync_delta_rate,
            stormcrawler_inc_rate=self.stormcrawler_inc_rate,
            stormcrawler_dec_rate=self.stormcrawler_dec_rate)
        return CoreConfig(policy=policy, simhash_threshold=self.simhash_threshold,
                          history_fetches=self.history_fetches,
                          error_retry_interval_s=self.error_retry_interval_s)

    def pages(self) -> PageSettings:
        return PageSettings(shingle_words=self.shingle_words, weighting=self.weighting,
                            cjk_ngram_chars=self.cjk_ngram_chars, min_main_chars=self.min_main_chars)


@dataclass
class RevisitStage:
    """The stage as the runtime drives it (see :class:`streams.runtime.stage.Stage`)."""

    settings: RevisitSettings = field(default_factory=RevisitSettings)
    max_record_bytes: int = records.DEFAULT_MAX_RECORD_BYTES
    decisions: Counter[str] = field(default_factory=Counter)  # changed / unchanged / first

    def __post_init__(self) -> None:
        self._core = self.settings.core(1)
        self._pages = self.settings.pages()
        self._canonical = CanonicalSettings(profile=self.settings.profile)
        self._shards_topic = self._updates = ""

    def store(self) -> StoreSpec:
        """A RocksDB store with the state's identity (:data:`STATE_IDENTITY`) and a way to reshard."""
        return StoreSpec(identity=StateIdentity({IDENTITY_KEY: STATE_IDENTITY}, _other_state,
                                                {IDENTITY_KEY: ADOPTED_IDENTITIES}),
                         layout=RevisitMove)

    def init(self, context: StageContext) -> Processors:
        """The fetch budget is split across the shards (offline, one store holds it whole)."""
        self._core = self.settings.core(context.shards)
        self._shards_topic = context.internal("shards").topic
        self._updates = context.output("revisit-updates")
        self.decisions = context.decisions
        return Processors(route=self.route, shards={"shards": self.process})

    def close(self) -> None:
        """Nothing of its own to stop."""

    def route(self, message: Message) -> list[Emit]:
        record = records.decode(RecordKind.FETCHED_PAGE, message.value(),
                                max_record_bytes=self.max_record_bytes)
        url = canonical.canonicalize(record["url"], self._canonical)
        body = records.raw_body(records.body_bytes(record))
        fetched_at_s = _fetched_at_s(record, message)
        shard_record = {"url": record["url"], "host": canonical.host_of(url), "fetched_at_s": fetched_at_s,
                        **_validators(record, body), **page_features(record, body, self._pages, fetched_at_s)}
        return [Emit(self._shards_topic, orjson.dumps(shard_record), canonical.fingerprint(url))]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if key is None or len(key) != 16:
            raise RecordRejected("invalid_shard_record", "shard record without a 16-byte fingerprint key")
        shard: dict[str, Any] = orjson.loads(message.value() or b"{}")
        stored = state.get(HISTORY_PREFIX + key)
        allocation = state.get(ALLOCATION_KEY)
        budget = BudgetState.decode(allocation)
        host_state_key = host_key(shard["host"])
        host_state = state.get(host_state_key)
        host_changes = HostChanges.decode(host_state)
        numbers_key = host_numbers_key(shard["host"])
        numbers_state = state.get(numbers_key)
        host_numbers = HostNumbers.decode(numbers_state)
        outcome = apply_fetch(decode_history(stored) if stored is not None else None, _fetch(shard),
                              self._core, budget, shard["host"], host_changes, host_numbers)
        if outcome.history is not None:
            state.set(HISTORY_PREFIX + key, encode_history(outcome.history))
        for state_key, before, after in ((ALLOCATION_KEY, allocation, budget.encode()),
                                         (host_state_key, host_state, host_changes.encode()),
                                         (numbers_key, numbers_state, host_numbers.encode())):
            if after != before:
                state.set(state_key, after)
        self.decisions[{True: "changed", False: "unchanged", None: "first"}[outcome.changed]] += 1
        update = records.encode(RecordKind.REVISIT_UPDATE, revisit_update(shard["url"], outcome))
        return [Emit(self._updates, update, shard["host"].encode())]


    def status(self, store: PartitionStore, key: bytes) -> dict[str, Any]:
        """The fetch history of the URL of fingerprint ``key``, from the committed state of the shard
        owning it (a worker's ``/status``, another thread: read only): its last fetch and change,
        and its next fetch as the last successful fetch's update scheduled it."""
        stored = store.get(HISTORY_PREFIX + key)
        if stored is None:
            return {"history": None}
        history = decode_history(stored)
        changed = history.last_change_s()
        return {"history": {
            "last_fetch_at": _rfc3339_s(history.last_fetch_s),
            "next_fetch_at": _rfc3339_s(history.last_fetch_s + history.interval_s),
            "interval_s": round(history.interval_s, 3),
            "last_changed_at": None if changed is None else _rfc3339_s(changed),
            "fetches": history.fetches, "changes": history.changes,
            "change_rate_estimate": history.rate_per_s}}


def _rfc3339_s(at_s: float) -> str:
    return records.rfc3339(datetime.fromtimestamp(min(max(at_s, _FIRST_INSTANT_S), _LAST_INSTANT_S), UTC))


def revisit_update(url: str, outcome: RevisitOutcome) -> dict[str, Any]:
    """The ``revisit_update`` record of one outcome (schemas/revisit_update.schema.json)."""
    update: dict[str, Any] = {
        "url": url,
        "next_fetch_at": records.rfc3339(datetime.fromtimestamp(
            min(max(outcome.next_fetch_s, _FIRST_INSTANT_S), _LAST_INSTANT_S), UTC)),
        "interval_s": round(outcome.interval_s, 3),
        "changed": outcome.changed,
        "signal": outcome.signal,
        "change_rate_estimate": outcome.rate_per_s,
        "conditional_headers": outcome.conditional_headers,
    }
    if outcome.distance is not None:
        update["change_distance"] = outcome.distance
    if outcome.fetch_needed is not None:
        update["fetch_needed"] = outcome.fetch_needed
        update["fetch_needed_reason"] = outcome.fetch_needed_reason
    return update


def page_features(record: Mapping[str, Any], body: bytes, settings: PageSettings,
                  fetched_at_s: float | None = None) -> dict[str, Any]:
    """Digests and SimHash of the page's change text (:mod:`streams.pages.changes`), hex-encoded for
    the shard record.

    A body the analysis does not read (binary, another media type, empty) still gets its body
    digest, so a PDF's change is seen; error statuses, 304s and HEADs carry no content to compare.
    """
    features = change_features(record, settings, body, fetched_at_s)
    if isinstance(features, ChangeFeatures):
        found = {"body_digest": digest(body).hex(), "text_digest": features.text_digest.hex(),
                 "wording_digest": features.wording_digest.hex(), "simhash": features.simhash}
        if features.number_buckets is not None:
            found["number_buckets"] = features.number_buckets.hex()
        return found
    status = record.get("status", 200)
    if record.get("method", "GET") == "HEAD" or status is None or not 200 <= status < 300:
        return {}
    return {"body_digest": digest(body).hex()}


def _other_state(partition: int, found: Mapping[bytes, bytes | None]) -> StreamsError:
    stored = (found.get(IDENTITY_KEY) or b"none").decode(errors="replace")
    return StateError(f"revisit shard {partition} holds state of another build ({stored}); this worker "
                      f"writes {STATE_IDENTITY.decode()} and reads histories of formats "
                      f"{', '.join(map(str, READABLE_VERSIONS))}: run the build that wrote it")


def _validators(record: Mapping[str, Any], body: bytes) -> dict[str, Any]:
    headers: Mapping[str, str] = record.get("headers") or {}
    content_type = record.get("content_type") or headers.get("content-type")
    return {"status": record.get("status", 200), "method": record.get("method", "GET"),
            "etag": _short(headers.get("etag")), "last_modified": _short(headers.get("last-modified")),
            "content_length": _content_length(record, headers, body),
            "content_type": _media_type(content_type)}


def _media_type(content_type: str | None) -> str | None:
    """The media type's essence (RFC 9110 section 8.3.1): ``text/html; charset=x`` -> ``text/html``."""
    parsed = parse_content_type(content_type)
    return parsed[0] if parsed is not None else None


def _short(value: str | None) -> str | None:
    return value.strip() if value and len(value) <= MAX_VALIDATOR_CHARS else None


def _content_length(record: Mapping[str, Any], headers: Mapping[str, str], body: bytes) -> int | None:
    """The Content-Length header (RFC 9110 section 8.6), else the length of the body received.

    Section 8.6 asks recipients to "anticipate potentially large decimal numerals and prevent
    parsing errors due to integer conversion overflows": one of more than
    :data:`MAX_CONTENT_LENGTH_DIGITS` digits is read as absent.
    """
    declared = headers.get("content-length", "").strip()
    if declared.isascii() and declared.isdigit() and len(declared) <= MAX_CONTENT_LENGTH_DIGITS:
        return int(declared)
    if record.get("method", "GET") == "HEAD" or ("body" not in record and "body_base64" not in record):
        return None
    return len(body)


def _fetched_at_s(record: Mapping[str, Any], message: Message) -> float:
    """``fetched_at``, else the Kafka record's timestamp, else now (offline lines have no timestamp)."""
    if record.get("fetched_at"):
        return records.parse_rfc3339(record["fetched_at"]).timestamp()
    _, timestamp_ms = message.timestamp()
    return timestamp_ms / 1000.0 if timestamp_ms > 0 else time.time()


def _fetch(shard: Mapping[str, Any]) -> Fetch:
    def hex_bytes(name: str) -> bytes | None:
        value = shard.get(name)
        return bytes.fromhex(value) if value is not None else None

    return Fetch(fetched_at_s=shard["fetched_at_s"], status=shard.get("status"),
                 method=shard.get("method", "GET"),
                 etag=shard.get("etag"), last_modified=shard.get("last_modified"),
                 content_length=shard.get("content_length"), body_digest=hex_bytes("body_digest"),
                 text_digest=hex_bytes("text_digest"), simhash=shard.get("simhash"),
                 content_type=shard.get("content_type"), wording_digest=hex_bytes("wording_digest"),
                 number_buckets=hex_bytes("number_buckets"))
