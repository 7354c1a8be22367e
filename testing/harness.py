"""Shared by the benchmarks and the crash tests: produce a keyed stream, run a worker, SIGKILL it at
chosen points of its progress, and read the output back with ``isolation.level=read_committed``.

Kill points are drawn as random *progress targets* (committed input offsets), not random times, so
the kills are spread over the whole stream instead of piling up in start-up; each kill waits a
further random fraction of a second so it lands mid-batch, mid-commit or mid-recovery as it falls.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams import config
from streams.broker import kafka_local
from streams.errors import RuntimeFailure
from streams.runtime.kafka_io import KafkaConfig, produce_all, read_from, read_to_end

# The workers a benchmark starts serve metrics on any free port: several run at once, and a taken
# port is a start-up error (a worker never moves to another port by itself).
os.environ.setdefault("STREAMS_METRICS_PORT", "0")

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def broker() -> KafkaConfig:
    """The benchmarks' broker: ``KAFKA_BOOTSTRAP_SERVERS`` with the configured client settings, else
    the project's local broker, started when it is not running."""
    bootstrap = config.bootstrap_servers() or kafka_local.start(kafka_local.LocalBroker())
    return KafkaConfig(bootstrap, config.kafka_client_settings())


def fresh_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(kafka: KafkaConfig, names: Iterable[str], partitions: int, exist_ok: bool = False) -> None:
    admin = AdminClient(kafka.admin())
    futures = admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    for future in futures.values():
        try:
            future.result()
        except KafkaException as error:
            if not (exist_ok and error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise


def wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> None:
    """Poll ``condition`` until it holds; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met in {timeout_s} s")
        time.sleep(poll_s)


def keyed_stream(distinct: int, total: int, seed: int = 7) -> list[bytes]:
    """``total`` keys over ``distinct`` values: every value at least once, the rest repeats."""
    rng = random.Random(seed)
    keys = [b"k%09d" % i for i in range(distinct)]
    keys += [b"k%09d" % rng.randrange(distinct) for _ in range(total - distinct)]
    rng.shuffle(keys)
    return keys


produce = produce_all  # one producer loop for the demo, the benchmarks and the tests


def read_all(kafka: KafkaConfig, topic: str, idle_s: float = 3.0,
             value_of: Callable[[bytes | None, bytes | None], bytes | None] | None = None) -> Counter[bytes]:
    """Count each key (or ``value_of(key, value)``) on ``topic``, read_committed, until every
    partition reached its end and nothing new arrived for ``idle_s``."""
    counts: Counter[bytes] = Counter()
    for message in read_to_end(kafka, topic, idle_s):
        item = message.key() if value_of is None else value_of(message.key(), message.value())
        if item is not None:
            counts[item] += 1
    return counts


def end_offsets(kafka: KafkaConfig, topic: str) -> int:
    """Sum of ``topic``'s end offsets over its partitions (records and transaction markers)."""
    consumer = Consumer(kafka.consumer(fresh_name("ends")))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in partitions)
    finally:
        consumer.close()


def seconds_until_settled(kafka: KafkaConfig, topic: str, timeout_s: float = 300.0) -> float:
    """Wait until no transaction is open on ``topic`` (every partition's last stable offset, what a
    read_committed reader may read up to, is its end); return the seconds waited.

    A worker killed in a transaction leaves it open until its successor fences it (same
    ``transactional.id``) or the broker aborts it at ``transaction.timeout.ms``; meanwhile
    read_committed readers see nothing written after it began, committed or not. Reading before
    then would count those records as lost. Raises ``TimeoutError`` past ``timeout_s``.
    """
    began = time.monotonic()
    committed = Consumer(kafka.consumer(fresh_name("lso"), **{"isolation.level": "read_committed"}))
    uncommitted = Consumer(kafka.consumer(fresh_name("hwm"), **{"isolation.level": "read_uncommitted"}))
    try:
        partitions = committed.list_topics(topic, timeout=10).topics[topic].partitions
        while True:
            tps = [TopicPartition(topic, p) for p in partitions]
            if all(committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                   == uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps):
                return time.monotonic() - began
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"a transaction on {topic} stayed open for {timeout_s} s")
            time.sleep(0.5)
    finally:
        committed.close()
        uncommitted.close()


def committed_total(kafka: KafkaConfig, group: str, topic: str, partitions: int) -> int:
    """Sum of the group's committed offsets on ``topic`` (its progress)."""
    consumer = Consumer(kafka.consumer(group))
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in found)


