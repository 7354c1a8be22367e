"""Shared by the reliability tests (issue 7): inputs for the three stages, what their offline mode
decides on them, worker processes an operator would run, a paced producer, and the comparison of
the committed outputs (read with read_committed) with the offline answers.

The three stages run side by side as they are deployed (``make demo`` does the same):
``url-dedup`` reads the frontier; ``content-seen`` and ``revisit`` both read the fetched pages.
Each stage is checked on its own: one output per input the offline run answered (nothing lost,
nothing emitted twice), and the same decision for each, field by field.

Why the offline run is the reference: ``--offline`` drives the stage's own ``route`` and
``process`` code over one store, in input order, so it is what one uninterrupted worker decides
whenever the decision does not depend on how records of different input partitions interleave.
The inputs are built so that it does not:

- frontier records are keyed by the URL they spell (all spellings of one URL share an input
  partition, so the first spelling seen is the first produced, as offline);
- fetched pages are keyed by URL (all fetches of one URL in order, as offline), and the page
  stage's originals are produced, and decided, before any copy of them (see :class:`Phase`).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench.harness import caught_up
from streams import config, simweb
from streams.runtime.kafka_io import KafkaConfig, TopicSpec, ensure_topics, read_to_end
from streams.topics import Topics

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STAGES = ("url-dedup", "content-seen", "revisit")
APP = "app"
FRONTIER, PAGES = "frontier", "fetched-pages"
Record = tuple[bytes | None, bytes]

_INPUT_OF = {"url-dedup": FRONTIER, "content-seen": PAGES, "revisit": PAGES}


def input_topic(topics: Topics, stage: str) -> str:
    return topics.frontier if _INPUT_OF[stage] == FRONTIER else topics.fetched_pages


def output_topic(topics: Topics, stage: str) -> str:
    return {"url-dedup": topics.new_urls, "content-seen": topics.page_verdicts,
            "revisit": topics.revisit_updates}[stage]


# -- inputs ------------------------------------------------------------------------------------------

BAD_FRONTIER: tuple[bytes, ...] = (b"{not json", b'{"url": 7}', b'{"url": "ftp://files.example/a"}')
BAD_PAGES: tuple[bytes, ...] = (b"{not json", b'{"url": 7}')


@dataclass
class Phase:
    """Part of the input, produced together. ``copies``: the page records of this phase copy pages of
    earlier phases (mirrors, near copies, refetches), so the page stage must have decided every earlier
    page before they are produced.

    That is the one order the page stage's answers depend on: a copy is a duplicate of the *earliest*
    page it matches among pages already inserted in the block tables. If a copy reached its buckets
    before its original (produced on another input partition, in the same moment), both would be
    unique: an honest outcome of a race, but not the offline answer. A crawl meets originals before
    their copies, and the tests produce them that way.
    """

    records: dict[str, list[Record]]
    copies: bool = False

    def size(self) -> int:
        return sum(len(items) for items in self.records.values())


@dataclass
class Workload:
    phases: list[Phase]
    bad: dict[str, int] = field(default_factory=dict)  # input kind -> planted bad records

    def lines(self, kind: str) -> bytes:
        """Every record of one input, in produce order, as offline input lines."""
        values = [value for phase in self.phases for _, value in phase.records.get(kind, [])]
        return b"".join(value.replace(b"\n", b" ") + b"\n" for value in values)

    def total(self) -> int:
        return sum(phase.size() for phase in self.phases)

    def pages_before(self, index: int) -> int:
        """Well-formed page records produced in the phases before ``index``."""
        return sum(len(phase.records.get(PAGES, [])) for phase in self.phases[:index]) - \
            sum(1 for phase in self.phases[:index] for _, value in phase.records.get(PAGES, [])
                if value in BAD_PAGES)


def frontier(seed: int, distinct: int, total: int) -> list[Record]:
    """``total`` frontier records over ``distinct`` URLs, each spelled several ways (safe-profile
    variants of one canonical URL), every URL at least once, keyed by the URL they spell."""
    rng = random.Random(seed)
    order = list(range(distinct)) + [rng.randrange(distinct) for _ in range(total - distinct)]
    rng.shuffle(order)
    out: list[Record] = []
    for number in order:
        host, path = f"site{number % 23}.example", f"/path/{number}/page"
        spelling = rng.choice([
            f"http://{host}{path}", f"HTTP://{host.upper()}{path}", f"http://{host}:80{path}",
            f"http://{host}/path/{number}/./page#top", f"http://{host}/path/{number}/%70age",
        ])
        out.append((f"{host}{path}".encode(), orjson.dumps({"url": spelling, "depth": number % 4})))
    return out


def crawl_pages(seed: int, articles: int, refetch_days: int = 2) -> tuple[list[Record], list[Record]]:
    """Fetched pages of a simulated crawl (:mod:`streams.simweb`): the originals, then their copies
    (mirrors and near copies an hour later; every original fetched again each day for
    ``refetch_days`` days, each time half of them rewritten), each keyed by URL."""
    pages = simweb.crawl(seed=seed, articles=articles)
    rng = random.Random(seed)
    pages += [page for day in range(1, refetch_days + 1)
              for page in simweb.refetches(rng, pages, after=timedelta(days=day))]
    originals = [(p.url.encode(), orjson.dumps(p.record)) for p in pages if p.kind == "original"]
    copies = [(p.url.encode(), orjson.dumps(p.record)) for p in pages if p.kind != "original"]
    return originals, copies


def _split(items: list[Record], parts: int) -> list[list[Record]]:
    return [items[len(items) * i // parts:len(items) * (i + 1) // parts] for i in range(parts)]


def _with_bad(items: list[Record], bad: Iterable[bytes], seed: int) -> list[Record]:
    rng = random.Random(seed)
    out = list(items)
    for value in bad:
        out.insert(rng.randrange(len(out) + 1), (None, value))
    return out


def workload(seed: int = 1, articles: int = 40, urls: int = 600, repeats: int = 3,
             phases_per_half: int = 1) -> Workload:
    """Two halves: the first has the originals and the first half of the frontier, the second the
    copies and the rest of the frontier (repeats of earlier URLs and new ones); each half split in
    ``phases_per_half`` phases. Bad records (dead letters) are planted in the first half."""
    originals, copies = crawl_pages(seed, articles)
    urls_in = frontier(seed, urls, urls * repeats)
    first_f, second_f = _split(urls_in, 2)
    first_f, originals = _with_bad(first_f, BAD_FRONTIER, seed), _with_bad(originals, BAD_PAGES, seed)
    phases = [Phase({FRONTIER: f, PAGES: p})
              for f, p in zip(_split(first_f, phases_per_half), _split(originals, phases_per_half),
                              strict=True)]
    phases += [Phase({FRONTIER: f, PAGES: p}, copies=i == 0)
               for i, (f, p) in enumerate(zip(_split(second_f, phases_per_half),
                                              _split(copies, phases_per_half), strict=True))]
    return Workload(phases, {FRONTIER: len(BAD_FRONTIER), PAGES: len(BAD_PAGES)})


# -- the offline answers ----------------------------------------------------------------------------

def offline(stage: str, lines: bytes, state: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``python -m streams <stage> --offline`` over ``lines``: its outputs, in order."""
    result = subprocess.run([sys.executable, "-m", "streams", stage, "--offline", "--state-dir", str(state)],
                            input=lines, capture_output=True, timeout=300, cwd=PROJECT_ROOT, check=False,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return [orjson.loads(line) for line in result.stdout.splitlines()]


# -- worker processes ---------------------------------------------------------------------------------

@dataclass
class Worker:
    """One stage worker process, started, stopped and restarted as an operator (or a supervisor) does.

    Its log (stdout and stderr, INFO level) is appended to ``log`` over every run."""

    command: list[str]
    env: dict[str, str]
    log: Path
    name: str
    stage: str
    process: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)      # return code of every run that ended
    starts: int = 0

    def start(self) -> Worker:
        assert not self.alive(), f"{self.name} is running"
        with open(self.log, "ab") as out:
            out.write(f"=== start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            cwd=PROJECT_ROOT, env=self.env, start_new_session=True)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reap(self) -> int | None:
        """The return code if the process ended since the last look (recorded in ``exits``)."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        self.exits.append(code)
        self.process = None
        return code

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM (finish the batch, commit, leave) and wait; SIGKILL after ``timeout_s``."""
        assert self.process is not None, f"{self.name} is not running"
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None, f"{self.name} is not running"
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.exits.append(self.process.returncode)
            self.process = None
            raise AssertionError(f"{self.name} did not exit within {timeout_s} s; see {self.log}") from None
        code = self.reap()
        assert code is not None
        return code

    def kill(self) -> None:
        """Last resort, for clean-up: SIGKILL the worker's process group."""
        if self.alive():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.reap()

    def runs(self) -> list[str]:
        """The log of each start, in order."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return re.split(r"^=== start \d+ at .*$", text, flags=re.MULTILINE)[1:]

    def assigned(self) -> bool:
        """Whether the current run got its partitions (its ``assignment:`` lifecycle line)."""
        runs = self.runs()
        return bool(runs) and " assignment: owns " in runs[-1]

    def diagnosis(self) -> str:
        """Why the last run ended, from its log: an assertion of librdkafka, a fatal signal with the
        main thread's innermost frame (PYTHONFAULTHANDLER), or a Python exception."""
        runs = self.runs()
        log = runs[-1] if runs else ""
        found = [line.strip() for line in log.splitlines()
                 if "Assertion" in line or line.startswith("Fatal Python error")]
        frames = re.search(r"^Current thread .*\n\s*(File .*)$", log, flags=re.MULTILINE)
        if frames:
            found.append(frames.group(1).strip())
        errors = re.findall(r"^(\w*(?:Error|Exception|Failure)\b.*|error: .*)$", log, flags=re.MULTILINE)
        if errors:
            found.append(errors[-1].strip())
        return "; ".join(found) or "nothing in its log"

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


# -- producing ------------------------------------------------------------------------------------------

def produce(kafka: KafkaConfig, topic: str, items: Sequence[Record], timeout_s: float = 180.0) -> None:
    """Deliver ``items`` once each, in order: idempotent, so a retry through a broker fault (a leader
    killed or stalled under the cluster tests) never writes an input record twice."""
    producer = Producer(kafka.producer(**{"linger.ms": 20, "enable.idempotence": True}))
    for key, value in items:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(timeout_s)
    if left:
        raise AssertionError(f"{left} records to {topic} were not delivered")


class Feeder(threading.Thread):
    """Produces a workload's phases in paced steps while the test changes the workers around it.

    Before a phase of copies it waits (``gate``) until the page stage has decided every earlier page.
    ``produced`` counts records delivered so far; :meth:`wait_for` blocks until a share of them is.
    """

    def __init__(self, kafka: KafkaConfig, topics: Topics, work: Workload, steps_per_phase: int = 4,
                 pause_s: float = 0.5, gate: Callable[[int], None] | None = None) -> None:
        super().__init__(daemon=True, name="feeder")
        self.kafka, self.topics, self.work = kafka, topics, work
        self.steps, self.pause_s, self.gate = steps_per_phase, pause_s, gate
        self.produced = 0
        self.error: BaseException | None = None
        self._moved = threading.Condition()

    def run(self) -> None:
        try:
            for index, phase in enumerate(self.work.phases):
                if phase.copies and self.gate is not None:
                    self.gate(index)
                self.produce_phase(phase)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread by finish()
            self.error = error
        finally:
            with self._moved:
                self._moved.notify_all()

    def produce_phase(self, phase: Phase) -> None:
        names = {FRONTIER: self.topics.frontier, PAGES: self.topics.fetched_pages}
        for step in range(self.steps):
            for kind, items in phase.records.items():
                part = _split(items, self.steps)[step]
                if part:
                    produce(self.kafka, names[kind], part)
                    with self._moved:
                        self.produced += len(part)
                        self._moved.notify_all()
            time.sleep(self.pause_s)

    def wait_for(self, share: float, timeout_s: float = 240.0) -> None:
        """Block until ``share`` (0..1) of the workload is produced."""
        target = share * self.work.total()
        deadline = time.monotonic() + timeout_s
        with self._moved:
            while self.produced < target:
                if self.error is not None or not self.is_alive():
                    break
                if not self._moved.wait(max(0.0, deadline - time.monotonic())):
                    raise AssertionError(f"feeder reached {self.produced} of {target:.0f} in {timeout_s} s")
        if self.error is not None:
            raise self.error

    def finish(self, timeout_s: float = 400.0) -> None:
        self.join(timeout_s)
        if self.is_alive():
            raise AssertionError("the feeder did not finish in time")
        if self.error is not None:
            raise self.error


# -- progress -------------------------------------------------------------------------------------------

def count(kafka: KafkaConfig, topic: str) -> int:
    return sum(1 for _ in read_to_end(kafka, topic))


def _signal_name(code: int) -> str:
    return f"{code} ({signal.Signals(-code).name})" if code < 0 else str(code)


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

    def done(self, stage: str) -> bool:
        """Whether the stage's group committed its input and its shard topic to their ends."""
        group = self.group(stage)
        return (caught_up(self.kafka, group, input_topic(self.topics, stage), timeout_s=20.0)
                and caught_up(self.kafka, group, self.topics.shards(APP, stage), timeout_s=20.0))

    def progress(self, stage: str) -> int | None:
        """The stage group's committed offsets on its input and shard topics, summed (None: unknown)."""
        topics = [input_topic(self.topics, stage), self.topics.shards(APP, stage)]
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
            lines = self.work.lines(_INPUT_OF[stage])
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
            summary["planted_bad"] = self.work.bad.get(_INPUT_OF[stage], 0)
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
