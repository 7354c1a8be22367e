"""URL dedup stage: emit each URL of the frontier the first time it is seen, exactly once.

First version (issue 2, the foundation): frontier records are decoded and validated (bad ones
become dead letters), keyed by a 128-bit mmh3 fingerprint of the URL, re-keyed into the stage's
shard topic, and decided against the exact fingerprint set of their shard; a new URL goes to the
new-URLs topic keyed by host, so fetchers keep per-host politeness. Canonicalization profiles, the
Bloom filter in front of the exact set and the migration command come with issue 3; until then the
URL is used as given (``CANONICALIZATION_VERSION = 0``, the identity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import mmh3
import orjson

from streams import records
from streams.errors import RecordRejected
from streams.records import RecordKind
from streams.runtime.stage import BatchState, Emit, Message
from streams.topics import Topics

STAGE = "url-dedup"
CANONICALIZATION_VERSION = 0
SEEN = b"\x01"


def fingerprint(canonical_url: str) -> bytes:
    """128-bit MurmurHash3 (x64) of the canonical URL, 16 bytes big-endian (fixed-width keys)."""
    return int(mmh3.hash128(canonical_url.encode(), signed=False)).to_bytes(16, "big")


def host_of(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError as error:
        raise RecordRejected("invalid_url", f"cannot parse URL: {error}") from error
    if not host:
        raise RecordRejected("invalid_url", "URL has no host")
    return host


@dataclass
class UrlDedupStage:
    """The stage as the runtime drives it (see :class:`streams.runtime.stage.Stage`)."""

    topics: Topics
    app_id: str
    max_record_bytes: int = records.DEFAULT_MAX_RECORD_BYTES
    name: str = STAGE
    route_topics: Sequence[str] = field(init=False)
    state_topic: str = field(init=False)

    def __post_init__(self) -> None:
        self.route_topics = [self.topics.frontier]
        self.state_topic = self.topics.shards(self.app_id, self.name)

    def route(self, message: Message) -> list[Emit]:
        record = records.decode(RecordKind.FRONTIER_URL, message.value(),
                                max_record_bytes=self.max_record_bytes)
        url = record["url"].strip()
        host = host_of(url)
        key = fingerprint(url)
        shard_record = {**record, "canonical": url, "host": host, "fingerprint": key.hex()}
        return [Emit(self.state_topic, orjson.dumps(shard_record), key)]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if key is None or len(key) != 16:
            raise RecordRejected("invalid_shard_record", "shard record without a 16-byte fingerprint key")
        if state.get(key) is not None:
            return []
        state.set(key, SEEN)
        record = orjson.loads(message.value() or b"{}")
        new_url = records.encode(RecordKind.NEW_URL, record)
        return [Emit(self.topics.new_urls, new_url, record["host"].encode())]
