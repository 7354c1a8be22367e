"""The records the page stage's processors send each other, on its internal topic ``shards``.

To the shard of a block-table key (the scatter: partition *i* holds the buckets of shard *i*):

- :class:`Probe`: a page to look up in one block table, and to insert there (the probe step);
- :class:`Mark`: how far a worker has routed its input (:mod:`streams.stages.content_seen.relay`);
- :class:`PayloadProbe`: the probe of a page's first table, with the page as a capture of its
  payload to look up and insert there (:mod:`streams.stages.content_seen.payloads`).

A worker sends none of these to a shard it owns: it probes there in the transaction that routes
the page (:mod:`streams.stages.content_seen.local`), and, once the shard has processed a mark of its
own making (the mark's *token*), claims its own marks there directly too.

To the gather shard of a page, by its order key (where the page waits):

- :class:`PageWaits`: a page arrives to wait for its replies (its input record along when the worker
  that routed it does not own the gather shard);
- :class:`Reply`: the best earlier page one table's probe met (or none);
- :class:`Notice`: an earlier page, probed later, met this one;
- :class:`PayloadReply`: a first table's reply, with the page's first capture (or none);
- :class:`PayloadNotice`: an earlier capture of this page's payload, probed later;
- :class:`Progress`: how far a shard has probed (:mod:`streams.stages.content_seen.horizon`), with
  its sender's token as a mark has;
- :class:`VouchedProgress`: how far this worker's shards have probed, for a gather shard owned here
  that has vouched for its current token (:mod:`streams.stages.content_seen.local`, (3)): the
  runtime's local path decides it at once, in the transaction it speaks for;
- :class:`Drain`: "go on": the front of the queue was taken off up to the limit;
- :class:`Decide`: a page off the queue, to decide now (one page's outputs per record; the decide
  step).

To the shard of a URL's key: :class:`~streams.stages.content_seen.last_verdicts.LastVerdict`, the
verdict of a page of that URL (kept there for ``crawl-dedup status``).

The protocol rests on their order within a partition: a page's record precedes its replies, a
progress record follows the replies and notices of the probes it vouches for, a mark follows the
probes of the transaction it reports (the horizon argument). One topic keeps all of them in one
order per shard, as the argument was written for; the runtime could carry the scatter and the
gather on two topics, and a stage of two (``tests/kafka/test_scatter_gather_kafka.py``) runs so, but for
this stage that was measured to cost time: a page's records then reach a worker in two fetches, and
a batch more often finds one half of them not yet fetched and waits for the rest (the figures are
in docs/decisions/0007-one-shape-for-every-stage.md). The runtime frames each record with its type
(:class:`streams.runtime.api.InternalTopic`) and hands it, decoded, to its processor.

The records a page makes (all but marks, progress, drain and decide records, one a transaction)
write their ``__init__`` out and are not frozen, as :class:`~streams.stages.content_seen.buckets.Page`
says why; none is changed once built.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final, Self

import orjson

from streams.pages.sketch import SKETCH_BYTES
from streams.stages.content_seen.buckets import Match, Page
from streams.stages.content_seen.horizon import RoutingView
from streams.stages.content_seen.last_verdicts import LastVerdict
from streams.stages.content_seen.payloads import Capture
from streams.stages.content_seen.waiting import decode_head, decode_match, encode_match

# order, SimHash, text digest, sketch; then the URL
_PROBE_HEAD: Final = struct.Struct(f">16sQ16s{SKETCH_BYTES}s")
_SHARD: Final = struct.Struct(">H")
_PAYLOAD: Final = struct.Struct(">20sI")  # a payload probe: SHA-1, then the length of its capture's fields
_LENGTH: Final = struct.Struct(">I")
_JSON: Final = ord("{")  # a view written before marks had tokens starts here
_SEEDED: Final = b"H"  # a PageWaits with its router's log ends
_SEED_LENGTH: Final = struct.Struct(">H")


def _with_token(token: bytes, view: RoutingView) -> bytes:
    """The token's length (one byte, never ``{``), the token, then the view."""
    return bytes([len(token)]) + token + view.encode()


