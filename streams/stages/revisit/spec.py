"""The revisit stage's declaration: its topics and settings (:mod:`streams.spec`)."""

from __future__ import annotations

from typing import Any

from streams.config import RuntimeSettings
from streams.runtime.api import Stage
from streams.spec import StageSpec


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    from streams.stages.revisit.stage import RevisitStage

    return RevisitStage(settings, runtime.max_record_bytes)


SPEC = StageSpec(
    "revisit", "page changes and each URL's next fetch time", inputs=("fetched-pages",),
    outputs=("revisit-updates",), build=_build, metrics_port=9412,
    decisions=("changed", "unchanged", "first"),
    settings_class="streams.stages.revisit.stage:RevisitSettings", settings_section="revisit")
