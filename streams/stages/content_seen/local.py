"""The local path: what a worker does at once, in the open transaction, instead of through the shard topic.

The shard topic only carries a record to the worker that owns its shard. When that is this worker
(one worker owns every shard), the trip (encode, produce, commit, fetch back, decode: several
transactions of hops per page, :mod:`streams.stages.content_seen.stage`) decides nothing a direct
call could not, as the URL stage found for its URLs (now the runtime's local path,
:mod:`streams.runtime.local_path`, which the page stage's ``shards`` topic takes for its arrivals,
probes and vouched progress; when a record may take it is decided here, its horizons needing the
vouching below). So, against the owned shard's state
as the open transaction sees it (:class:`~streams.runtime.extras.OwnedShards`, the state its shard
records are processed against, so the writes commit or abort with the batch and the same group
generation fences them):

1. **Always** (any worker, any mode): a page whose gather shard is owned here and settled *arrives*
   there in the routing transaction, and a probe of an owned, settled shard is probed there, each
   record decided by its processor on the runtime's local path (the page's input record waits in
   memory, not in its :class:`PageWaits`); a shard with records routed to it before this worker took
   it gets them through the topic, after those, and the token is *detoured* ((2)); a reply or
   notice to an owned gather shard where its page waits is applied there at once
   (:meth:`Gatherer.tell
   <streams.stages.content_seen.gather.Gatherer.tell>`), and a reply to one where its page has not
   arrived yet waits for it there (:func:`~streams.stages.content_seen.waiting.hear_early`). Each
   shard still sees one page's probes in table order and the pages in routing order, so its state
   evolves as through the topic.
2. **Once vouched and settled**: this worker's routing marks are merged into an owned shard's view
   directly (:meth:`Ownership.claimed`), not sent as :class:`Mark` records.
3. **Once vouched with the current token**: an owned shard's progress goes to each settled
   gather shard owned here that has processed one of this worker's records carrying its current
   token as a :class:`~streams.stages.content_seen.shard_records.VouchedProgress`, which the
   runtime's local path has the gather shard take at once, deciding the pages whose horizons it
   covers in the same transaction (:meth:`Ownership.vouched_gathers`;
   :mod:`streams.stages.content_seen.relay`); the other gather shards get it as
   :class:`~streams.stages.content_seen.shard_records.Progress` records. A page that must still
   wait stays in its queue and is decided by the transaction whose progress covers it. A worker
   that owns every shard and routes every input partition is *alone* (:meth:`Ownership.alone`):
   then no record of any other worker can reach a gather shard at all.

Why this keeps the horizon argument (:mod:`streams.stages.content_seen.horizon`). That argument
needs two orders: at a shard, a mark comes after the probes it vouches for; at a gather shard, a
shard's progress comes after the replies and notices of those probes.

- (1) alone changes neither: a local probe happens in the transaction whose mark vouches for it,
  before that mark is produced, let alone processed; a reply or notice applied at once is in the
  gather shard's state before any progress produced in or after this transaction, and so is a
  reply kept there for a page that has not arrived. (A notice for a page that has not arrived, its
  :class:`PageWaits` from another worker still in the topic, is sent as a record, after that one.)
- (2) A direct claim says "this shard has probed every record this worker has routed". True for
  what this worker routed while it owned the shard (probed locally, by (1)); for what was routed
  before (by this worker or another, in transactions committed before this worker's assignment),
  the probes were records in the shard's partition before any record this worker produced since;
  and so were the probes the runtime sent through the topic while the shard was not settled (each
  precedes every mark this worker sent after it, and once the shard is settled no probe of this
  assignment goes that way: ``claimed`` asks for both; a mark sent *before* such a probe must not
  vouch, so each one the runtime sends around moves the token, :meth:`Ownership._sync`). So a shard
  is *vouched* for this worker
  once it has processed a mark this worker produced since its assignment: each mark and progress
  record carries this worker's *token* (this process and stage ``init``, the assignment it was
  produced in, a count of taints, below: :attr:`Ownership.token`), and the shard keeps the last
  one of this worker it processed (``meta:local``, state: it commits or aborts with the transaction
  that processed the record, so an aborted transaction vouches for nothing). Until then marks go as
  records, as before.
- (3) Giving the progress of shard *s* (owned here) directly to gather shard *g* (owned here) says
  "every reply and notice of the probes *s* counts is in your state". The probes *s* made while this
  worker owns it put their replies and notices in *g*'s state directly, by (1), or sent notices as
  records, and such a record *taints* the token (counted in it, so the vouching record must be newer
  than every one); the probes *s* made before this worker's assignment, under an earlier owner, sent
  theirs in transactions that committed before it, so they precede in *g*'s partition every record
  this worker produced since. Both precede the record of this worker that vouched for *g* with the
  current token. What other workers send *g* meanwhile (their pages, their shards' replies and
  progress) speaks for their own shards only, which this progress does not vouch for. Until *g* is
  vouched, its progress goes as a record, as before. (Until 2026-11-28 this was done only by a
  worker alone; with two workers every page then waited one more commit and fetch for its own
  worker's progress records.)

Alone, a notice for a page not waiting at its owned gather shard is late (that page was decided:
no :class:`PageWaits` can still be on its way; one this worker sent around an unsettled gather
shard detoured its token, so it is not alone until a record newer than that one vouches), and is
counted as such without a record.

A new assignment (:attr:`OwnedShards.generation`, or other input partitions in the positions
reported), a new process or a new stage ``init`` (a new nonce) changes the token, so nothing
vouched before counts; the first transaction that routes input sends marks again, and the next
vouches for them. A taint changes only the count: direct marks go on (they need the assignment
alone), direct progress waits for a newer record of this worker at every gather shard.
"""

