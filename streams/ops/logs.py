"""How a command logs: the level, the format (text for people, JSON lines for log shippers), and
the worker it speaks for.

The default level is ``info``, because a worker's lifecycle lines are info lines
(:mod:`streams.runtime.lifecycle`: start, assignment, recovery progress, ready, stop) and an
operator who starts a worker must see them without a flag; nothing logs at ``info`` per batch or
per record. ``STREAMS_LOG_LEVEL`` and ``STREAMS_LOG_FORMAT`` set both where a flag is awkward (a
container, a systemd unit); the flags win.

``json`` writes one object per line: ``time`` (UTC, RFC 3339), ``level``, ``logger``, ``stage``
and ``worker_id`` (once the worker set them, :func:`bind`), ``message`` (the same sentence the text
format prints) and ``fields``, the line's facts as values a shipper can index (what a lifecycle line
passes as ``extra={"fields": {...}}``), plus ``error`` with the traceback when there is one.

:func:`last_words` is what a command says when an error ends it: the error and what to do about it
(each :class:`~streams.errors.StreamsError` class's ``advice``), in either format.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import IO, Any, Final

import orjson
from confluent_kafka import KafkaException

from streams.errors import BrokerError, StreamsError
from streams.runtime.admin import error_text

LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS: Final = ("text", "json")
LOG_LEVEL_ENV: Final = "STREAMS_LOG_LEVEL"
LOG_FORMAT_ENV: Final = "STREAMS_LOG_FORMAT"
DEFAULT_LOG_LEVEL: Final = "info"
DEFAULT_LOG_FORMAT: Final = "text"

# Who is speaking: set once a worker knows its stage and id, read by every record's filter.
_CONTEXT: dict[str, str] = {}
_INSTALLED: list[logging.Handler] = []


def bind(**context: str) -> None:
    """Name what every later line speaks for (``stage``, ``worker_id``)."""
    _CONTEXT.update(context)


def env_choice(environ: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    """The environment's value of ``name``, lower-cased; ``ValueError`` naming it when not a choice."""
    value = environ.get(name, default).strip().lower() or default
    if value not in choices:
        raise ValueError(f"{name}={environ[name]!r} is not one of {', '.join(choices)}")
    return value


class _Context(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.stage = _CONTEXT.get("stage", "")
        record.worker_id = _CONTEXT.get("worker_id", "")
        return True


class TextFormatter(logging.Formatter):
    """``time LEVEL [stage worker] logger: message`` (the bracket once a worker is bound)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(speaker)s%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        stage, worker = getattr(record, "stage", ""), getattr(record, "worker_id", "")
        record.speaker = f"[{stage} {worker}] " if stage or worker else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "stage": getattr(record, "stage", "") or None,
            "worker_id": getattr(record, "worker_id", "") or None,
            "message": record.getMessage(),
            "fields": getattr(record, "fields", None) or {},
        }
        if record.exc_info:
            document["error"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


def setup(level: str = DEFAULT_LOG_LEVEL, log_format: str = DEFAULT_LOG_FORMAT,
          stream: IO[str] | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (stderr) in ``log_format``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_Context())
    root = logging.getLogger()
    for previous in _INSTALLED:  # a second setup in one process (tests) replaces ours, no other
        root.removeHandler(previous)
    _INSTALLED[:] = [handler]
    root.addHandler(handler)
    root.setLevel(level.upper())


def last_words(error: Exception, log_format: str) -> int:
    """What a command says when an error ends it, and its exit status: a :class:`StreamsError` or a
    Kafka client error (the cluster unreachable, refusing, timing out) is one line with what to do
    (its class's ``advice``), status 2; anything else is unexpected: its traceback goes through the
    log (so the JSON format carries it too), status 1."""
    if isinstance(error, KafkaException):
        error = BrokerError(f"Kafka: {error_text(error)}")
    if not isinstance(error, StreamsError):
        logging.getLogger("streams").critical(
            "unexpected error (what to do: start the command again; a worker resumes from its last "
            "commit and loses nothing; report this traceback)", exc_info=error,
            extra={"fields": {"event": "fatal", "error": type(error).__name__}})
        return 1
    if log_format == "json":
        logging.getLogger("streams").critical("%s", error, extra={"fields": {
            "event": "fatal", "error": type(error).__name__, "what_to_do": error.advice}})
    else:
        print(f"error: {error}" + (f" (what to do: {error.advice})" if error.advice else ""), file=sys.stderr)
    return 2
