"""librdkafka's own log lines, through Python's logging: the worker's format, once per message.

Without a ``logger`` in its configuration, librdkafka writes its log lines straight to stderr
(``%3|1795695170.588|FAIL|rdkafka#producer-1| ...``), past the worker's log format (text or JSON
lines, streams/ops/logs.py), and repeats a failing connection's line at every retry, burying a
command's one ``error:`` line under hundreds of them while a cluster is down. confluent-kafka
hands these lines to a Python logger instead when the configuration names one (the ``logger``
property, served from the client's poll/consume calls), as ``logger.log(level, "%s [%s] %s",
facility, client, message)``. :data:`CLIENT_LOG` is that logger; its
:class:`RepeatsDemoted` filter keeps the first line of each kind at its level and lowers the same
line again within ``repeat_s`` (digits aside: the retry counts and timings change) to DEBUG, so an
operator sees that a broker is unreachable once, and ``--log-level debug`` still shows every attempt.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Final

_DIGITS: Final = re.compile(r"\d+")


class RepeatsDemoted(logging.Filter):
    """Lowers to DEBUG a librdkafka line whose facility and text (digits aside) were logged at their
    own level less than ``repeat_s`` ago."""

    def __init__(self, repeat_s: float = 60.0) -> None:
        super().__init__()
        self.repeat_s = repeat_s
        self._last_s: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or not isinstance(record.args, tuple) or len(record.args) != 3:
            return True
        facility, _client, text = record.args
        key = (str(facility), _DIGITS.sub("#", str(text)))
        now = time.monotonic()
        last = self._last_s.get(key)
        if last is None or now - last >= self.repeat_s:
            self._last_s[key] = now
            return True
        # The logger let the line through at its own level; as a repeat it is DEBUG, shown only where
        # debug lines are (a handler at NOTSET would otherwise print it anyway).
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def error_text(error: Exception) -> str:
    """What a Kafka client's exception says in librdkafka's own words (its ``KafkaError.str()``:
    ``Failed to get metadata: Local: Broker transport failure``), else the exception's text."""
    first: Any = error.args[0] if error.args else None
    return str(first.str()) if hasattr(first, "str") else str(error)


CLIENT_LOG: Final = logging.getLogger("streams.kafka.librdkafka")
CLIENT_LOG.addFilter(RepeatsDemoted())