class CommittedOffsets:
    """The group's committed offsets on some topics, asked often: one client for every call (a
    client made per call costs a connection and a coordinator lookup, 0.1-0.3 s, which a rate
    measured to the last commit would count as the worker's)."""

    def __init__(self, kafka: KafkaConfig, group: str, topics: Sequence[str]) -> None:
        self._consumer = Consumer(kafka.consumer(group))  # only reads the group's commits
        self._topics = topics
        self._partitions: list[TopicPartition] = []

    def positions(self) -> tuple[int, ...]:
        """The committed offsets, partition by partition (a worker may create the topics: they are
        listed at the first call)."""
        if not self._partitions:
            found = self._consumer.list_topics(timeout=10).topics
            self._partitions = [TopicPartition(topic, p) for topic in self._topics
                                for p in sorted(found[topic].partitions)]
        return tuple(tp.offset for tp in self._consumer.committed(self._partitions, timeout=10))

    def total(self) -> int:
        """:func:`committed_total` of the topics."""
        return sum(max(offset, 0) for offset in self.positions())

    def __enter__(self) -> CommittedOffsets:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()


def caught_up(kafka: KafkaConfig, group: str, topic: str, timeout_s: float = 30.0) -> bool:
    """Whether ``group`` committed every partition of ``topic`` past its last committed record.

    Read, not computed from offsets: past the last record of a transactional partition come one
    commit (or abort) marker per transaction that wrote to it, so with several writers the end may
    lie several offsets beyond the committed position (two workers both write every shard partition
    of the page stage). A read_committed reader started at the group's committed offsets must meet
    the end of every partition without a record, within ``timeout_s``.
    """
    group_view = Consumer(kafka.consumer(group))  # only reads the group's commits, never joins it
    try:
        partitions = group_view.list_topics(topic, timeout=10).topics[topic].partitions
        committed = group_view.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    except KafkaException:
        return False
    finally:
        group_view.close()
    return _nothing_after(kafka, committed, timeout_s)


def _nothing_after(kafka: KafkaConfig, positions: list[TopicPartition], timeout_s: float) -> bool:
    # No committed offset (OFFSET_INVALID, -1001): from the beginning.
    starts = [TopicPartition(tp.topic, tp.partition, max(tp.offset, OFFSET_BEGINNING)) for tp in positions]
    records = read_from(kafka, starts, timeout_s)
    try:
        return next(records, None) is None  # a record: one the group has not committed past
    except (KafkaException, RuntimeFailure):  # not at the end in time, or a fatal error
        return False
    finally:
        records.close()


@dataclass
class KillReport:
    kills: int = 0
    restarts: int = 0
    kill_points: list[int] = field(default_factory=list)
    exits: int = 0  # the worker exited on its own (then restarted, as a supervisor would)
    seconds: float = 0.0  # from the first start until the work was done (progress and ``done``)
    stop_s: float = 0.0  # from SIGTERM until the worker exited: its shutdown, not its work
    first_progress_at: float | None = None  # seconds from the first start to the first commit
    first_progress_records: int = 0
    # After each kill: seconds from the restart to the first progress past the kill point (the
    # worker's next commit), so its restart cost and its commit interval together.
    resumed_after_s: list[float] = field(default_factory=list)


class _Progress:
    """Polls a progress function and remembers when it first moved (start-up time)."""

    def __init__(self, progress: Callable[[], int], report: KillReport, began: float) -> None:
        self._progress, self._report, self._began = progress, report, began
        self._last = 0

    def __call__(self) -> int:
        try:
            value = self._last = self._progress()
        except KafkaException:  # offsets unstable while a killed worker's transaction is open
            return self._last
        if value > 0 and self._report.first_progress_at is None:
            self._report.first_progress_at = time.monotonic() - self._began
            self._report.first_progress_records = value
        return value


def _spawn(command: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)


