"""Command line: ``crawl-dedup <command>`` (the console script; ``python -m streams`` is the same).

Each command is a thin adapter: parse arguments, load settings at the edge, call the core or the
runtime. ``--help`` on every command lists its options.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from streams import config, registry
from streams.broker import kafka_command
from streams.broker.bootstrap import kafka_config
from streams.ops import logs
from streams.ops.logs import (
    DEFAULT_LOG_FORMAT,
    DEFAULT_LOG_LEVEL,
    LOG_FORMAT_ENV,
    LOG_FORMATS,
    LOG_LEVEL_ENV,
    LOG_LEVELS,
)
from streams.spec import StageSpec

if TYPE_CHECKING:
    from streams.runtime.admin import KafkaConfig
    from streams.runtime.api import PartitionStore, Stage, Topology
    from streams.runtime.snapshot import Published, WorkerObserver

Handler = Callable[[argparse.Namespace], int]


def _runtime_settings(args: argparse.Namespace) -> config.RuntimeSettings:
    return config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id,
                       worker_id=args.worker_id, state_dir=args.state_dir, shards=args.shards,
                       batch_max_messages=args.batch_max_messages)


def _topic_settings(args: argparse.Namespace) -> config.TopicSettings:
    return config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix)


def run_spec(spec: StageSpec, args: argparse.Namespace) -> int:
    """Run a registered stage as a worker, or ``--offline`` on standard input and output."""
    from streams.runtime.admin import run_stage
    from streams.runtime.snapshot import observing

    settings = _runtime_settings(args)
    topic_settings = _topic_settings(args)
    topics = spec.topics(topic_settings.prefix, args)
    offline = getattr(args, "offline", False)
    logs.bind(stage=spec.name, worker_id=settings.worker_id)
    if not offline:  # the stage's topics are those of its state's current generation
        from streams.runtime.admin import current_topics, reach_cluster

        kafka = kafka_config(args.config)
        reach_cluster(kafka)
        topics = current_topics(kafka, topics, settings.app_id, spec.name)
    stage = spec.build(spec.load_settings(args), settings)
    topology = spec.topology(topics, settings.app_id)
    if offline:
        with _offline_dir(args) as directory:
            path = directory / spec.name / "shard-0000"
            store = stage.store().open(path, 1, settings.rocksdb_block_cache_mb, settings.rocksdb_memtable_mb)
            return _offline(topology, stage, store)
    kafka, observer = _metrics(args, spec.name, kafka_config(args.config))
    run_stage(topology, stage, kafka, settings, topic_settings, idle_exit_s=args.idle_exit_s,
              observer=observing(observer) if observer is not None else None,
              generation=topics.generation(spec.name), drain=args.drain)
    return 0


def _metrics(args: argparse.Namespace, stage: str,
             kafka: KafkaConfig) -> tuple[KafkaConfig, Callable[[Published], WorkerObserver] | None]:
    """The worker's Prometheus endpoint (and /status) and lag thread, unless metrics are disabled;
    its port is bound now, before the worker joins its group, and its clients' ``client.id`` tells
    where it answers (``crawl-dedup status`` reads it from the group's description)."""
    settings = config.load(config.MetricsSettings, "metrics", args.config, port=args.metrics_port)
    if not settings.enabled:
        return kafka, None
    from streams.ops.metrics import MetricsEndpoint, bind_port
    from streams.ops.owners import advertised_client_id

    bound = bind_port(settings, stage)
    client_id = advertised_client_id(kafka.client.get("client.id") or f"crawl-dedup.{stage}", bound.address)
    advertised = dataclasses.replace(kafka, client={**kafka.client, "client.id": client_id})
    return advertised, lambda worker: MetricsEndpoint(settings, worker, bound)


@contextlib.contextmanager
def _offline_dir(args: argparse.Namespace) -> Iterator[Path]:
    """The offline state directory: ``--state-dir``, or a temporary one removed afterwards."""
    if args.state_dir is not None:
        yield Path(args.state_dir) / "offline"
        return
    with tempfile.TemporaryDirectory(prefix="streams-offline-") as scratch:
        yield Path(scratch)


def _offline(topology: Topology, stage: Stage, store: PartitionStore) -> int:
    from streams.runtime.admin import run_offline

    try:
        run_offline(topology, stage, store, sys.stdin.buffer)
    finally:
        store.close()
    return 0


def _reshard(stages: Sequence[StageSpec], args: argparse.Namespace) -> int:
    from streams.ops import reshard_command

    return reshard_command.run(next(each for each in stages if each.name == args.stage), args, args.shards)


def _demo(args: argparse.Namespace) -> int:
    from streams.dev import demo

    return demo.run()


def _add_worker_options(command: argparse.ArgumentParser, offline: bool = True) -> None:
    """Options every stage worker takes; unset ones come from settings (env, TOML, defaults)."""
    if offline:
        command.add_argument("--offline", action="store_true",
                             help="JSON lines on stdin -> JSON lines on stdout, no Kafka, same core code")
    command.add_argument("--state-dir", type=Path, default=None,
                         help="local state directory (offline: a temporary one when not given)")
    command.add_argument("--app-id", default=None, help="application id: names groups and internal topics")
    command.add_argument("--worker-id", default=None,
                         help="stable id of this worker (transactional id, static group membership)")
    command.add_argument("--shards", type=int, default=None, help="internal shard count (fixed per state)")
    command.add_argument("--topic-prefix", default=None, help="prefix of every topic name")
    command.add_argument("--batch-max-messages", type=int, default=None,
                         help="records per transaction at most (default 20000)")
    command.add_argument("--idle-exit-s", type=float, default=None,
                         help="exit after this many seconds without input (default: run until stopped; "
                              "with --drain, 10)")
    command.add_argument("--drain", action="store_true",
                         help="route each input partition only up to its end at assignment, decide "
                              "what was routed, then exit once idle: the stop before a reshard")
    command.add_argument("--metrics-port", type=int, default=None,
                         help="port of /metrics, /healthz and /readyz (default: the stage's own, "
                              "9410-9413; 0: any free port; a taken port is an error; host 127.0.0.1 "
                              "unless STREAMS_METRICS_HOST is set)")


def _add_reshard_command(commands: Any, stages: Sequence[StageSpec]) -> None:
    command = commands.add_parser(
        "reshard", help="move a stage's state to another shard count",
        description="Move a stage's state to another shard count; its workers must be drained "
                    "(--drain) and stopped first.")
    command.add_argument("--stage", required=True, choices=[spec.name for spec in stages])
    command.add_argument("--shards", type=int, required=True, help="the new shard count")
    command.add_argument("--app-id", default=None)
    command.add_argument("--topic-prefix", default=None)
    command.add_argument("--wait-s", type=float, default=60.0,
                         help="how long to wait for the stage's group to empty (default 60)")
    command.add_argument("--keep-old", action="store_true",
                         help="keep the old generation's shard topic and changelog (default: deleted)")
    added = []
    for spec in stages:  # the options the stages' states depend on: their identities
        if spec.cli.state_options not in added:
            spec.cli.state_options(command)
            added.append(spec.cli.state_options)
    command.set_defaults(handler=partial(_reshard, stages))


def add_stage_command(commands: Any, spec: StageSpec) -> None:
    """The stage's command: the options naming its topics, the worker options (``--offline``), and
    the stage's own options."""
    command = commands.add_parser(spec.name, help=spec.cli.help, description=spec.cli.description)
    spec.cli.topic_options(command)
    _add_worker_options(command, offline=spec.cli.offline)
    spec.cli.options(command)
    command.set_defaults(handler=partial(run_spec, spec))


def _add_spec_commands(commands: Any, stages: Sequence[StageSpec], section: str) -> None:
    """The stages' extra commands of one section (each run with its stage's spec)."""
    for spec in stages:
        for extra in spec.cli.commands:
            if extra.section == section:
                command = commands.add_parser(extra.name, help=extra.help, description=extra.description)
                extra.options(command)
                command.set_defaults(handler=partial(extra.run, spec))


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line and exit 2 (argparse prints the usage too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """``--config``, ``--log-level`` and ``--log-format``, accepted before and after the command: the
    subcommands take them too, with no default of their own, so one given before the command is
    not overwritten."""
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--config", type=Path, default=default(None),
                        help="TOML settings file (also STREAMS_CONFIG)")
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS,
                        default=default(os.environ.get(LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL).lower()),
                        help=f"what to log (default {DEFAULT_LOG_LEVEL}: a worker's lifecycle; or "
                             f"{LOG_LEVEL_ENV})")
    parser.add_argument("--log-format", type=str.lower, choices=LOG_FORMATS,
                        default=default(os.environ.get(LOG_FORMAT_ENV, DEFAULT_LOG_FORMAT).lower()),
                        help=f"text, or json: one object per line for log shippers (default "
                             f"{DEFAULT_LOG_FORMAT}, or {LOG_FORMAT_ENV})")


