"""Reliability (issue 7, items 1-3): the three stages through a lost state directory, rebalances,
rolling restarts and a broker restart, each against what the stage decides offline.

Every test runs the three stages side by side as they are deployed (url-dedup on the frontier,
content-seen and revisit both on the fetched pages), each as its own worker processes
(``python -m streams <stage> ...``, ``--shards 4``), and then reads every output with read_committed
and compares it, stage by stage, with ``python -m streams <stage> --offline`` over the same input in
produce order (the same route and process code over one store: what one uninterrupted worker
decides). The report per stage (``testing/reliability.py``): outputs expected and committed, ``lost``
and ``doubled`` (counted per URL fingerprint, or per fetched URL), ``differing``
(same count but any field of a decision differs), and one dead letter per planted bad record.

What is compared, and the one order caveat:

- url-dedup: every ``new_url`` record, field for field, one per canonical URL. Frontier records are
  keyed by the URL they spell, so all spellings of a URL share an input partition and the first
  spelling produced is the first seen, as offline.
- content-seen: every verdict (verdict, kind, duplicate_of, distance, SimHash, digest), and one
  unique-pages record per unique verdict. A copy is a duplicate of the earliest matching page
  *already in the block tables*; a copy produced on another input partition in the same moment as
  its original could reach the tables first, and then both are unique (the race is documented in
  ``streams/stages/content_seen/buckets.py``: the earliest page of a cluster always stays unique). A
  crawl meets originals before their copies; the tests do the same: originals (simweb's crawl) in
  the first half of the input, and their copies (mirrors, near copies, two days of refetches) only
  once every original has its verdict. Membership changes happen in both halves.
- revisit: every update, field for field, per URL in fetch order, under the ``nutch`` policy, whose
  interval depends on the URL's own history only. Under the ``default`` policy the interval also
  depends on the shard's budget state (every URL of the shard, in the order the shard got them), so
  there only the change decisions are compared (the slow state-directory test runs it that way).

What the tests found at the time of writing (confluent-kafka 2.16.1, librdkafka 2.16.0):

- Scaling in with SIGTERM commits and exits, but the worker is a static group member
  (``group.instance.id``) and librdkafka sends no LeaveGroup for static members: its shards stay
  unassigned until ``session.timeout.ms`` (30 s) expires. Nothing is lost; the remaining worker
  picks them up late. So the 1 -> 2 -> 1 test waits for the group to finish and then stops the
  workers, instead of ``--idle-exit-s`` (which would let the remaining worker exit before it got
  the shards back).
- After a broker restart (graceful or SIGKILL) librdkafka's transactional producer can block for
  ever in ``send_offsets_to_transaction`` (the 30 s timeout ignored: librdkafka #5511/#5456, the
  restarted broker is "decommissioned" and the cached group coordinator never queried again). The
  worker's watchdog (``streams/runtime/watchdog.py``) sees the call 10 s past its timeout and
  restarts the worker in place (``os.execv``: the same as SIGKILL and restart), so the stages ride
  out a broker restart on their own. The lag thread used to die too (SIGSEGV in ``AdminClient.
  list_consumer_group_offsets`` on NOT_COORDINATOR, librdkafka #5040; abort() on
  ``rd_kafka_enq_once_del_source_return``, #3663/#4605); it now reads commits with a consumer that
  never joins the group. The broker test still supervises its workers as systemd or Kubernetes
  would (start again what exited; SIGABRT, which makes PYTHONFAULTHANDLER log the stacks, and
  start again what committed nothing for ``STALL_S`` with input left, longer than the watchdog
  takes), and fails if the supervisor ever had to act: nothing lost, doubled or decided otherwise,
  and no help from outside. The in-place restarts are printed.

The broker test runs its own broker (``STREAMS_TEST_RESTART_PORT``, default 19692, and the port
above for its controller), since it stops it; it is skipped against an external cluster.

Short versions run in ``make test`` (a few hundred records per stage); the ``slow`` ones (more
records, more membership changes) in ``make reliability``, and so do both broker tests: the short one
stops and starts a broker of its own twice, the longest run of ``make test`` when it was there
(``test_broker_restarts_and_crash_long`` strikes the same faults, and a SIGKILL besides).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams import config
from streams.broker import kafka_local
from streams.runtime.kafka_io import KafkaConfig
from testing import reliability as r

pytestmark = pytest.mark.kafka

IDLE_S = 4.0
DOWN_S = 5.0          # how long the broker stays down
STALL_S = 90.0        # the supervisor's patience: past the watchdog's 40 s (a 30 s call and 10 s of grace)


def _deployment(kafka: KafkaConfig, prefix: str, tmp_path: Path, work: r.Workload,
                **options: object) -> r.Deployment:
    deployment = r.Deployment(kafka, prefix, tmp_path, work, **options)  # type: ignore[arg-type]
    deployment.create_inputs()
    return deployment


def _check(deployment: r.Deployment) -> dict[str, dict[str, object]]:
    report = deployment.verify()
    print(f"\n{deployment.prefix} report: {report}\nexits: {deployment.exits()}")
    assert report == r.clean(report)
    return report


def _recovered(worker: r.Worker, run: int) -> int:
    """Changelog records the worker's ``run``-th start (from 1) restored (its ``ready:`` lines)."""
    return sum(int(n) for n in re.findall(r"ready: state caught up with the changelog \((\d+) records",
                                          worker.runs()[run - 1]))