def _token_and_view(raw: bytes) -> tuple[bytes, RoutingView]:
    if not raw or raw[0] == _JSON:  # a record of a version before tokens: no token
        return b"", RoutingView.decode(raw)
    end = 1 + raw[0]
    if len(raw) < end:
        raise ValueError("a mark or progress record cut short in its token")
    return raw[1:end], RoutingView.decode(raw[end:])


@dataclass(slots=True, unsafe_hash=True)
class Probe:
    """A page looked up in one table (the record's key is the table key)."""

    page: Page

    def __init__(self, page: Page) -> None:
        self.page = page

    def encode(self) -> bytes:
        page = self.page
        head = _PROBE_HEAD.pack(page.order, page.simhash, page.text_digest, page.sketch)
        return head + page.url.encode("utf-8", "surrogatepass")

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        order, simhash, digest, sketch = _PROBE_HEAD.unpack_from(raw)
        url = raw[_PROBE_HEAD.size:].decode("utf-8", "surrogatepass")
        return cls(Page(order, simhash, digest, url, sketch))


@dataclass(frozen=True, slots=True)
class Mark:
    """A worker's input positions, by input topic index (sent to every shard it does not claim
    directly), and the token of the worker and assignment that sent it
    (:attr:`streams.stages.content_seen.local.Ownership.token`; empty from an earlier version)."""

    view: RoutingView
    token: bytes = b""

    def encode(self) -> bytes:
        return _with_token(self.token, self.view)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        token, view = _token_and_view(raw)
        return cls(view, token)


@dataclass(slots=True, unsafe_hash=True)
class PageWaits:
    """A page's head (JSON, :func:`streams.stages.content_seen.waiting.encode_head`), stored as it
    comes, its input record's value when it travels along (else empty), and the log ends its
    router last reported (``seed``, :func:`streams.stages.content_seen.horizon.encode_horizon`;
    empty when it had reported none, and from a version before them).

    With a seed the record starts with ``H`` and the seed's length (two bytes), never ``{``."""

    head: bytes
    carried: bytes = b""
    seed: bytes = b""

    def __init__(self, head: bytes, carried: bytes = b"", seed: bytes = b"") -> None:
        self.head = head
        self.carried = carried
        self.seed = seed

    def encode(self) -> bytes:
        body = self.head + b"\n" + self.carried if self.carried else self.head
        return _SEEDED + _SEED_LENGTH.pack(len(self.seed)) + self.seed + body if self.seed else body

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        seed = b""
        if raw[:1] == _SEEDED:
            (length,) = _SEED_LENGTH.unpack_from(raw, 1)
            start = 1 + _SEED_LENGTH.size
            seed, raw = raw[start:start + length], raw[start + length:]
        head, _, carried = raw.partition(b"\n")
        return cls(head, carried, seed)

    def fields(self) -> dict[str, Any]:
        return decode_head(self.head)


@dataclass(slots=True, unsafe_hash=True)
class Reply:
    """One table's answer to a page's probe: the best earlier page it met, if any."""

    best: Match | None

    def __init__(self, best: Match | None) -> None:
        self.best = best

    def encode(self) -> bytes:
        return encode_match(self.best)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls(decode_match(raw))


@dataclass(slots=True, unsafe_hash=True)
class Notice:
    """An earlier page met this one in a bucket, probed after it."""

    match: Match

    def __init__(self, match: Match) -> None:
        self.match = match

    def encode(self) -> bytes:
        return encode_match(self.match)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        found = decode_match(raw)
        if found is None:
            raise ValueError("a notice names the earlier page it is about")
        return cls(found)


@dataclass(frozen=True, slots=True)
class Progress:
    """Shard ``shard`` has probed through what its marks told it (sent to every gather shard this
    worker does not give it directly), and the sender's token, as a :class:`Mark` has."""

    shard: int
    view: RoutingView
    token: bytes = b""

    def encode(self) -> bytes:
        return _SHARD.pack(self.shard) + _with_token(self.token, self.view)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        token, view = _token_and_view(raw[_SHARD.size:])
        return cls(_SHARD.unpack_from(raw)[0], view, token)


