"""The stages: the one list the commands, metrics, lag, docs and demo read.

Each stage declares itself in one :class:`~streams.spec.StageSpec`, in its own package
(``streams/stages/<name>/spec.py``); this module only lists them, in the order the command line
shows them, and knows none of their facts. :func:`streams.cli.main` runs a spec from outside the
package the same way (``tests/kafka/test_registry_kafka.py`` does, with a stage of its own).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Final

from streams.spec import StageSpec

SPEC_MODULES: Final = ("streams.stages.url_dedup.spec", "streams.stages.content_seen.spec",
                       "streams.stages.revisit.spec")

ALL: Final[Sequence[StageSpec]] = tuple(importlib.import_module(name).SPEC for name in SPEC_MODULES)
STAGES: Final[Sequence[StageSpec]] = ALL  # the crawl's stages: every one registered


def spec(name: str) -> StageSpec:
    """The registered stage called ``name``."""
    return next(each for each in ALL if each.name == name)


def metrics_ports() -> dict[str, int]:
    """Each stage's default Prometheus port."""
    return {each.name: each.cli.metrics_port for each in ALL}
