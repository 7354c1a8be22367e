"""The page stage's state as named tables (:mod:`streams.runtime.tables`), and the two whose moves
depend on the block design.

Each module declares the tables it writes (``TABLES``): the last verdicts (``u`` + URL key,
:mod:`.last_verdicts`) move by URL key; the pages waiting at their gather shards (:mod:`.waiting`,
:mod:`.gather`) refuse a reshard, since a page's horizon waits on progress reports from every shard
of the old count (draining, ``--drain``, :mod:`streams.runtime.drain`, decides every waiting page
before the workers exit); the gather shards' progress views and queue bounds, the routing view of
the marks (:mod:`.relay`) and the token of the worker a shard last vouched for (:mod:`.local`)
describe the old shards and start afresh, as on a first start. Here, the block tables
(:mod:`.buckets`) and the payloads' captures (:mod:`.payloads`):

- A bucket (``t`` + table key) goes to the shard its table key routes to: the shard its probes go to.
- A payload's captures (``y`` + SimHash + SHA-1) go to the shard of the SimHash's first table key,
  where its payload probes go.
- A SimHash's record (``s`` + SimHash) is kept in every shard holding one of that SimHash's tables'
  buckets (a probe grows the record of its page's SimHash in the shard it probes), so it goes to
  every new shard one of the SimHash's table keys routes to: the shards its later probes will read
  it in. Copies of one record in several old shards hold the same pages (every page probes all of
  its SimHash's tables), so one is written: the copy in the lowest old shard that holds one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from streams.archives.payload import SHA1_BYTES
from streams.errors import StateError
from streams.pages.blocks import BlockDesign
from streams.runtime.api import Table, partition_for
from streams.runtime.extras import Placed
from streams.stages.content_seen import gather, last_verdicts, local, relay, waiting
from streams.stages.content_seen.buckets import SLOT_BYTES
from streams.stages.content_seen.payloads import PAYLOAD_PREFIX

BUCKET, RECORD = b"t", b"s"


def state_tables(design: BlockDesign) -> dict[str, Table]:
    """Every table of the page stage's shard store, by name."""
    return {"buckets": Table(BUCKET), "simhash records": Table(RECORD, partial(RecordMove, design)),
            "payloads": Table(PAYLOAD_PREFIX, partial(PayloadMove, design)), **last_verdicts.TABLES,
            **waiting.TABLES, **gather.TABLES, **relay.TABLES, **local.TABLES}


@dataclass
class RecordMove:
    """SimHash records, each to every new shard one of its table keys routes to, written once."""

    design: BlockDesign
    old_shards: int
    shards: int

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        if len(key) != len(RECORD) + SLOT_BYTES:
            raise StateError(f"content-seen state holds a SimHash record of another size: {key[:40]!r}")
        table_keys = self.design.keys(int.from_bytes(key[1:], "big"))
        if old_shard != min(partition_for(table_key, self.old_shards) for table_key in table_keys):
            return []  # another old shard's copy is the one written
        return [(shard, key, value) for shard in sorted({partition_for(k, self.shards) for k in table_keys})]

    def finish(self) -> Iterable[Placed]:
        return ()


@dataclass
class PayloadMove:
    """A payload's captures, to the shard of its SimHash's first table key."""

    design: BlockDesign
    old_shards: int
    shards: int

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        if len(key) != len(PAYLOAD_PREFIX) + SLOT_BYTES + SHA1_BYTES:
            raise StateError(f"content-seen state holds a payload key of another size: {key[:40]!r}")
        first_table = self.design.keys(int.from_bytes(key[1:1 + SLOT_BYTES], "big"))[0]
        return ((partition_for(first_table, self.shards), key, value),)

    def finish(self) -> Iterable[Placed]:
        return ()
