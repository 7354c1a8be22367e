"""A stage's one declaration: :class:`StageSpec`, everything the rest of the package knows of it.

A stage is its behaviour (a :class:`~streams.runtime.stage.Stage`: ``store()`` and ``init``) and one
``StageSpec`` beside it, in its own package (``streams/stages/<name>/spec.py``), which
:mod:`streams.registry` lists. From the spec the command line makes the stage's command (worker and
``--offline``) and its extra commands, the runtime its :class:`~streams.runtime.topology.Topology`
(the topics it reads, writes and keeps internally), the metrics endpoint its default port,
``python -m streams lag`` the topics its group reads, and ``docs/gen_config_table.py`` its
settings table. ``cli.py`` and ``registry.py`` know no stage by name.

Declaring a spec is cheap: the stage's module is imported only when the stage is built, so
``python -m streams --help`` or a command of another stage does not pay for numpy or the compiled
URL code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from streams import config
from streams.config import RuntimeSettings
from streams.runtime.api import InternalTopic, Stage, Topology
from streams.topics import Topics

Options = Callable[[argparse.ArgumentParser], None]


def no_options(command: argparse.ArgumentParser) -> None:
    """A stage (or command) with no options of its own."""


def no_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {}


def no_renames(args: argparse.Namespace) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Command:
    """A command of a stage besides its worker (``url-dedup-migrate``): its parser and what it runs.

    ``section``: where it is listed, with the commands that manage a stage's state (``state``, beside
    ``reshard``) or with the tools (``tool``, beside ``lag`` and ``tail``).
    """

    name: str
    help: str
    description: str
    options: Options
    run: Callable[[StageSpec, argparse.Namespace], int]
    section: Literal["state", "tool"]


@dataclass(frozen=True)
class EventCounter:
    """A count a stage keeps beside its decisions (``context.events[event]``), exported as the
    counter ``crawl_dedup_<series>_total`` with ``help``."""

    event: str
    series: str
    help: str


@dataclass(frozen=True)
class LabelledCounter:
    """A count a stage keeps by label value (``context.counter(series)[value]``), exported as the
    counter ``crawl_dedup_<series>_total`` labelled ``label``, each of ``values`` at 0 from the start."""

    series: str
    label: str
    values: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class StageSpec:
    """What the rest of the package needs to know of a stage.

    - ``name``: its command, its metrics label, its group and internal topics; ``help`` (and
      ``description``) its command's.
    - ``inputs``, ``outputs``: the names of the shared topics it reads and writes
      (:meth:`streams.topics.Topics.named`); ``--offline`` writes what reaches the first output.
    - ``internal``: its internal topics (:class:`~streams.runtime.topology.InternalTopic`), which the
      runtime names, creates, changelogs and reshards.
    - ``build(settings, runtime)``: the stage, given its own settings (:meth:`load_settings`) and the
      runtime's.
    - ``settings_class`` (``"module:Class"``) and ``settings_section``: its own settings, read from
      that TOML section and ``STREAMS_<SECTION>_*`` (None: it has none).
    - ``options``: its worker command's own options, ``overrides`` maps them onto its settings;
      ``state_options``: those its state depends on (``reshard`` and its extra commands take them);
      ``topic_options`` and ``topic_names``: options naming its topics (listed first), and the topics
      they name, by declared name.
    - ``commands``: its extra commands (:class:`Command`); ``offline``: it has ``--offline``.
    - ``metrics_port``: its default Prometheus port; ``decisions``: the decisions it counts;
      ``labelled``: its counts by label value (:class:`LabelledCounter`: the page stage's racing
      copies);
      ``events``: its other counts (:class:`EventCounter`: the URL stage's ``forgotten`` and
      ``expired``), each a counter of :mod:`streams.ops.metrics`.
    - ``status_key(settings, url, crawl)``: the state key its state keeps a URL under, and the
      canonical URL it was made of (``crawl-dedup status`` asks the shard of that key); ``settings()``
      gives its own settings, loaded when first called (a settings class may import the whole
      stage); None when its state is not kept by URL.
    """

    name: str
    help: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    build: Callable[[Any, RuntimeSettings], Stage]
    metrics_port: int
    internal: tuple[InternalTopic, ...] = (InternalTopic("shards"),)
    decisions: tuple[str, ...] = ()
    labelled: tuple[LabelledCounter, ...] = ()
    events: tuple[EventCounter, ...] = ()
    status_key: Callable[[Callable[[], Any], str, str], tuple[bytes, str]] | None = None
    settings_class: str | None = None
    settings_section: str | None = None
    options: Options = no_options
    overrides: Callable[[argparse.Namespace], dict[str, Any]] = no_overrides
    state_options: Options = no_options
    topic_options: Options = no_options
    topic_names: Callable[[argparse.Namespace], Mapping[str, str]] = no_renames
    commands: tuple[Command, ...] = ()
    offline: bool = True
    description: str | None = None

    def settings_type(self) -> type[Any] | None:
        if self.settings_class is None:
            return None
        module, _, name = self.settings_class.partition(":")
        found: type[Any] = getattr(importlib.import_module(module), name)
        return found

    def load_settings(self, args: argparse.Namespace) -> Any:
        """Its own settings: its TOML section and environment, its command-line options over them."""
        settings_type = self.settings_type()
        if settings_type is None or self.settings_section is None:
            return None
        return config.load(settings_type, self.settings_section, getattr(args, "config", None),
                           **self.overrides(args))

    def topics(self, prefix: str, args: argparse.Namespace) -> Topics:
        """The deployment's topic names, with those its options name."""
        return Topics(prefix, renamed=tuple(self.topic_names(args).items()))

    def topology(self, topics: Topics, app_id: str) -> Topology:
        """Its topics in application ``app_id`` (of the generation ``topics`` names)."""
        return Topology.of(self.name, topics, app_id, self.inputs, self.outputs, self.internal)

    def input_topics(self, topics: Topics) -> list[str]:
        return [topics.named(name) for name in self.inputs]

    def output_topics(self, topics: Topics) -> list[str]:
        return [topics.named(name) for name in self.outputs]
