"""A deployment of the stages under test (issue 7), and their committed outputs, read with
read_committed, compared with the offline answers (:mod:`testing.workload`).

Each stage is checked on its own: one output per input the offline run answered (nothing lost,
nothing emitted twice), and the same decision for each, field by field. The workers are
:mod:`testing.workers`'; the inputs and the reason offline mode is the reference are
:mod:`testing.workload`'s.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams import config, registry
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.runtime.topic_admin import TopicSpec, ensure_topics
from streams.topics import Topics
from testing.harness import caught_up
from testing.workers import Feeder, Worker, _signal_name, count
from testing.workload import (
    APP,
    INPUT_OF,
    STAGES,
    Workload,
    input_topic,
    offline,
    output_topic,
    workload,
)

__all__ = ["APP", "STAGES", "Deployment", "Feeder", "Intervention", "Worker", "Workload", "clean", "compare",
           "count", "input_topic", "offline", "output_topic", "workload"]


@dataclass(frozen=True)
class Intervention:
    """What the test's supervisor did to a worker, and when (seconds from the deployment's start)."""

    worker: str
    what: str
    at_s: float


# -- a deployment of the stages --------------------------------------------------------------------------

@dataclass
class Deployment:
    """The stages under test on one topic prefix, their workers, and the comparison with offline."""

    kafka: KafkaConfig
    prefix: str
    root: Path
    work: Workload
    stages: Sequence[str] = STAGES
    shards: int = 4
    batch_max_messages: int = 200
    revisit_policy: str = "nutch"
    env: dict[str, str] = field(default_factory=dict)
    worker_bootstrap: str | None = None  # the workers' listener, when not the test's (a SCRAM one)
    workers: list[Worker] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.began = time.monotonic()
        self.env = {"STREAMS_REVISIT_POLICY": self.revisit_policy, **self.env}
        self.topics = Topics(self.prefix)
        self.state_dir = self.root / "state"
        self.logs = self.root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self._expected: dict[str, list[dict[str, Any]]] = {}

    # workers

    def worker(self, stage: str, worker_id: str, idle_exit_s: float | None = None) -> Worker:
        command = [sys.executable, "-m", "streams", "--log-level", "INFO", stage,
                   "--topic-prefix", self.prefix, "--app-id", APP, "--worker-id", worker_id,
                   "--state-dir", str(self.state_dir), "--shards", str(self.shards),
                   "--batch-max-messages", str(self.batch_max_messages)]
        if idle_exit_s is not None:
            command += ["--idle-exit-s", str(idle_exit_s)]
        env = {**os.environ, **self.env,
               config.BOOTSTRAP_ENV: self.worker_bootstrap or self.kafka.bootstrap_servers,
               "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
        found = Worker(command, env, self.logs / f"{stage}.{worker_id}.log", f"{stage}/{worker_id}", stage)
        self.workers.append(found)
        return found

    def start(self, worker_id: str, idle_exit_s: float | None = None) -> list[Worker]:
        """One worker per stage, all with ``worker_id``."""
        return [self.worker(stage, worker_id, idle_exit_s).start() for stage in self.stages]

    def wait_assigned(self, workers: Iterable[Worker], timeout_s: float = 120.0) -> None:
        """Wait until each worker's current run holds its partitions."""
        waiting = list(workers)
        self.wait_until(lambda: all(w.assigned() for w in waiting), timeout_s,
                        what=lambda: f"assignments of {[w.name for w in waiting if not w.assigned()]}")

    def running(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def stop_all(self) -> None:
        for worker in self.running():
            worker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for worker in self.workers:
            if worker.process is not None:
                worker.wait(90)

    def kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()

    def exits(self) -> dict[str, list[int]]:
        return {w.name: w.exits for w in self.workers}

    def delete_state(self) -> None:
        assert not self.running(), "stop the workers before deleting their state"
        shutil.rmtree(self.state_dir)

    # input

    def create_inputs(self, partitions: int = 4) -> None:
        """The input topics, with the cluster's default replication (1 on the single-node broker)."""
        ensure_topics(self.kafka, [TopicSpec(self.topics.frontier, partitions),
                                   TopicSpec(self.topics.fetched_pages, partitions)])

    def produce_phase(self, index: int) -> None:
        Feeder(self.kafka, self.topics, self.work, steps_per_phase=1, pause_s=0).produce_phase(
            self.work.phases[index])

    def feeder(self, steps_per_phase: int = 4, pause_s: float = 0.5) -> Feeder:
        gate = self.gate if "content-seen" in self.stages else None
        return Feeder(self.kafka, self.topics, self.work, steps_per_phase, pause_s, gate)

    def gate(self, phase_index: int, timeout_s: float = 240.0, stall_s: float | None = None) -> None:
        """Wait until the page stage has a verdict for every page of the phases before ``phase_index``."""
        needed = self.work.pages_before(phase_index)
        self.wait_until(lambda: count(self.kafka, self.topics.page_verdicts) >= needed, timeout_s, stall_s,
                        f"a verdict for each of the first {needed} pages")

    # completion

    def group(self, stage: str) -> str:
        return self.topics.group(APP, stage)

    def internal_topics(self, stage: str) -> list[str]:
        """The stage's internal topics (``shards``; the page stage's ``probes`` and ``gather``)."""
        return registry.spec(stage).topology(self.topics, APP).shard_topics

    def done(self, stage: str) -> bool:
        """Whether the stage's group committed its input and its internal topics to their ends."""
        group = self.group(stage)
        return all(caught_up(self.kafka, group, topic, timeout_s=20.0)
                   for topic in [input_topic(self.topics, stage), *self.internal_topics(stage)])

    def progress(self, stage: str) -> int | None:
        """The stage group's committed offsets on its input and internal topics, summed (None: unknown)."""
        topics = [input_topic(self.topics, stage), *self.internal_topics(stage)]
        consumer = Consumer(self.kafka.consumer(self.group(stage)))
        try:
            wanted = [TopicPartition(topic, p) for topic in topics
                      for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]
            return sum(max(tp.offset, 0) for tp in consumer.committed(wanted, timeout=10))
        except KafkaException:
            return None
        finally:
            consumer.close()

    def settle(self, timeout_s: float = 240.0, stall_s: float | None = None) -> None:
        """Wait until every stage has committed its input and shard topics to their ends.

        ``stall_s``: supervise the workers meanwhile (see :meth:`wait_until`)."""
        pending = list(self.stages)

        def finished() -> bool:
            pending[:] = [stage for stage in pending if not self.done(stage)]
            return not pending

        self.wait_until(finished, timeout_s, stall_s, lambda: f"stages {pending} at the end of their input")

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, stall_s: float | None = None,
                   what: str | Callable[[], str] = "the condition") -> None:
        """Poll ``condition``. With ``stall_s``, act as an operator's supervisor meanwhile (systemd's
        ``Restart=``, a Kubernetes liveness probe on progress): a worker that exited is started again,
        and the workers of a stage that has input left but committed nothing for ``stall_s`` seconds
        are stopped with SIGABRT (PYTHONFAULTHANDLER writes their stacks to the log) and started again.
        Every such act is recorded in :attr:`interventions`."""
        began = time.monotonic()
        last: dict[str, tuple[int | None, float]] = {}
        while not condition():
            now = time.monotonic()
            if now - began > timeout_s:
                named = what if isinstance(what, str) else what()
                raise AssertionError(f"{named}: not reached in {timeout_s} s; workers {self.exits()}; "
                                     f"interventions {self.interventions}; logs in {self.logs}")
            if stall_s is not None:
                for worker in self.workers:
                    if worker.process is not None and (code := worker.reap()) is not None:
                        self.interventions.append(Intervention(
                            worker.name, f"exited with {_signal_name(code)}: {worker.diagnosis()}; "
                                         "started again", round(now - self.began, 1)))
                        worker.start()
                        last.pop(worker.stage, None)
                for stage in self.stages:
                    moved = self.progress(stage)
                    seen, since = last.get(stage, (None, now))
                    if moved != seen or moved is None or self.done(stage):
                        last[stage] = (moved, now)
                    elif now - since > stall_s:
                        self._unstick(stage, now - since)
                        last.pop(stage, None)
            time.sleep(0.5)

    def _unstick(self, stage: str, stalled_s: float) -> None:
        for worker in self.workers:
            if worker.stage == stage and worker.alive():
                assert worker.process is not None
                worker.process.send_signal(signal.SIGABRT)  # faulthandler: the stacks go to the log
                code = worker.wait(30)
                self.interventions.append(Intervention(
                    worker.name, f"no commit for {stalled_s:.0f} s with input left, stopped with "
                                 f"{_signal_name(code)}: {worker.diagnosis()}; started again",
                    round(time.monotonic() - self.began, 1)))
                worker.start()

    # comparison

    def expected(self, stage: str) -> list[dict[str, Any]]:
        if stage not in self._expected:
            lines = self.work.lines(INPUT_OF[stage])
            self._expected[stage] = offline(stage, lines, self.root / "offline" / stage, self.env)
        return self._expected[stage]

    def verify(self) -> dict[str, dict[str, Any]]:
        """Per stage: the committed outputs against the offline answers, and the dead letters."""
        letters = [orjson.loads(m.value() or b"{}")
                   for m in read_to_end(self.kafka, self.topics.dead_letters)]
        report = {}
        for stage in self.stages:
            got = [orjson.loads(m.value() or b"{}")
                   for m in read_to_end(self.kafka, output_topic(self.topics, stage))]
            expected = self.expected(stage)
            if stage == "revisit" and self.revisit_policy == "default":
                expected, got = _per_url_fields(expected), _per_url_fields(got)
            summary = compare(stage, expected, got)
            mine = Counter((d["source_topic"], d["source_partition"], d["source_offset"])
                           for d in letters if d["stage"] == stage)
            summary["dead_letters"] = sum(mine.values())
            summary["dead_letters_doubled"] = sum(1 for n in mine.values() if n > 1)
            summary["planted_bad"] = self.work.bad.get(INPUT_OF[stage], 0)
            if stage == "content-seen":
                summary.update(_unique_pages(self.kafka, self.topics, got))
            report[stage] = summary
        return report


