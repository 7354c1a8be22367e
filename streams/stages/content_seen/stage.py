"""content_seen stage: a verdict for every fetched page, and each page's content once.

Near-duplicates are found through SimHash block tables (Manku, Jain and Das Sarma, WWW 2007),
and the tables are sharded across partitions *by table key*, not by the page's host: a mirror of a
page on another host has other URLs but the same keys, so it meets the original in the same
buckets whichever input partition it came through, and each worker holds only its shards' buckets.
That makes a lookup a scatter and gather over the stage's internal topic ``shards``, with typed
records (:mod:`streams.stages.content_seen.shard_records`), each step inside the runtime's
one-transaction-per-batch (so state, changelog, outputs and offsets commit together), each step a
processor of its own:

1. route (:mod:`.route`): analyse the page; one *probe* per block table to the shard owning that
   table key, and the page to its gather shard (the shard of its order key).
2. probe (:mod:`.probe`): find the best earlier page through the bucket and *reply* with it to the
   page's gather shard; send a *notice* to each later page met; insert the page.
3. gather (:mod:`.gather`): keep the page's head and the best earlier page met; once its horizon is
   covered (:mod:`.horizon`: every input record that was in the topic when it was routed has been
   probed), send it a *decide* record.
4. decide (:mod:`.decide`): the verdict, and the page to the unique-pages topic when nothing earlier
   matched.

Last in each transaction (a per-transaction callback, :mod:`.relay`) a worker sends every shard a
routing *mark*, and each shard that took one sends every gather shard its *progress*: how a gather
shard learns that a horizon is covered.

Each of these records only travels to the worker that owns its shard. What a worker owns itself it
does in the routing transaction instead (:mod:`.local`, which says why the horizon argument still
holds): a page arrives at an owned gather shard and is probed in owned shards there and then, and
replies reach an owned gather shard at once; marks go directly to the owned shards that have
vouched for this worker; and a worker that owns everything gives the progress directly and decides
each page whose horizon is covered in the same transaction. With one worker no record goes
through the shard topic once its shards have vouched for it.

This module wires the steps together and declares the store: PlainTable point reads (10 random
buckets a page), the block design and feature version recorded per shard, so a worker with other
settings refuses the shard instead of mixing two fingerprint spaces, and the state layout beside
them, so a shard in another layout is refused (:class:`StateError`) instead of misread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from streams import records
from streams.errors import ConfigError, StateError, StreamsError
from streams.pages.analyze import PageSettings, design_for
from streams.pages.extract import EXTRACTION_VERSION
from streams.pages.features import FEATURES_VERSION
from streams.pages.sketch import SKETCH_VERSION, NearDuplicateRule
from streams.runtime.api import (
    On,
    PartitionStore,
    Processors,
    StageContext,
    StateIdentity,
    StoreSpec,
    TransactionListener,
)
from streams.runtime.extras import rocks_store
from streams.stages.content_seen import buckets, cores, last_verdicts
from streams.stages.content_seen.decide import Decider
from streams.stages.content_seen.gather import Gatherer
from streams.stages.content_seen.intake import Intake
from streams.stages.content_seen.last_verdicts import LastVerdict, LastVerdicts
from streams.stages.content_seen.local import Ownership
from streams.stages.content_seen.move import state_tables
from streams.stages.content_seen.probe import Prober
from streams.stages.content_seen.relay import Relay
from streams.stages.content_seen.route import Router
from streams.stages.content_seen.shard_records import Decide
from streams.stages.content_seen.waiting import PageCache

STAGE = "content-seen"
DESIGN_KEY = b"meta:block_design"
LAYOUT_KEY = b"meta:state_layout"
# PlainTable's hash index hashes this much of each state key: ``t`` and a whole bucket key of the
# default design (table byte and 4 bytes of blocks), ``s`` and 5 bytes of a record's SimHash.
STATE_KEY_PREFIX_BYTES = 6


@dataclass(frozen=True)
class ContentSeenSettings(PageSettings):
    """Settings of the page stage (``[content_seen]`` in TOML, ``STREAMS_CONTENT_SEEN_*``)."""

    max_bucket_entries: int = 64     # slots a bucket keeps, pages a SimHash record keeps (the earliest)
    # Child processes analysing pages in parallel (0: in the worker); "auto": one per usable core on
    # two or more, none on one (streams/stages/content_seen/cores.py says why).
    analysis_processes: int | Literal["auto"] = "auto"
    page_cache_mb: int = 512         # input records of pages awaiting their verdict, kept in memory
    # The near-duplicate decision on the tables' candidates (streams/pages/sketch.py, NearDuplicateRule):
    near_radius: int = 10              # SimHash bits a candidate may differ in
    near_min_resemblance: float = 0.65  # estimated Jaccard resemblance of the word pairs
    near_min_length_ratio: float = 0.96  # the smaller page's share of the larger's distinct word pairs
    # Verdicts carry the WARC payload digest and the first capture of the same payload (its URL, fetch
    # time, WARC-Record-ID): what a WARC writer needs for a revisit record (docs/web-archives.md).
    payload_digests: bool = True

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


@dataclass
class ContentSeenStage:
    """The stage as the runtime drives it (see :class:`streams.runtime.stage.Stage`)."""

    settings: ContentSeenSettings = field(default_factory=ContentSeenSettings)
    max_record_bytes: int = records.DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        self._design = design_for(self.settings)
        self._design_id = fingerprint_space(self.settings)
        self._rule = self.settings.near_rule()
        self._pages = PageCache(self.settings.page_cache_mb * 1024 * 1024)
        self._intake = Intake(self.settings, cores.analysis_processes(self.settings.analysis_processes),
                              self.max_record_bytes, self._pages, self.settings.payload_digests)

    def store(self) -> StoreSpec:
        """Shards read bucket by bucket, 10 random ones a page (PlainTable); the tables' design in
        every shard; its named tables, each moved its own way (:mod:`streams.stages.content_seen.move`)."""
        return StoreSpec(open=rocks_store(STATE_KEY_PREFIX_BYTES),
                         identity=StateIdentity({DESIGN_KEY: self._design_id, LAYOUT_KEY: buckets.LAYOUT},
                                                self._other_design),
                         tables=state_tables(self._design))

    def init(self, context: StageContext) -> Processors:
        """The four steps over one page cache; pages analysed a batch ahead, as many as fit in
        memory; the input's progress relayed to the shards last in each transaction; what this
        worker owns taken on the local path (:mod:`.local`)."""
        topic_index = {topic: number for number, topic in enumerate(context.input_topics)}
        shards = context.internal("shards")
        ownership = Ownership(context.owned, shards.shards, len(topic_index))
        last_verdicts = LastVerdicts(shards, context.owned)
        decider = Decider(context, self._pages, self.max_record_bytes, last_verdicts)
        relay = Relay(shards, context.owned, ownership, topic_index)
        gatherer = Gatherer(shards, context.owned, ownership, self._pages, topic_index,
                            context.counter("race_matches"), decider.decide_covered)
        prober = Prober(gatherer, relay, ownership, self._rule, self.settings.max_bucket_entries)
        router = Router(context, self._design, self._intake, self._pages, relay,
                        self.max_record_bytes, last_verdicts, self.settings.payload_digests)
        context.prepare_input(self._intake.prepare, self._intake.ready, self._intake.settle)
        context.each_transaction(relay.end_of_part)
        context.listen(_ShardsGone(self))
        return Processors(route=router.route, shards={
            "shards": [*prober.processors(), *gatherer.processors(), On(Decide, decider.decide),
                       On(LastVerdict, last_verdicts.process)]})

    def close(self) -> None:
        """The analysis processes stop (started again if the stage is given a context again)."""
        self._intake.close()

    def status(self, store: PartitionStore, key: bytes) -> dict[str, Any]:
        """The last verdict of the URL of key ``key`` (:mod:`.last_verdicts`), from the committed
        state of the shard owning it (a worker's ``/status``, another thread: read only)."""
        return {"last_verdict": last_verdicts.status(store.get(last_verdicts.PREFIX + key))}

    def revoked(self, shards: Sequence[int]) -> None:
        """Pages gathered on a shard gone elsewhere are decided there: forget every value kept (the
        ones still decided here are read back), so none waits in memory for a verdict never taken;
        and analyses of pages that another worker may route now."""
        self._intake.forget()
        if shards:
            self._pages.clear()

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


class _ShardsGone(TransactionListener):
    """The stage's transaction listener: of the transactions, only shards going elsewhere concern
    it (:meth:`ContentSeenStage.revoked`); what it keeps per transaction is in its store."""

    def __init__(self, stage: ContentSeenStage) -> None:
        self._stage = stage

    def revoked(self, shards: Sequence[int]) -> None:
        self._stage.revoked(shards)


def _differences(found: bytes, mine: bytes) -> str:
    """The settings and versions two fingerprint spaces differ in, as ``name stored -> this worker's``."""
    try:
        stored, wanted = orjson.loads(found), orjson.loads(mine)
    except orjson.JSONDecodeError:
        return f"{found.decode(errors='replace')} -> {mine.decode()}"
    names = sorted(name for name in {*stored, *wanted} if stored.get(name) != wanted.get(name))
    return ", ".join(f"{name} {stored.get(name)!r} -> {wanted.get(name)!r}" for name in names)
