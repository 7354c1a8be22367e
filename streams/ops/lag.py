"""Consumer lag: how far each stage's consumer group is behind the end of the topics it reads.

Lag is measured the way kafka_exporter measures it: for each partition, the end offset minus the
group's committed offset. The end offset
is asked for at ``read_committed`` (the last stable offset, KIP-98): records of open transactions
cannot be consumed yet and are not counted as lag. Transactional topics (the shard topics) keep one
commit marker after the last record, so a fully caught-up group shows a lag of 1 on such a partition,
exactly as kafka_exporter shows it. A partition the group never committed counts from the log start,
which is where the stages begin (``auto.offset.reset=earliest``).

Used twice: by every worker (a background thread measures every partition its group reads and
serves ``crawl_dedup_consumer_lag_records``, :mod:`streams.ops.metrics`) and by ``crawl-dedup lag``
(every stage group of an app, with or without running workers; ``--max-lag`` for cron and CI).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported in the typed stubs

from streams.errors import BrokerError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed here
    start: int
    end: int

    @property
    def lag(self) -> int:
        position = self.start if self.committed is None else max(self.committed, self.start)
        return max(self.end - position, 0)


def group_lag(admin: AdminClient, reader: Consumer, group: str, partitions: Sequence[tuple[str, int]],
              timeout_s: float = 10.0) -> list[PartitionLag]:
    """Lag of ``group`` on each ``(topic, partition)``.

    ``reader`` is a consumer configured with the group's id that never subscribes (so it never
    joins the group): its ``committed()`` reads the group's offsets. The admin client's
    ``list_consumer_group_offsets`` would do the same in one call, but librdkafka 2.16 crashes the
    process in it when the coordinator moves (a broker restart: librdkafka #5040, seen as SIGSEGV
    in workers), and a metrics thread must never take its worker down.
    """
    if not partitions:
        return []
    wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
    try:
        committed = _committed(reader, wanted, timeout_s)
        starts = _offsets(admin, wanted, OffsetSpec.earliest(), timeout_s)  # type: ignore[no-untyped-call]
        ends = _offsets(admin, wanted, OffsetSpec.latest(), timeout_s)  # type: ignore[no-untyped-call]
    except (KafkaException, FutureTimeout) as error:
        raise BrokerError(f"cannot measure the lag of {group}: {error!r}") from error
    return [PartitionLag(group, topic, partition, committed.get((topic, partition)),
                         starts[(topic, partition)], ends[(topic, partition)])
            for topic, partition in partitions]


def _committed(reader: Consumer, wanted: list[TopicPartition],
               timeout_s: float) -> dict[tuple[str, int], int]:
    found = reader.committed(wanted, timeout=timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def _offsets(admin: AdminClient, wanted: list[TopicPartition], spec: OffsetSpec,
             timeout_s: float) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets({tp: spec for tp in wanted}, request_timeout=timeout_s,
                                 isolation_level=IsolationLevel.READ_COMMITTED)
    return {(tp.topic, tp.partition): future.result(timeout_s).offset for tp, future in futures.items()}


def topic_partitions(admin: AdminClient, topics: Iterable[str],
                     timeout_s: float = 10.0) -> list[tuple[str, int]]:
    """Every partition of the topics that exist (a stage that never ran has no shard topic yet)."""
    found: list[tuple[str, int]] = []
    metadata = admin.list_topics(timeout=timeout_s).topics
    for topic in topics:
        if topic in metadata:
            found.extend((topic, partition) for partition in sorted(metadata[topic].partitions))
    return found


class LagMonitor:
    """Measures a worker's lag every ``interval_s`` in a daemon thread and hands it to ``report``.

    A thread of its own, with its own admin client, so a slow or unreachable broker delays the
    gauges, never the stage. ``partitions`` is called at each round, in this thread: the workers
    measure every partition of their group's topics, so the partitions of a worker that died stay
    measured by the others.
    """

    def __init__(self, admin: AdminClient, reader: Consumer, group: str,
                 partitions: Callable[[], Sequence[tuple[str, int]]],
                 report: Callable[[list[PartitionLag]], None], interval_s: float) -> None:
        self._admin, self._reader, self._group, self._partitions = admin, reader, group, partitions
        self._report, self._interval_s = report, interval_s
        self._stop = threading.Event()
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name=f"lag-{group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._interval_s + 15)
        self._reader.close()

    def measure_once(self) -> None:
        try:
            self._report(group_lag(self._admin, self._reader, self._group, self._partitions()))
        except Exception:  # noqa: BLE001 - the thread must outlive a broker outage; next round retries
            self.errors += 1
            log.debug("lag measurement failed", exc_info=True)

    def _run(self) -> None:
        self.measure_once()  # at once: the series exist from the worker's first scrape on
        while not self._stop.wait(self._interval_s):
            self.measure_once()