def run_with_kills(command: Sequence[str], progress: Callable[[], int], total: int, kills: int,
                   log_path: Path, seed: int = 11, done: Callable[[], bool] | None = None,
                   timeout_s: float = 1800.0, poll_s: float = 0.2,
                   settled: Callable[[], object] | None = None) -> KillReport:
    """Run ``command``; SIGKILL it ``kills`` times at random progress points, restarting each time;
    then let it run until ``progress() >= total`` (and ``done()``), and stop it with SIGTERM.
    ``report.seconds`` ends when the work was done, not when the harness saw it (``done`` reads
    topics, about a second): at the first look that found every input record committed and
    ``settled()`` (what the worker commits beyond its input: its shard topics' offsets, cheap to
    ask) at the value it keeps until ``done()`` holds."""
    rng = random.Random(seed)
    targets = sorted(rng.sample(range(1, max(total, kills + 1)), kills))
    report = KillReport(kill_points=[])
    began = time.monotonic()
    progress = _Progress(progress, report, began)  # type: ignore[assignment]
    deadline = began + timeout_s
    process = _spawn(command, log_path)
    for target in targets:
        while progress() < target and process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise TimeoutError(f"no progress to {target} in time; see {log_path}")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.4))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            report.kills += 1
        else:
            report.exits += 1  # died before its kill: the caller's kill count will say so
        process = _spawn(command, log_path)
        report.restarts += 1
        report.kill_points.append(progress())
        _wait_for_resume(process, progress, total, report, deadline, log_path)
    # The end: the first look that found every input record committed and, with ``settled``, the
    # first that found its value as it stays (shard records decided after the input's last commit).
    finished: float | None = None
    seen: object = None
    while True:
        if progress() >= total:
            now = _look(settled)
            if finished is None or now != seen:
                finished, seen = time.monotonic(), now
            if (done is None or done()) and _look(settled) == seen:
                break
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise TimeoutError(f"worker did not finish in time; see {log_path}")
        if process.poll() is not None:
            report.exits += 1
            process = _spawn(command, log_path)
            report.restarts += 1
        time.sleep(poll_s)
    assert finished is not None  # set before the loop could end
    report.seconds = finished - began
    stopping = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:  # reaped too, or the test fails on the Popen's ResourceWarning
        process.kill()
        process.wait()
    report.stop_s = time.monotonic() - stopping
    return report


def _look(settled: Callable[[], object] | None) -> object:
    """``settled()``, or None without one; a look that fails (offsets unstable while a transaction
    commits) is unlike any other, so the end moves past it."""
    if settled is None:
        return None
    try:
        return settled()
    except KafkaException:
        return object()


def _wait_for_resume(process: subprocess.Popen[bytes], progress: Callable[[], int], total: int,
                     report: KillReport, deadline: float, log_path: Path) -> None:
    """Wait until a restarted worker commits past where its predecessor was killed; note how long."""
    restarted, point = time.monotonic(), report.kill_points[-1]
    if point >= total:
        return
    while progress() <= point and process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise TimeoutError(f"no progress after a restart in time; see {log_path}")
        time.sleep(0.05)
    if process.poll() is None:
        report.resumed_after_s.append(round(time.monotonic() - restarted, 2))


def steady_rate(name: str, command: list[str], kafka: KafkaConfig, group: str, source: str, total: int,
                work: Path, via: Sequence[str] = (), unit: str = "urls") -> dict[str, Any]:
    """Run ``command`` to the end of ``source`` (and of the topics ``via``); records/s from its first
    commit until the last record is done (the worker's shutdown after that is ``stop_s``, not work)."""
    done = (lambda: all(caught_up(kafka, group, topic) for topic in via)) if via else None
    with CommittedOffsets(kafka, group, [source]) as inputs, CommittedOffsets(kafka, group, via) as shards:
        report = run_with_kills(command, inputs.total, total, kills=0, log_path=work / f"{name}.log",
                                done=done, poll_s=0.05, settled=shards.positions if via else None)
    steady_s = report.seconds - (report.first_progress_at or 0.0)
    steady = total - report.first_progress_records
    if steady <= 0:  # a run shorter than one progress poll: fall back to the whole run
        steady, steady_s = total, report.seconds
    return {"name": name, "records": total, "seconds": round(report.seconds, 1),
            "stop_s": round(report.stop_s, 1),
            f"{unit}_per_s": round(steady / steady_s) if steady_s > 0 else None}


def verdict(expected: set[bytes], counts: Counter[bytes]) -> dict[str, int]:
    """Lost, doubled and unexpected keys of an output against the expected distinct set."""
    return {
        "expected": len(expected),
        "emitted_distinct": len(counts),
        "lost": len(expected - counts.keys()),
        "doubled": sum(1 for n in counts.values() if n > 1),
        "unexpected": len(counts.keys() - expected),
    }


def kill_survivors(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGKILL and reap those of ``processes`` still running: called on a test's way out, because a
    ``Popen`` left running warns when collected, and pytest fails whichever test runs next in that
    process with the warning (a Scrapy test's crawl failed a racing-copies property that way)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