from __future__ import annotations

import os
import struct
from typing import Final

from streams.runtime.api import BatchState, Table
from streams.runtime.extras import InputPositions, OwnedShards, starts_afresh

LOCAL_KEY: Final = b"meta:local"  # the token of the last of this worker's records processed here
TABLES: Final = {"local token": Table(LOCAL_KEY, starts_afresh)}  # vouches for the old shards' records
NONCE_BYTES: Final = 8
_COUNTS: Final = struct.Struct(">III")  # assignment epoch, probes sent around, taints
ASSIGNMENT_BYTES: Final = NONCE_BYTES + 8  # what a direct claim needs of a token: all but the taints


class Ownership:
    """What this worker owns, what its own records have vouched for, and its token (module docstring)."""

    def __init__(self, owned: OwnedShards, shard_count: int, input_topics: int) -> None:
        """``input_topics``: how many input topics the stage reads (a worker alone routes all of them)."""
        self._owned = owned
        self._count = shard_count
        self._input_topics = input_topics
        self._nonce = os.urandom(NONCE_BYTES)
        self._generation = owned.generation
        self._epoch = 0  # assignments seen: the runtime's generation moved, or the inputs routed here
        self._taints = 0
        self._detours = owned.detours  # the runtime's count of records sent around unsettled shards
        self._inputs: frozenset[tuple[str, int]] | None = None  # the input partitions routed here
        self._all_inputs = False
        self._token = self._make_token()

    def _make_token(self) -> bytes:
        return self._nonce + _COUNTS.pack(self._epoch & 0xFFFFFFFF, self._detours & 0xFFFFFFFF,
                                          self._taints & 0xFFFFFFFF)

    def _sync(self) -> None:
        """A new assignment: nothing vouched before counts, and which inputs are routed here is unknown.
        A record the runtime's local path sent through the topic for a shard owned here (not settled:
        it waits for the records routed there before it was taken) is a *detour*: a direct mark would
        vouch for it while it is on its way, so what vouched before no longer does, until a mark sent
        after it has been processed there (the detours count in the token's claim part)."""
        owned = self._owned
        if owned.generation != self._generation:
            self._generation = owned.generation
            self._new_assignment()
        if owned.detours != self._detours:
            self._detours = owned.detours
            self._token = self._make_token()

    def _new_assignment(self) -> None:
        self._epoch += 1
        self._inputs = None
        self._all_inputs = False
        self._token = self._make_token()

    @property
    def token(self) -> bytes:
        """Carried by this worker's marks and progress records."""
        self._sync()
        return self._token

    def taint(self) -> None:
        """A notice went to an owned gather shard as a record: what vouched for giving
        progress directly no longer does, until records newer than it are processed."""
        self._taints += 1
        self._token = self._make_token()

    def inputs(self, positions: InputPositions) -> None:
        """This worker's input positions: whether it routes every input partition. Other input
        partitions than before are a new assignment too (the runtime's generation says so first;
        this holds for a driver that moves inputs without it)."""
        self._sync()
        places = frozenset(positions.routed)
        if self._inputs is not None and places != self._inputs:
            self._new_assignment()
        self._inputs = places
        counts = positions.partitions
        self._all_inputs = len(counts) == self._input_topics and all(
            (topic, partition) in places for topic, count in counts.items() for partition in range(count))

    def vouch(self, partition: int, token: bytes, state: BatchState) -> None:
        """A mark or progress record carrying ``token`` was processed at ``partition``: kept when it
        is this worker's, of its current assignment."""
        mine = self.token
        if token[:ASSIGNMENT_BYTES] == mine[:ASSIGNMENT_BYTES] and state.get(LOCAL_KEY) != token:
            state.set(LOCAL_KEY, token)

    def claimed(self, shard: int) -> BatchState | None:
        """The state of ``shard`` when this worker may merge its marks there directly (owned and
        settled, and vouched for since its assignment), else None. Settled: while a shard is not,
        the runtime sends this worker's probes for it through the topic (its local path waits for
        the records routed there before), and a mark merged directly would vouch for probes still
        on their way; the vouching record came after every probe sent before it, and once the
        shard is settled no probe of this assignment goes through the topic again."""
        state = self._owned.settled(shard)
        if state is None:
            return None
        found = state.get(LOCAL_KEY)
        vouched = found is not None and found[:ASSIGNMENT_BYTES] == self.token[:ASSIGNMENT_BYTES]
        return state if vouched else None

    def vouched_gathers(self) -> frozenset[int]:
        """The gather shards this worker may give its shards' progress without record order: owned
        here and settled (so the runtime's local path takes a
        :class:`~streams.stages.content_seen.shard_records.VouchedProgress` there at once, never
        around it), and the last of its records each has processed carried its current token (so
        every reply and notice it sent there as a record is in that shard's state; module
        docstring, (3))."""
        token, owned = self.token, self._owned
        return frozenset(shard for shard in range(self._count)
                         if (state := owned.settled(shard)) is not None and state.get(LOCAL_KEY) == token)

    def alone(self) -> bool:
        """Whether progress may be given to the gather shards directly: this worker owns every shard
        and routes every input partition, and every shard has processed one of its records carrying
        its current token."""
        token = self.token
        if not self._all_inputs:
            return False
        owned = self._owned
        if any(shard not in owned for shard in range(self._count)):
            return False
        for shard in range(self._count):
            state = owned.state(shard)
            if state is None or state.get(LOCAL_KEY) != token:
                return False
        return True