def _parser(stages: Sequence[StageSpec] = registry.ALL) -> argparse.ArgumentParser:
    parser = _Parser(prog=_prog(), description=DESCRIPTION,
                     epilog=f"Each command has its own --help. Start with: {_prog()} kafka start; "
                            f"{_prog()} demo.")
    parser.add_argument("--version", action=_Version, nargs=0, help="the version, build and tested pins")
    _add_global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    kafka_command.add_parser(commands)
    for spec in stages:  # the workers
        add_stage_command(commands, spec)
    _add_spec_commands(commands, stages, "state")  # what manages a stage's state
    _add_reshard_command(commands, stages)
    _add_spec_commands(commands, stages, "tool")  # the tools

    from streams.ops import lag_command, status_command

    lag_command.add_parser(commands)
    status_command.add_parser(commands)

    from streams.ops import replay, tail, warc_dedup

    replay.add_parser(commands)
    tail.add_parser(commands)
    warc_dedup.add_parser(commands)

    demo = commands.add_parser("demo", help="the stages end to end on a generated crawl")
    demo.set_defaults(handler=_demo)
    for command in commands.choices.values():
        _add_global_options(command, defaults=False)
    return parser


DESCRIPTION = ("Kafka-native de-duplication for web crawlers: which discovered URLs are new, which "
               "fetched pages are copies, when to fetch each URL again.")


def _prog() -> str:
    return "python -m streams" if Path(sys.argv[0]).name == "__main__.py" else "crawl-dedup"


class _Version(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from streams.version import version_text

        sys.stdout.write(version_text())
        parser.exit(0)


def main(argv: Sequence[str] | None = None, stages: Sequence[StageSpec] = registry.ALL) -> int:
    """Run a command; ``stages`` are the stage commands offered (a stage outside the package runs
    its own with ``main(stages=[its_spec])``, as tests/kafka/test_registry_kafka.py does)."""
    try:
        logs.env_choice(os.environ, LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL, LOG_LEVELS)
        logs.env_choice(os.environ, LOG_FORMAT_ENV, DEFAULT_LOG_FORMAT, LOG_FORMATS)
    except ValueError as error:
        print(f"{_prog()}: error: {error}", file=sys.stderr)
        return 2
    args = _parser(stages).parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - a command's last words, with what to do (streams.ops.logs)
        return logs.last_words(error, args.log_format)
