"""A stage's one declaration: :class:`StageSpec`, everything the rest of the package knows of it.

A stage is its behaviour (a :class:`~streams.runtime.stage.Stage`: ``store()`` and ``init``) and one
``StageSpec`` beside it, in its own package (``streams/stages/<name>/spec.py``), which
:mod:`streams.registry` lists: its name and topics, how it is built, its own settings
(:class:`OwnSettings`), what it counts (:class:`Counts`) and its command line
(:class:`CommandLine`). From the spec the command line makes the stage's command (worker and
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
from typing import Any, Final, Literal

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
class Counts:
    """What a stage counts, each a counter of :mod:`streams.ops.metrics`: ``decisions`` (the
    decisions it takes, ``crawl_dedup_decisions_total{decision}``), ``labelled`` (its counts by
    label value, :class:`LabelledCounter`: the page stage's racing copies) and ``events`` (its
    other counts, :class:`EventCounter`: the URL stage's ``forgotten`` and ``expired``)."""

    decisions: tuple[str, ...] = ()
    labelled: tuple[LabelledCounter, ...] = ()
    events: tuple[EventCounter, ...] = ()


NO_COUNTS: Final = Counts()


@dataclass(frozen=True)
class OwnSettings:
    """A stage's own settings: the class (``"module:Class"``, imported when first asked for: a
    settings class may import the whole stage), read from the TOML section ``section`` and
    ``STREAMS_<SECTION>_*``."""

    class_path: str
    section: str

    def type(self) -> type[Any]:
        module, _, name = self.class_path.partition(":")
        found: type[Any] = getattr(importlib.import_module(module), name)
        return found


@dataclass(frozen=True)
class CommandLine:
    """A stage's command line: its worker command and what else it offers an operator.

    - ``help`` (and ``description``): its worker command's; ``offline``: it has ``--offline``;
      ``metrics_port``: the worker's default Prometheus port.
    - ``options``: its worker command's own options, ``overrides`` maps them onto its settings;
      ``state_options``: those its state depends on (``reshard`` and its extra commands take them);
      ``topic_options`` and ``topic_names``: options naming its topics (listed first), and the
      topics they name, by declared name.
    - ``commands``: its extra commands (:class:`Command`).
    - ``status_key(settings, url, crawl)``: the state key its state keeps a URL under, and the
      canonical URL it was made of (``crawl-dedup status`` asks the shard of that key); ``settings()``
      gives its own settings, loaded when first called; None when its state is not kept by URL.
    """

    help: str
    metrics_port: int
    description: str | None = None
    offline: bool = True
    options: Options = no_options
    overrides: Callable[[argparse.Namespace], dict[str, Any]] = no_overrides
    state_options: Options = no_options
    topic_options: Options = no_options
    topic_names: Callable[[argparse.Namespace], Mapping[str, str]] = no_renames
    commands: tuple[Command, ...] = ()
    status_key: Callable[[Callable[[], Any], str, str], tuple[bytes, str]] | None = None


@dataclass(frozen=True)
class StageSpec:
    """What the rest of the package needs to know of a stage.

    - ``name``: its command, its metrics label, its group and internal topics.
    - ``inputs``, ``outputs``: the names of the shared topics it reads and writes
      (:meth:`streams.topics.Topics.named`); ``--offline`` writes what reaches the first output.
    - ``build(settings, runtime)``: the stage, given its own settings (:meth:`load_settings`) and the
      runtime's.
    - ``cli``: its command line (:class:`CommandLine`).
    - ``internal``: its internal topics (:class:`~streams.runtime.topology.InternalTopic`), which the
      runtime names, creates, changelogs and reshards.
    - ``settings``: its own settings (:class:`OwnSettings`; None: it has none).
    - ``counts``: what it counts beside the runtime (:class:`Counts`).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    build: Callable[[Any, RuntimeSettings], Stage]
    cli: CommandLine
    internal: tuple[InternalTopic, ...] = (InternalTopic("shards"),)
    settings: OwnSettings | None = None
    counts: Counts = NO_COUNTS

    def settings_type(self) -> type[Any] | None:
        return None if self.settings is None else self.settings.type()

    def load_settings(self, args: argparse.Namespace) -> Any:
        """Its own settings: its TOML section and environment, its command-line options over them."""
        if self.settings is None:
            return None
        return config.load(self.settings.type(), self.settings.section, getattr(args, "config", None),
                           **self.cli.overrides(args))

    def topics(self, prefix: str, args: argparse.Namespace) -> Topics:
        """The deployment's topic names, with those its options name."""
        return Topics(prefix, renamed=tuple(self.cli.topic_names(args).items()))

    def topology(self, topics: Topics, app_id: str) -> Topology:
        """Its topics in application ``app_id`` (of the generation ``topics`` names)."""
        return Topology.of(self.name, topics, app_id, self.inputs, self.outputs, self.internal)

    def input_topics(self, topics: Topics) -> list[str]:
        return [topics.named(name) for name in self.inputs]

    def output_topics(self, topics: Topics) -> list[str]:
        return [topics.named(name) for name in self.outputs]
