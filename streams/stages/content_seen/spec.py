"""The page stage's declaration: its topics, internal topic and settings (:mod:`streams.spec`).

One internal topic, ``shards``, carrying the typed records of its scatter and gather
(:mod:`streams.stages.content_seen.shard_records` says why one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams.config import RuntimeSettings
from streams.runtime.api import InternalTopic, Stage
from streams.spec import CommandLine, Counts, LabelledCounter, OwnSettings, StageSpec

RECORDS = "streams.stages.content_seen.shard_records"


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    from streams.stages.content_seen.stage import ContentSeenStage

    return ContentSeenStage(settings, runtime.max_record_bytes)


def _status_key(settings: Callable[[], Any], url: str, crawl: str) -> tuple[bytes, str]:
    """A URL's last verdict is kept under the fingerprint of its canonical form by the default rules
    (:mod:`streams.stages.content_seen.last_verdicts`)."""
    from streams.urls.canonical import canonicalize, fingerprint

    found = canonicalize(url)
    return fingerprint(found), found


SPEC = StageSpec(
    "content-seen", inputs=("fetched-pages",), outputs=("page-verdicts", "unique-pages"), build=_build,
    cli=CommandLine("a verdict for every page; each content once", metrics_port=9411,
                    status_key=_status_key),
    # Arrivals, probes and vouched progress (tags 0, 1, 8 and 12: PageWaits, Probe, PayloadProbe,
    # VouchedProgress) take the runtime's local path; replies, notices, marks and progress records
    # go through the topic unless the stage's vouching says otherwise (streams.stages.content_seen.local).
    internal=(InternalTopic("shards", f"{RECORDS}:RECORDS", local=frozenset({0, 1, 8, 12})),),
    settings=OwnSettings("streams.stages.content_seen.stage:ContentSeenSettings", "content_seen"),
    counts=Counts(decisions=("unique", "exact", "near", "skipped"), labelled=(
        LabelledCounter("race_matches", "event", ("in_time", "late"),
                        "content-seen: earlier pages a probe met after the later page was probed: in "
                        "time for its verdict, or late (its verdict stands)"),)))
