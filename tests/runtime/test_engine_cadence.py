"""The engine's commit cadence (docs/decisions/0009-adaptive-cadence.md): what it asks the consumer
for, on an in-memory Kafka (``testing/memory_kafka.py``), so the calls are seen one by one.

A batch is what the client has fetched already; only when that is nothing does the worker wait, up to
``batch_max_wait_s``, and then for ONE record (librdkafka returns early only once ``limit`` records
are in, so waiting for a full batch held every sparse transaction the whole wait), taking what else
came with it. Under a backlog nothing is waited for and the batch is as large as what is there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from streams.config import RuntimeSettings
from streams.runtime.engine import Engine
from testing.memory_kafka import MemoryKafka
from testing.stages import EchoStage, running

LIMIT = 50
WAIT_S = 0.25
Call = tuple[int, float]


@contextmanager
def watched(arrive_while_waiting: int = 0) -> Iterator[tuple[Engine, MemoryKafka, list[Call]]]:
    """An engine whose consumer's ``consume`` calls are recorded; ``arrive_while_waiting`` records are
    written to the input when the engine starts to wait (as if they came during the wait)."""
    settings = RuntimeSettings(worker_id="w", shards=2, batch_max_messages=LIMIT, batch_max_wait_s=WAIT_S)
    with running(EchoStage(), settings=settings) as (engine, broker, _):
        calls: list[Call] = []
        consumer: Any = engine._consumer
        consume: Callable[..., list[Any]] = consumer.consume

        def recorded(limit: int, timeout: float) -> list[Any]:
            calls.append((limit, timeout))
            if timeout > 0:
                _write(broker, arrive_while_waiting)
            return consume(limit, timeout=timeout)

        consumer.consume = recorded
        yield engine, broker, calls


def _write(broker: MemoryKafka, count: int, partition: int = 0) -> None:
    for number in range(count):
        broker.append("in", partition, None, b'{"k": "k%d"}' % number)


def test_a_backlog_is_taken_at_once_without_waiting() -> None:
    with watched() as (engine, broker, calls):
        _write(broker, 30)
        assert engine.step() == "batch"
        assert calls == [(LIMIT, 0)]
        assert (engine.counters.consumed, engine.counters.batches) == (30, 1)


def test_a_backlog_larger_than_a_batch_is_cut_at_batch_max_messages() -> None:
    with watched() as (engine, broker, calls):
        _write(broker, LIMIT + 20)
        assert engine.step() == "batch"
        assert engine.counters.consumed_by_topic["in"] == LIMIT
        assert engine.step() == "batch"  # the rest, and the first batch's shard records: nothing waited for
        assert engine.counters.consumed_by_topic["in"] == LIMIT + 20
        assert calls == [(LIMIT, 0), (LIMIT, 0)]


def test_with_nothing_fetched_the_wait_is_for_one_record_then_the_rest_is_taken() -> None:
    with watched(arrive_while_waiting=3) as (engine, _, calls):
        assert engine.step() == "batch"
        assert calls == [(LIMIT, 0), (1, WAIT_S), (LIMIT - 1, 0)]
        assert (engine.counters.consumed, engine.counters.batches) == (3, 1)


def test_with_nothing_arriving_the_step_is_idle_after_one_wait() -> None:
    with watched() as (engine, _, calls):
        assert engine.step() == "idle"
        assert calls == [(LIMIT, 0), (1, WAIT_S)]
        assert engine.counters.batches == 0