def _per_url_fields(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A revisit update without its interval and estimate: under the ``default`` policy the interval
    also depends on the shard's budget state, and the estimate on the prior of the URL's host in the
    shard, both built from every URL of the shard in the order the shard received them, which the
    offline run (one shard) cannot share (nor two Kafka runs, whose routers interleave input
    partitions differently); the change decision does not."""
    shard_wide = ("next_fetch_at", "interval_s", "change_rate_estimate")
    return [{k: v for k, v in update.items() if k not in shard_wide} for update in updates]


def identity(stage: str, record: dict[str, Any]) -> str:
    """What one output is about: the URL's fingerprint (url-dedup) or the fetched URL."""
    return str(record["fingerprint"] if stage == "url-dedup" else record["url"])


def compare(stage: str, expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> dict[str, Any]:
    """Outputs grouped by what they are about: lost and doubled are counted per group; ``differing``
    groups have as many outputs as offline but another decision (any field differs).

    Revisit updates of one URL are compared in order (one URL, one shard, decided in fetch order).
    The verdicts of one URL's fetches are compared as a multiset: each fetch waits for its replies
    on the shard its fetch time names, so two fetches of a URL may be decided in either order."""
    want: dict[str, list[dict[str, Any]]] = defaultdict(list)
    have: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in expected:
        want[identity(stage, record)].append(record)
    for record in got:
        have[identity(stage, record)].append(record)
    if stage == "content-seen":
        for groups in (want, have):
            for records in groups.values():
                records.sort(key=lambda record: orjson.dumps(record, option=orjson.OPT_SORT_KEYS))
    lost = sum(max(0, len(want[k]) - len(have.get(k, []))) for k in want)
    doubled = sum(max(0, len(have[k]) - len(want.get(k, []))) for k in have)
    differing = sorted(k for k in want if k in have and len(want[k]) == len(have[k]) and want[k] != have[k])
    return {"expected": len(expected), "committed": len(got), "lost": lost, "doubled": doubled,
            "differing": len(differing),
            "examples": [{"offline": want[k], "kafka": have[k]} for k in differing[:2]]}


def _unique_pages(kafka: KafkaConfig, topics: Topics, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    unique = Counter(orjson.loads(m.value() or b"{}")["url"] for m in read_to_end(kafka, topics.unique_pages))
    wanted = Counter(v["url"] for v in verdicts if v["verdict"] == "unique")
    return {"unique_pages_match_verdicts": unique == wanted}


def clean(report: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a passing report looks like: nothing lost, doubled or differing, one dead letter each."""
    out = {}
    for stage, summary in report.items():
        expected = {"expected": summary["expected"], "committed": summary["expected"], "lost": 0,
                    "doubled": 0, "differing": 0, "examples": [],
                    "dead_letters": summary["planted_bad"], "dead_letters_doubled": 0,
                    "planted_bad": summary["planted_bad"]}
        if stage == "content-seen":
            expected["unique_pages_match_verdicts"] = True
        out[stage] = expected
    return out
