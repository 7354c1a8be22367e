"""How the page stage's state moves to another shard count (``python -m streams reshard``).

Its state is the block tables (:mod:`streams.stages.content_seen.buckets`) and the pages waiting
at their gather shards (:mod:`streams.stages.content_seen.gather`).

- A bucket (``t`` + table key) goes to the shard its table key routes to: the shard its probes go to.
- A payload's captures (``y`` + SimHash + SHA-1, :mod:`streams.stages.content_seen.payloads`) go to
  the shard of the SimHash's first table key, where its payload probes go.
- A URL's last verdict (``u`` + URL key, :mod:`streams.stages.content_seen.last_verdicts`) goes to
  the shard its URL key routes to.
- A SimHash's record (``s`` + SimHash) is kept in every shard holding one of that SimHash's tables'
  buckets (a probe grows the record of its page's SimHash in the shard it probes), so it goes to
  every new shard one of the SimHash's table keys routes to: the shards its later probes will read
  it in. Copies of one record in several old shards hold the same pages (every page probes all of
  its SimHash's tables), so one is written: the copy in the lowest old shard that holds one.
- Waiting pages cannot move: a page's horizon waits on progress reports from every shard of the
  old count. Draining (``--drain``, :mod:`streams.runtime.drain`) decides every waiting page before
  the workers exit, so a drained state has none; a state that still has some is refused. The
  gather shards' progress views and queue bounds (``meta:gather``, ``meta:queue``, ``meta:routing``)
  describe the old shards' progress and start afresh, as on a first start, and so does the token
  of the worker a shard last vouched for (``meta:local``, :mod:`streams.stages.content_seen.local`).
"""

from __future__ import annotations

from collections.abc import Iterable

from streams.archives.payload import SHA1_BYTES
from streams.errors import ReshardRefused, StateError
from streams.pages.blocks import BlockDesign
from streams.runtime.api import partition_for
from streams.runtime.extras import Placed
from streams.stages.content_seen.buckets import SLOT_BYTES
from streams.stages.content_seen.gather import GATHER_KEY, HORIZONS_KEY, QUEUE_KEY
from streams.stages.content_seen.last_verdicts import PREFIX as LAST_VERDICT
from streams.stages.content_seen.local import LOCAL_KEY
from streams.stages.content_seen.payloads import GATHER_PREFIX, PAYLOAD_PREFIX
from streams.stages.content_seen.relay import ROUTING_KEY
from streams.stages.content_seen.waiting import EARLY_PREFIX

BUCKET, RECORD = b"t", b"s"
# A waiting page's head, replies, queue entry, first capture, and replies that came before it.
WAITING = (b"p", b"w", b"a", b"q", GATHER_PREFIX, EARLY_PREFIX)
STARTS_AFRESH = (GATHER_KEY, QUEUE_KEY, HORIZONS_KEY, ROUTING_KEY, LOCAL_KEY)


class ContentSeenMove:
    """A :class:`~streams.runtime.moves.StateMove` of the block tables of ``design``."""

    def __init__(self, design: BlockDesign, old_shards: int, shards: int) -> None:
        self._design = design
        self.old_shards = old_shards
        self.shards = shards

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        kind = key[:1]
        if kind in (BUCKET, LAST_VERDICT):
            return ((partition_for(key[1:], self.shards), key, value),)
        if kind == RECORD and len(key) == 1 + SLOT_BYTES:
            return self._record(old_shard, key, value)
        if kind == PAYLOAD_PREFIX and len(key) == 1 + SLOT_BYTES + SHA1_BYTES:
            first_table = self._design.keys(int.from_bytes(key[1:1 + SLOT_BYTES], "big"))[0]
            return ((partition_for(first_table, self.shards), key, value),)
        if key in STARTS_AFRESH:
            return ()
        if kind in WAITING:
            raise ReshardRefused("pages are still waiting for their verdict in the old shards: run the "
                                 "stage's workers with --drain until they exit, then reshard")
        raise StateError(f"content-seen state holds a key it does not know: {key[:40]!r}")

    def _record(self, old_shard: int, key: bytes, value: bytes) -> list[Placed]:
        table_keys = self._design.keys(int.from_bytes(key[1:], "big"))
        if old_shard != min(partition_for(table_key, self.old_shards) for table_key in table_keys):
            return []  # another old shard's copy is the one written
        return [(shard, key, value) for shard in sorted({partition_for(k, self.shards) for k in table_keys})]

    def finish(self) -> Iterable[Placed]:
        return ()
