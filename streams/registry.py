"""The stages, one :class:`StageSpec` each: the one list the commands, metrics, lag, docs and demo read.

A stage is its module (a :class:`~streams.runtime.stage.Stage`: two steps, ``needs()`` and
``bind``), its record schemas in ``schemas/``, and its entry in :data:`STAGES`. From the entry the
command line makes its command (``python -m streams <name>``, worker and ``--offline``), the metrics
endpoint its default port, ``python -m streams lag`` the topics its group reads, and
``docs/gen_config_table.py`` its option table. :func:`streams.cli.run_spec` runs a spec from outside
the package the same way (``tests/test_registry_kafka.py`` does, with a stage of its own).

Stage modules are imported only when their stage runs: ``python -m streams --help`` or a command of
another stage does not pay for numpy or the compiled URL code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from streams.config import RuntimeSettings
from streams.runtime.stage import Stage
from streams.topics import Topics


@dataclass(frozen=True)
class StageSpec:
    """What the rest of the package needs to know of a stage.

    - ``name``: the stage's name: its command, its metrics label, its group and internal topics.
    - ``inputs`` and ``outputs``: its topics; ``--offline`` writes what reaches ``outputs[0]``.
    - ``build(topics, runtime, settings)``: the stage, given its own settings (:meth:`settings`).
    - ``settings_class`` (``"module:Class"``) and ``settings_section``: its own settings, read from
      that TOML section and ``STREAMS_<SECTION>_*`` (None: it has none).
    - ``options`` adds its own command-line options; ``overrides`` maps them onto its settings.
    - ``metrics_port``: its default Prometheus port; ``decisions``: the decisions it counts.
    """

    name: str
    help: str
    inputs: Callable[[Topics], list[str]]
    outputs: Callable[[Topics], list[str]]
    build: Callable[[Topics, RuntimeSettings, Any], Stage]
    metrics_port: int
    decisions: tuple[str, ...] = ()
    settings_class: str | None = None
    settings_section: str | None = None
    options: Callable[[argparse.ArgumentParser], None] | None = None
    overrides: Callable[[argparse.Namespace], dict[str, Any]] = field(default=lambda args: {})

    def settings_type(self) -> type[Any] | None:
        if self.settings_class is None:
            return None
        module, _, name = self.settings_class.partition(":")
        found: type[Any] = getattr(importlib.import_module(module), name)
        return found


def _url_dedup(topics: Topics, runtime: RuntimeSettings, settings: Any) -> Stage:
    from streams.stages.url_dedup.stage import UrlDedupStage

    return UrlDedupStage(topics, runtime.app_id, settings, runtime.max_record_bytes)


def _content_seen(topics: Topics, runtime: RuntimeSettings, settings: Any) -> Stage:
    from streams.stages.content_seen.stage import ContentSeenStage

    return ContentSeenStage(topics, runtime.app_id, settings, runtime.max_record_bytes)


def _revisit(topics: Topics, runtime: RuntimeSettings, settings: Any) -> Stage:
    from streams.stages.revisit.stage import RevisitStage

    return RevisitStage(topics, runtime.app_id, settings, runtime.max_record_bytes)


def add_url_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--profile", choices=["safe", "aggressive"], default=None,
                         help="canonicalization profile (default safe; rules in docs/canonicalization.md)")


def url_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"profile": getattr(args, "profile", None), "seen_set": getattr(args, "seen_set", None)}


def _url_dedup_options(command: argparse.ArgumentParser) -> None:
    add_url_options(command)
    command.add_argument("--seen-set", choices=["exact", "bloom"], default=None,
                         help="exact: RocksDB set behind a Bloom filter (default); "
                              "bloom: a Bloom filter only")


STAGES: Final[Sequence[StageSpec]] = (
    StageSpec("url-dedup", "emit each new frontier URL once",
              inputs=lambda topics: [topics.frontier], outputs=lambda topics: [topics.new_urls],
              build=_url_dedup, metrics_port=9410, decisions=("new", "seen"),
              settings_class="streams.stages.url_dedup.settings:UrlDedupSettings",
              settings_section="url_dedup",
              options=_url_dedup_options, overrides=url_overrides),
    StageSpec("content-seen", "a verdict for every page; each content once",
              inputs=lambda topics: [topics.fetched_pages],
              outputs=lambda topics: [topics.page_verdicts, topics.unique_pages],
              build=_content_seen, metrics_port=9411, decisions=("unique", "exact", "near", "skipped"),
              settings_class="streams.stages.content_seen.stage:ContentSeenSettings",
              settings_section="content_seen"),
    StageSpec("revisit", "page changes and each URL's next fetch time",
              inputs=lambda topics: [topics.fetched_pages], outputs=lambda topics: [topics.revisit_updates],
              build=_revisit, metrics_port=9412, decisions=("changed", "unchanged", "first"),
              settings_class="streams.stages.revisit.stage:RevisitSettings", settings_section="revisit"),
)

FIRST_SEEN_METRICS_PORT: Final = 9413  # the runtime's minimal processor (python -m streams first-seen)


def spec(name: str) -> StageSpec:
    """The registered stage called ``name``."""
    return next(each for each in STAGES if each.name == name)


def metrics_ports() -> dict[str, int]:
    """Each stage's default Prometheus port."""
    return {**{each.name: each.metrics_port for each in STAGES}, "first-seen": FIRST_SEEN_METRICS_PORT}