def _owned_shards(line: str) -> set[int]:
    """The shards an ``assignment:`` lifecycle line says the worker owns."""
    found = re.search(r"assignment: owns shards ([\d, ]+) and ", line)
    return set() if found is None else {int(n) for n in found[1].split(", ")}


def _assigned_shards(worker: r.Worker, run: int) -> set[int]:
    """Shards the worker's ``run``-th start (from 1) was ever assigned (its ``assignment:`` lines)."""
    return {shard for line in worker.runs()[run - 1].splitlines() for shard in _owned_shards(line)}


# -- 1. the state directory deleted ------------------------------------------------------------------

def _lost_state_dir(kafka: KafkaConfig, prefix: str, tmp_path: Path, work: r.Workload,
                    **options: object) -> r.Deployment:
    """Each phase: produce it, run one worker per stage until idle exit; before every run after the
    first, delete the whole state directory (workers stopped), so state comes from the changelog."""
    deployment = _deployment(kafka, prefix, tmp_path, work, **options)
    workers = {stage: deployment.worker(stage, "w0", idle_exit_s=IDLE_S) for stage in deployment.stages}
    try:
        for index in range(len(work.phases)):
            if index:
                assert any(deployment.state_dir.rglob("shard-*")), "no local state was written"
                deployment.delete_state()
            deployment.produce_phase(index)
            for worker in workers.values():
                worker.start()
            for worker in workers.values():
                assert worker.wait(300) == 0, worker.tail()
            assert all(deployment.done(stage) for stage in deployment.stages), deployment.exits()
            if index:
                restored = {stage: _recovered(worker, index + 1) for stage, worker in workers.items()}
                assert all(restored.values()), f"nothing restored from the changelogs: {restored}"
    finally:
        deployment.kill_all()
    return deployment


def test_state_directory_deleted_comes_back_from_the_changelog(kafka: KafkaConfig, prefix: str,
                                                               tmp_path: Path) -> None:
    work = r.workload(seed=11, articles=24, urls=300, repeats=3)
    _check(_lost_state_dir(kafka, prefix, tmp_path, work))


