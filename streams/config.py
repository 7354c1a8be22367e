"""Typed settings, read at the edge: defaults in the dataclass, then a TOML file, then the environment.

Each component has one frozen dataclass; :func:`load` fills it. Environment variables are named
``STREAMS_<SECTION>_<FIELD>`` (``STREAMS_RUNTIME_SHARDS=16``); a TOML file (``STREAMS_CONFIG`` or
``--config``) has one table per section (``[runtime] shards = 16``). The environment wins, so a
container can override a mounted file.

Kafka client settings pass through untouched: every ``STREAMS_KAFKA_<NAME>`` variable becomes the
librdkafka property ``<name>`` lower-cased with ``_`` read as ``.``
(``STREAMS_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` -> ``security.protocol``), and a ``[kafka]`` TOML
table is passed as is. That is how SASL and TLS reach every client this project creates.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from streams.errors import ConfigError

ENV_PREFIX = "STREAMS_"
KAFKA_ENV_PREFIX = "STREAMS_KAFKA_"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

T = TypeVar("T")


@dataclass(frozen=True)
class RuntimeSettings:
    """How a stage worker consumes, commits and keeps state.

    ``shards`` is the partition count of each stage's internal re-keyed topic and changelog: state
    is partitioned by the stage's own key, so input topics can gain partitions freely, but this
    number is fixed for a generation of the state (a different value is refused at start); ``python
    -m streams reshard`` moves the state to another count (:mod:`streams.runtime.reshard`).

    ``batch_max_messages`` bounds a transaction: its commit waits for the broker to take every
    record produced in it, and the worker does nothing meanwhile, so the commit's fixed cost is
    paid per batch. 20,000 small records are about 0.2 s of a URL worker's work; a batch of pages
    is bounded well before that by the consumer's fetch queue and the page stage's intake.

    ``batch_max_wait_s`` is how long a worker with nothing fetched waits for its first record; a
    batch is then what is fetched with it, so a sparse load gets small, quick transactions and a
    backlog big ones (docs/decisions/0009-adaptive-cadence.md). It is not a wait for a batch to fill.

    ``standby_replicas``: how many other workers keep each shard's state warm by reading its
    changelog (:mod:`streams.runtime.standby`), so the worker that takes a lost owner's shards
    replays only their tail. Each standby costs a copy of the shard's state on that worker's disk
    and memory, and applying the shard's changelog as it is written (about a third of what deciding
    the records cost the owner, on the URL stage); 1 is enough for one lost worker at a time.

    ``session_timeout_s`` is how long the group waits for a silent worker before giving its shards
    to others (``session.timeout.ms``): the stall of a lost worker's shards is about this plus the
    takeover. Heartbeats come from librdkafka's own thread every ``heartbeat_interval_s``, whatever
    the worker's loop does, so only a stopped process misses them; the survivors hear of a lost
    worker's rebalance at their next heartbeat, so half a second (two small requests a second per
    worker) keeps that part of a stall under half a second (with 1 s, two runs of the same loss
    differed by up to 1.2 s). A broker refuses a session
    shorter than its ``group.min.session.timeout.ms`` (6 s by default). A restarted worker that
    returns within the session takes its shards back without a rebalance (static membership).

    ``restore_processes``: shards with no local state are rebuilt from their changelogs in this
    many processes at once (``auto``: one per usable core; 0 or 1: in the worker), when there is
    enough to replay (:mod:`streams.runtime.restore`).
    """

    app_id: str = "crawl-dedup"
    worker_id: str = field(default_factory=socket.gethostname)
    state_dir: Path = Path("state")
    shards: int = 8
    batch_max_messages: int = 20_000
    batch_max_wait_s: float = 0.25
    transaction_timeout_s: float = 30.0
    on_wedged: Literal["restart", "exit"] = "restart"
    dead_letter_max_value_bytes: int = 512 * 1024
    max_record_bytes: int = 16 * 1024 * 1024
    rocksdb_block_cache_mb: int = 64
    recovery_log_interval_s: float = 5.0
    rocksdb_memtable_mb: int = 64
    standby_replicas: int = 0
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 0.5
    restore_processes: int | Literal["auto"] = "auto"


@dataclass(frozen=True)
class MetricsSettings:
    """The worker's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for an
    orchestrator (:mod:`streams.ops.health`), and how often it measures consumer lag.

    ``port`` unset means the stage's own port (url-dedup 9410, content-seen 9411, revisit 9412);
    ``0`` means any free port, named in the worker's log. A port that is taken is
    a start-up error naming it: a worker that moved to another port would be scraped by no static
    scrape configuration. ``host`` stays on loopback unless configured (a container sets 0.0.0.0 so
    Prometheus can scrape it).

    ``stall_after_s``: ``/healthz`` answers 503 once the worker's main loop has shown no sign of
    life for this long. 90 s is longer than anything the loop may legitimately wait on: a batch part
    (a third of ``transaction_timeout_s``) and its commit (``transaction_timeout_s``), or fencing at
    start (twice that); and the worker's own watchdog restarts it 10 s past such a call's timeout,
    so an orchestrator acts only where the watchdog could not.
    """

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int | None = None
    lag_interval_s: float = 10.0
    stall_after_s: float = 90.0


@dataclass(frozen=True)
class TopicSettings:
    """Topic names (see :mod:`streams.topics`, the one place that builds them), and the topics a stage
    creates when they are missing.

    ``replication_factor`` and ``min_insync_replicas`` (None: the cluster's defaults, never below the
    input topics') are chosen and checked at start by :mod:`streams.runtime.replication`.
    """

    prefix: str = "crawl."
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    input_partitions: int = 8


def _convert(raw: Any, annotation: Any, name: str) -> Any:
    target = annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        named = [arg for arg in members if typing.get_origin(arg) is typing.Literal]
        if any(raw in typing.get_args(arg) for arg in named):  # int | Literal["auto"]: "auto" as it is
            return raw
        target = next(arg for arg in members if arg not in named)
        if named:
            try:
                return _convert(raw, target, name)
            except ConfigError:
                words = ", ".join(repr(value) for arg in named for value in typing.get_args(arg))
                raise ConfigError(f"setting {name}: cannot read {raw!r} as {target.__name__} or "
                                  f"{words}") from None
    if typing.get_origin(target) is typing.Literal:
        allowed = typing.get_args(target)
        if raw not in allowed:
            raise ConfigError(f"setting {name}: {raw!r} is not one of {', '.join(map(repr, allowed))}")
        return raw
    try:
        if typing.get_origin(target) is tuple:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(str(item).strip() for item in items if str(item).strip())
        if target is bool and isinstance(raw, str):
            if raw.lower() not in {"1", "0", "true", "false", "yes", "no", "on", "off"}:
                raise ValueError(raw)
            return raw.lower() in {"1", "true", "yes", "on"}
        if target is Path:
            return Path(raw)
        return target(raw)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"setting {name}: cannot read {raw!r} as {target.__name__}") from error


def load(cls: type[T], section: str, toml_path: Path | None = None,
         environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build settings ``cls`` from defaults, the TOML table ``[section]``, the environment, overrides."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    table = _toml_table(toml_path, environ, section)
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        env_name = f"{ENV_PREFIX}{section.upper()}_{spec.name.upper()}"
        if spec.name in overrides and overrides[spec.name] is not None:
            values[spec.name] = overrides[spec.name]
        elif env_name in environ:
            values[spec.name] = _convert(environ[env_name], hints[spec.name], env_name)
        elif spec.name in table:
            values[spec.name] = _convert(table[spec.name], hints[spec.name], f"[{section}] {spec.name}")
    names = {spec.name for spec in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(table) - names
    if unknown:
        raise ConfigError(f"unknown settings in [{section}]: {', '.join(sorted(unknown))}")
    prefix = f"{ENV_PREFIX}{section.upper()}_"
    misspelt = sorted(name for name in environ if name.startswith(prefix)
                      and name[len(prefix):].lower() not in names)
    if misspelt:  # a typo would otherwise leave the default in force without a word
        raise ConfigError(f"unknown settings in the environment: {', '.join(misspelt)}")
    return cls(**values)


def _toml_table(toml_path: Path | None, environ: Mapping[str, str], section: str) -> dict[str, Any]:
    path = toml_path or (Path(environ["STREAMS_CONFIG"]) if "STREAMS_CONFIG" in environ else None)
    if path is None:
        return {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from error
    table = document.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"[{section}] in {path} is not a table")
    return table


def kafka_client_settings(toml_path: Path | None = None,
                          environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka properties passed through to every client (security, SASL, TLS, tuning)."""
    environ = os.environ if environ is None else environ
    settings = _flatten(_toml_table(toml_path, environ, "kafka"))
    for name, value in environ.items():
        if name.startswith(KAFKA_ENV_PREFIX):
            settings[name[len(KAFKA_ENV_PREFIX):].lower().replace("_", ".")] = value
    return settings


def _flatten(table: Mapping[str, Any], stem: str = "") -> dict[str, str]:
    """``security.protocol = "SSL"`` unquoted is a nested table in TOML: join its keys with dots."""
    flat: dict[str, str] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{stem}{key}."))
        else:
            flat[f"{stem}{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return flat


def bootstrap_servers(environ: Mapping[str, str] | None = None) -> str | None:
    """The external cluster named by ``KAFKA_BOOTSTRAP_SERVERS``, or ``None`` for the local broker."""
    environ = os.environ if environ is None else environ
    value = environ.get(BOOTSTRAP_ENV, "").strip()
    return value or None
