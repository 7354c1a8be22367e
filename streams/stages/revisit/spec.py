"""The revisit stage's declaration: its topics and settings (:mod:`streams.spec`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams.config import RuntimeSettings
from streams.runtime.api import Stage
from streams.spec import CommandLine, Counts, OwnSettings, StageSpec


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    from streams.stages.revisit.stage import RevisitStage

    return RevisitStage(settings, runtime.max_record_bytes)


def _status_key(settings: Callable[[], Any], url: str, crawl: str) -> tuple[bytes, str]:
    """A URL's history is kept under the fingerprint of its canonical form by the stage's profile
    (the crawl's name is not part of it: a page's history spans crawls)."""
    from streams.urls.canonical import CanonicalSettings, canonicalize, fingerprint

    found = canonicalize(url, CanonicalSettings(profile=settings().profile))
    return fingerprint(found), found


SPEC = StageSpec(
    "revisit", inputs=("fetched-pages",), outputs=("revisit-updates",), build=_build,
    cli=CommandLine("page changes and each URL's next fetch time", metrics_port=9412,
                    status_key=_status_key),
    settings=OwnSettings("streams.stages.revisit.stage:RevisitSettings", "revisit"),
    counts=Counts(decisions=("changed", "unchanged", "first")))
