"""A stage written against the registry alone, run through Kafka and SIGKILLs, exactly once.

``first-word``: each distinct word of a words topic once, on a first-words topic; an empty record
is a dead letter. This file is all of it: the stage (its two steps), its declaration, its
command (``python tests/kafka/test_registry_kafka.py first-word ...``, what ``python -m streams`` is
for the registered stages) and the check, read with read_committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from streams import cli
from streams.errors import RecordRejected
from streams.runtime.api import BatchState, Emit, Message, Processors, StageContext, StoreSpec
from streams.runtime.extras import KafkaConfig
from streams.spec import CommandLine, StageSpec
from streams.topics import Topics


class FirstWord:
    def store(self) -> StoreSpec:
        return StoreSpec()  # a RocksDB store and nothing more

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        self.shards, self.output = context.internal("shards").topic, context.output("first-words")
        return Processors(route=self.route, shards={"shards": self.process})

    def route(self, message: Message) -> list[Emit]:
        word = (message.value() or b"").strip().lower()
        if not word:
            raise RecordRejected("empty_word", "a record of the words topic carries no word")
        return [Emit(self.shards, word, word)]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        word = message.key() or b""
        if state.get(word) is not None:
            return []
        state.set(word, b"1")
        return [Emit(self.output, word, word)]


SPEC = StageSpec("first-word", inputs=("words",), outputs=("first-words",),
                 build=lambda _settings, _runtime: FirstWord(),
                 cli=CommandLine("each distinct word once", metrics_port=9419))


def test_a_registered_stage_runs_exactly_once_through_sigkills(kafka: KafkaConfig, prefix: str,
                                                               tmp_path: Path) -> None:
    from testing import harness as h

    words, topics = [f"word{i}".encode() for i in range(6_000)], Topics(prefix)
    stream = words + [words[i % len(words)].upper() for i in range(0, 30_000, 7)] + [b" "] * 5
    h.create_topics(kafka, [f"{prefix}words"], 3)
    h.produce(kafka, f"{prefix}words", ((None, word) for word in stream))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", "STREAMS_METRICS_ENABLED=false",
               f"PYTHONPATH={Path(__file__).resolve().parents[2]}", sys.executable, __file__,
               "first-word", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
               "--state-dir", str(tmp_path / "state"), "--shards", "4", "--batch-max-messages", "500"]
    group, shards = topics.group("app", "first-word"), topics.shards("app", "first-word")
    report = h.run_with_kills(command, lambda: h.committed_total(kafka, group, f"{prefix}words", 3),
                              len(stream), 3, tmp_path / "worker.log", timeout_s=600,
                              done=lambda: h.caught_up(kafka, group, shards))
    assert (report.kills, report.exits) == (3, 0), report
    assert h.verdict(set(words), h.read_all(kafka, f"{prefix}first-words")) == {
        "expected": 6_000, "emitted_distinct": 6_000, "lost": 0, "doubled": 0, "unexpected": 0}
    letters = h.read_all(kafka, topics.dead_letters, value_of=lambda _key, value: value)
    assert (len(letters), sum(letters.values())) == (5, 5)  # each empty record once, by its offset

if __name__ == "__main__":
    sys.exit(cli.main(stages=[SPEC]))
