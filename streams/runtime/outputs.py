"""What a batch may produce: each output checked against its topic's size limit before any of a
record's outputs is produced, the dead letter that replaces a record's outputs when it is bad, and
the count of every dead letter by reason, the engine's and a stage's own.

Apart from :mod:`streams.runtime.engine` because these are rules about records, not steps of a
transaction: the engine asks them once per record and never needs to know a topic's limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import orjson

from streams import records
from streams.errors import RecordRejected
from streams.runtime.batch import Emit
from streams.runtime.counters import Counters
from streams.runtime.kafka_io import CLIENT_MAX_MESSAGE_BYTES, RECORD_OVERHEAD
from streams.runtime.message import Message


class Outputs:
    """The size limits of a stage's output topics and the dead letters of its bad records."""

    def __init__(self, counters: Counters, stage_name: str, dead_letter_topic: str,
                 dead_letter_max_value_bytes: int, limits: Mapping[str, int] | None = None) -> None:
        """``limits``: the largest key plus value each topic takes (from
        :func:`~streams.runtime.topic_admin.output_limits`); other topics get librdkafka's default."""
        self._counters: Final = counters
        self._stage_name: Final = stage_name
        self.dead_letter_topic: Final = dead_letter_topic
        self._dead_letter_max_value_bytes: Final = dead_letter_max_value_bytes
        self._limits: Final = dict(limits or {})
        self._default_limit: Final = CLIENT_MAX_MESSAGE_BYTES - RECORD_OVERHEAD

    @property
    def largest_record_bytes(self) -> int:
        """The producer's ``message.max.bytes``: room for the largest record any topic takes."""
        return max([self._default_limit, *self._limits.values()]) + RECORD_OVERHEAD

    def check(self, emits: list[Emit]) -> None:
        """Refuse a record's output when any of it exceeds its topic's limit, before any is produced.

        Produced, it would fail: librdkafka refuses a record over ``message.max.bytes`` at once, and
        the broker one over the topic's ``max.message.bytes`` at commit, which aborts the batch; the
        batch would then be retried and fail again forever. A dead letter ``output_too_large``
        instead names the input record. State writes a shard record made before its output was
        refused stand (the decision was taken; only its output is missing, and the dead letter
        says so).

        A dead letter among the outputs is one the stage wrote itself beside a decision that stands
        (the page stage's ``page_unavailable``); once the outputs are accepted it is counted by its
        reason like the engine's own.
        """
        limits, default, dead_letter_topic = self._limits, self._default_limit, self.dead_letter_topic
        letters: list[Emit] | None = None
        for emit in emits:
            size = len(emit.value or b"") + len(emit.key or b"")
            limit = limits.get(emit.topic, default)
            if size > limit:
                raise RecordRejected("output_too_large", f"a record of {size} bytes for {emit.topic}, "
                                                         f"whose limit is {limit} bytes")
            if emit.topic == dead_letter_topic:
                letters = [emit] if letters is None else [*letters, emit]
        if letters is not None:
            for letter in letters:
                self._count(_reason(letter.value or b""))

    def dead_letter(self, message: Message, reason: str, detail: str) -> Emit:
        """The dead letter of ``message``: the reason, its original bytes, where it was read."""
        self._count(reason)
        value = records.dead_letter(
            reason=reason, detail=detail, stage=self._stage_name, topic=message.topic() or "",
            partition=message.partition() or 0, offset=message.offset() or 0,
            key=message.key(), value=message.value(),
            max_value_bytes=self._dead_letter_max_value_bytes,
        )
        return Emit(self.dead_letter_topic, value, message.key())

    def _count(self, reason: str) -> None:
        counters = self._counters
        counters.dead_letters += 1
        by_reason = counters.dead_letters_by_reason
        by_reason[reason] = by_reason.get(reason, 0) + 1


def _reason(letter: bytes) -> str:
    """The ``reason`` of a dead letter :func:`streams.records.dead_letter` wrote."""
    decoded = orjson.loads(letter)
    reason = decoded.get("reason") if isinstance(decoded, dict) else None
    return reason if isinstance(reason, str) else "unknown"
