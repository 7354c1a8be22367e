"""What an operator sees of a worker at the default log level, and what its probes answer.

1. A URL worker builds its state from 120,000 new URLs; its state directory is wiped and it is
   started again: its log says, without any flag, where it connects (once: the cluster answers),
   start, recovery progress with percent (before it joins its group: it warms the shards it will
   own first), assignment, then ready; ``/readyz`` answers 503 while it recovers and 200 after; it
   stops cleanly.
2. A metrics port already taken stops a worker at start, naming the port.
3. A worker whose main loop stalls (a stage that blocks on one record, as a wedged client would)
   answers 503 on ``/healthz`` until the loop turns again.

Run as a script, this file is also that stalling stage's command (as tests/kafka/test_registry_kafka.py).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

import orjson

from streams import cli
from streams.runtime.api import BatchState, Emit, Message, Processors, StageContext, StoreSpec
from streams.runtime.extras import KafkaConfig, TopicSpec, ensure_topics
from streams.runtime.kafka_io import produce_all
from streams.spec import CommandLine, StageSpec
from streams.topics import Topics
from testing.cli import run_cli
from testing.operated import Worker, worker_env

URLS = 120_000
STALL_FLAG_ENV = "STALL_WORD_FLAG"


def test_a_restarted_worker_tells_its_recovery_and_readiness(kafka: KafkaConfig, prefix: str,
                                                            tmp_path: Path) -> None:
    topics = Topics(prefix)
    ensure_topics(kafka, [TopicSpec(topics.frontier, 4)])
    produce_all(kafka, topics.frontier, ((None, orjson.dumps({"url": f"http://h{i % 97}.example/p{i}"}))
                                         for i in range(URLS)))
    args = ["url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0", "--state-dir",
            str(tmp_path / "state"), "--shards", "4"]
    env = worker_env(kafka.bootstrap_servers, STREAMS_RUNTIME_RECOVERY_LOG_INTERVAL_S="0.1")
    first = Worker([*args, "--idle-exit-s", "2"], env)
    assert first.wait(180) == 0, first.log()
    shutil.rmtree(tmp_path / "state")

    worker = Worker(args, env)
    answers: list[tuple[int, str]] = []
    try:
        worker.port  # noqa: B018 - waits for the endpoint, served before the worker joins its group
        while not answers or answers[-1][0] != 200:
            status, body = worker.get("/readyz")
            answers.append((status, str(body.get("phase"))))
            assert worker.process.poll() is None, worker.log()
            time.sleep(0.02)
        assert worker.get("/healthz")[0] == 200
    finally:
        code = worker.stop()
    assert code == 0, worker.log()
    reach = [line for line in worker.lines if "streams.runtime.reach: " in line]
    assert len(reach) == 1 and reach[0].endswith(f"connecting to Kafka at {kafka.bootstrap_servers}"), reach
    said = "streams.lifecycle: "
    lines = [line.split(said, 1)[1] for line in worker.lines if said in line]
    events = [line.split(":", 1)[0] for line in lines]
    # it rebuilds the shards it will own before it joins its group (a warm-up), then is assigned them
    assert events[:2] == ["start", "recovery"] and "assignment" in events, lines
    assert lines[1].startswith("recovery: rebuilding shards 0, 1, 2, 3 from the changelog: "), lines
    progress = [line for line in lines if line.startswith("recovery: shard ")]
    assert progress, lines
    assert all("%)" in line and "records/s" in line and "left" in line for line in progress), lines
    assert any("%)" in line and "(0%)" not in line for line in progress), lines
    assert events[-2:] == ["ready", "stop"], lines
    assert lines[-2].startswith("ready: state caught up with the changelog (")
    assert lines[-1].startswith("stop: clean")
    assert ("recovering" in {phase for status, phase in answers if status == 503}), answers
    assert answers[-1][0] == 200


def test_a_taken_metrics_port_is_a_start_up_error(kafka: KafkaConfig, prefix: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(kafka, "url-dedup", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "p0",
                         "--state-dir", str(tmp_path), "--shards", "2", "--metrics-port", str(port))
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr.decode()
    assert f"metrics port {port} on 127.0.0.1 is taken" in errors[0] and "0 for any free port" in errors[0]


class StallWord:
    """Each word once, like tests/kafka/test_registry_kafka.py's stage, but the word ``stall`` blocks the
    worker's main loop while the file named by ``STALL_WORD_FLAG`` exists."""

    def store(self) -> StoreSpec:
        return StoreSpec()

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        self.shards, self.output = context.internal("shards").topic, context.output("first-words")
        return Processors(route=self.route, shards={"shards": self.process})

    def route(self, message: Message) -> list[Emit]:
        word = message.value() or b""
        return [Emit(self.shards, word, word)]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        word = message.key() or b""
        if word == b"stall":
            flag = Path(os.environ[STALL_FLAG_ENV])
            while flag.exists():
                time.sleep(0.05)
        if state.get(word) is not None:
            return []
        state.set(word, b"1")
        return [Emit(self.output, word, word)]


SPEC = StageSpec("stall-word", inputs=("words",), outputs=("first-words",),
                 build=lambda _settings, _runtime: StallWord(),
                 cli=CommandLine("each word once; 'stall' blocks while a file exists", metrics_port=9419))


def test_healthz_answers_503_while_the_loop_is_stalled(kafka: KafkaConfig, prefix: str,
                                                       tmp_path: Path) -> None:
    flag = tmp_path / "stalled"
    ensure_topics(kafka, [TopicSpec(f"{prefix}words", 1)])
    env = worker_env(kafka.bootstrap_servers, STREAMS_METRICS_STALL_AFTER_S="1", PYTHONPATH=str(Path.cwd()),
                     **{STALL_FLAG_ENV: str(flag)})
    worker = Worker(["stall-word", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "s0",
                     "--state-dir", str(tmp_path / "state"), "--shards", "1"], env,
                    command=[sys.executable, __file__])
    try:
        worker.wait_ready()
        assert worker.get("/healthz")[0] == 200
        flag.touch()
        produce_all(kafka, f"{prefix}words", [(None, b"stall")])
        deadline = time.monotonic() + 60
        while (answer := worker.get("/healthz"))[0] != 503:
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        assert answer[1]["status"] == "stalled" and answer[1]["seconds_since_loop_turned"] > 1
        assert worker.get("/readyz")[0] == 503
        flag.unlink()
        deadline = time.monotonic() + 30
        while worker.get("/healthz")[0] != 200:
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        worker.wait_ready(30)
    finally:
        flag.unlink(missing_ok=True)
        assert worker.stop() == 0, worker.log()


if __name__ == "__main__":
    sys.exit(cli.main(stages=[SPEC]))