_VIEW_BYTES: Final = struct.Struct(">HI")  # a shard and its view's length, in a VouchedProgress


@dataclass(frozen=True, slots=True)
class VouchedProgress:
    """The progress of the shards in ``told`` (each shard's number and what its marks told it),
    for a gather shard that vouched for its sender's current token: every reply and notice those
    shards' probes sent it is in its state already, so it needs no record order to be taken (the
    argument in :mod:`streams.stages.content_seen.local`, (3)). One record for all the shards of a
    transaction, as the relay once gave them directly: a gather shard merges them in one write."""

    told: tuple[tuple[int, RoutingView], ...]

    def encode(self) -> bytes:
        parts = []
        for shard, view in self.told:
            raw = view.encode()
            parts += [_VIEW_BYTES.pack(shard, len(raw)), raw]
        return b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        told, at = [], 0
        while at < len(raw):
            shard, size = _VIEW_BYTES.unpack_from(raw, at)
            at += _VIEW_BYTES.size
            if at + size > len(raw):
                raise ValueError("a vouched progress record cut short in a view")
            told.append((shard, RoutingView.decode(raw[at:at + size])))
            at += size
        return cls(tuple(told))


@dataclass(frozen=True, slots=True)
class Drain:
    """Go on taking pages off the front of the queue."""

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls()


@dataclass(frozen=True, slots=True)
class Decide:
    """Decide the page of this record's key, taken off the queue."""

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls()


@dataclass(slots=True, unsafe_hash=True)
class PayloadProbe:
    """The probe of a page's first table, and the page as a capture of the payload of SHA-1 ``sha1``
    (its order key and URL are the page's)."""

    probe: Probe
    sha1: bytes
    fetched_at: str | None
    record_id: str | None

    def __init__(self, probe: Probe, sha1: bytes, fetched_at: str | None, record_id: str | None) -> None:
        self.probe = probe
        self.sha1 = sha1
        self.fetched_at = fetched_at
        self.record_id = record_id

    def capture(self) -> Capture:
        page = self.probe.page
        return Capture(page.order, page.url, self.fetched_at, self.record_id)

    def encode(self) -> bytes:
        fields = orjson.dumps([self.fetched_at, self.record_id])
        return _PAYLOAD.pack(self.sha1, len(fields)) + fields + self.probe.encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        sha1, length = _PAYLOAD.unpack_from(raw)
        start = _PAYLOAD.size
        fetched_at, record_id = orjson.loads(raw[start:start + length])
        return cls(Probe.decode(raw[start + length:]), sha1, fetched_at, record_id)


@dataclass(slots=True, unsafe_hash=True)
class PayloadReply:
    """A first table's reply (:class:`Reply`'s best earlier page) and the page's first capture."""

    best: Match | None
    first: Capture | None

    def __init__(self, best: Match | None, first: Capture | None) -> None:
        self.best = best
        self.first = first

    def encode(self) -> bytes:
        first = self.first.encode() if self.first is not None else b""
        return _LENGTH.pack(len(first)) + first + encode_match(self.best)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        (length,) = _LENGTH.unpack_from(raw)
        start = _LENGTH.size
        return cls(decode_match(raw[start + length:]), Capture.decode(raw[start:start + length]))


@dataclass(slots=True, unsafe_hash=True)
class PayloadNotice:
    """An earlier capture of this page's payload, probed after it."""

    first: Capture

    def __init__(self, first: Capture) -> None:
        self.first = first

    def encode(self) -> bytes:
        return self.first.encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        found = Capture.decode(raw)
        if found is None:
            raise ValueError("a payload notice names the capture it is about")
        return cls(found)


# Each type's tag on the topic, kept for good (records of an earlier version decode); a new type
# takes a new tag.
RECORDS = {0: PageWaits, 1: Probe, 2: Reply, 3: Notice, 4: Mark, 5: Progress, 6: Drain, 7: Decide,
           8: PayloadProbe, 9: PayloadReply, 10: PayloadNotice, 11: LastVerdict, 12: VouchedProgress}