@pytest.mark.slow
def test_state_directory_deleted_three_times_long(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """Four phases, the state directory deleted before each of the last three runs; revisit under its
    ``default`` (budgeted) policy, whose shard-wide allocation state must come back too."""
    work = r.workload(seed=12, articles=120, urls=3000, repeats=3, phases_per_half=2)
    _check(_lost_state_dir(kafka, prefix, tmp_path, work, revisit_policy="default"))


# -- 2. rebalances: scale out and in, rolling restarts ----------------------------------------------------

def _membership(deployment: r.Deployment, steps: list[tuple[float, str, str]], feed_steps: int,
                pause_s: float) -> None:
    """Feed the workload in paced steps; at each ``(share produced, action, worker id)`` start or stop
    (SIGTERM) that worker of every stage, or ``restart`` it (SIGTERM, then start again at once). A
    worker is stopped only once it holds partitions, so every stop takes shards away mid-stream."""
    deployment.wait_assigned(deployment.running())
    feeder = deployment.feeder(steps_per_phase=feed_steps, pause_s=pause_s)
    feeder.start()
    try:
        for share, action, worker_id in steps:
            feeder.wait_for(share)
            mine = [w for w in deployment.workers if w.name.endswith(f"/{worker_id}")]
            if action == "start" and not mine:
                deployment.start(worker_id)
            elif action == "start":
                for worker in mine:
                    worker.start()
            else:
                deployment.wait_assigned(mine)
                for worker in mine:
                    assert worker.stop() == 0, worker.tail()
                if action == "restart":
                    for worker in mine:
                        worker.start()
        feeder.finish()
    finally:
        feeder.join(60)
    deployment.settle(timeout_s=300)
    deployment.stop_all()
    assert all(code == 0 for codes in deployment.exits().values() for code in codes), deployment.exits()


def test_scale_out_and_in_mid_stream(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """1 -> 2 -> 1 workers per stage while input flows: b joins a fifth of the way in, leaves (SIGTERM)
    at four fifths; a finishes. Both held shards; the decisions are one worker's."""
    deployment = _deployment(kafka, prefix, tmp_path, r.workload(seed=21, articles=24, urls=300,
                                                                 phases_per_half=2))
    try:
        deployment.start("a")
        _membership(deployment, [(0.2, "start", "b"), (0.8, "stop", "b")], feed_steps=4, pause_s=0.5)
        for worker in deployment.workers:
            assert _assigned_shards(worker, 1), f"{worker.name} never held a shard"
        for worker in deployment.workers[:3]:  # a took b's shards back
            last = [line for line in worker.runs()[0].splitlines() if " assignment: " in line][-1]
            assert len(_owned_shards(last)) == deployment.shards, last
        _check(deployment)
    finally:
        deployment.kill_all()


def test_rolling_restart_of_two_workers(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """Two workers per stage; a, then b, stopped with SIGTERM and started again while input flows."""
    deployment = _deployment(kafka, prefix, tmp_path, r.workload(seed=31, articles=24, urls=300,
                                                                 phases_per_half=2))
    try:
        deployment.start("a")
        deployment.start("b")
        _membership(deployment, [(0.3, "restart", "a"), (0.7, "restart", "b")], feed_steps=4, pause_s=0.5)
        assert all(w.starts == 2 and _assigned_shards(w, 1) and _assigned_shards(w, 2)
                   for w in deployment.workers)
        _check(deployment)
    finally:
        deployment.kill_all()


@pytest.mark.slow
def test_scale_out_and_in_long(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """1 -> 2 -> 3 -> 2 -> 1 -> 2 workers per stage over a larger crawl (each scale-in waits out the
    30 s session timeout), then both finish."""
    deployment = _deployment(kafka, prefix, tmp_path, r.workload(seed=22, articles=100, urls=2000,
                                                                 phases_per_half=3))
    try:
        deployment.start("a")
        _membership(deployment, [(0.1, "start", "b"), (0.25, "start", "c"), (0.45, "stop", "c"),
                                 (0.65, "stop", "b"), (0.8, "start", "b")], feed_steps=4, pause_s=1.0)
        _check(deployment)
    finally:
        deployment.kill_all()


@pytest.mark.slow
def test_rolling_restarts_of_three_workers_long(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    """Three workers per stage, two rounds of rolling restarts over a larger crawl."""
    deployment = _deployment(kafka, prefix, tmp_path, r.workload(seed=32, articles=100, urls=2000,
                                                                 phases_per_half=3))
    try:
        for worker_id in "abc":
            deployment.start(worker_id)
        rounds = [(0.1 + 0.13 * i, "restart", worker_id) for i, worker_id in enumerate("abcabc")]
        _membership(deployment, rounds, feed_steps=4, pause_s=1.0)
        assert all(w.starts == 3 for w in deployment.workers)
        _check(deployment)
    finally:
        deployment.kill_all()


# -- 3. a broker restart ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def restart_broker() -> Iterator[kafka_local.LocalBroker]:
    """A broker of this module's own (``STREAMS_TEST_RESTART_PORT``, default 19692, and the port above),
    since the tests stop it."""
    if config.bootstrap_servers():
        pytest.skip("an external cluster is configured; the broker restart test stops the local broker")
    port = int(os.environ.get("STREAMS_TEST_RESTART_PORT", "19692"))
    broker = kafka_local.LocalBroker(port=port, controller_port=port + 1, heap_mb=512)
    kafka_local.stop(broker)
    kafka_local.wipe(broker)
    kafka_local.start(broker)
    yield broker
    kafka_local.stop(broker)
    kafka_local.wipe(broker)


def _restart(broker: kafka_local.LocalBroker, crash: bool) -> None:
    """Stop the broker (SIGTERM: controlled shutdown; ``crash``: SIGKILL), wait, start it again on the
    same data directory."""
    pid = kafka_local.running_pid(broker)
    if crash and pid is not None:
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    kafka_local.stop(broker)
    time.sleep(DOWN_S)
    kafka_local.start(broker)


def _through_broker_restarts(broker: kafka_local.LocalBroker, prefix: str, tmp_path: Path,
                             work: r.Workload, restarts: dict[int, bool]) -> r.Deployment:
    """Workers run; part of the input; the broker restarts mid-stream (after each phase named in
    ``restarts``; ``True``: a crash); the rest of the input; everything decided once, as offline."""
    kafka = KafkaConfig(broker.bootstrap)
    deployment = _deployment(kafka, prefix, tmp_path, work)
    deployment.start("w0")
    try:
        for index in range(len(work.phases)):
            if work.phases[index].copies:
                deployment.gate(index, timeout_s=300, stall_s=STALL_S)
            deployment.produce_phase(index)
            if index in restarts:
                # mid-stream: the phase was just produced, every stage has committed some output
                deployment.wait_until(lambda: all(r.count(kafka, r.output_topic(deployment.topics, stage))
                                                  for stage in deployment.stages), 120, STALL_S)
                _restart(broker, restarts[index])
        deployment.settle(timeout_s=400, stall_s=STALL_S)
        deployment.stop_all()
        _check(deployment)
    finally:
        deployment.kill_all()
    return deployment


def _report_interventions(deployment: r.Deployment) -> None:
    restarts = {worker.name: worker.log.read_text(errors="replace").count("restarting in place")
                for worker in deployment.workers}
    print(f"in-place restarts by the watchdog: {restarts}")
    assert not deployment.interventions, (
        "the workers did not ride out the broker restart on their own; a supervisor had to: "
        f"{deployment.interventions} (logs: {deployment.logs})")


@pytest.mark.slow
def test_broker_restart_mid_stream(restart_broker: kafka_local.LocalBroker, prefix: str,
                                   tmp_path: Path) -> None:
    work = r.workload(seed=41, articles=24, urls=300)
    _report_interventions(_through_broker_restarts(restart_broker, prefix, tmp_path, work, {0: False}))


@pytest.mark.slow
def test_broker_restarts_and_crash_long(restart_broker: kafka_local.LocalBroker, prefix: str,
                                        tmp_path: Path) -> None:
    """A larger crawl in four phases; the broker stopped after the first and SIGKILLed after the third."""
    work = r.workload(seed=42, articles=100, urls=2000, phases_per_half=2)
    _report_interventions(_through_broker_restarts(restart_broker, prefix, tmp_path, work,
                                                   {0: False, 2: True}))
