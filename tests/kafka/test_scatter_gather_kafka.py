"""A stage with two internal topics, a scatter and a gather, in this file alone, run on the broker
through SIGKILLs, exactly once.

``letter-count``: lines of words in; each distinct word counted once, by its first letter. The
route step splits a line and scatters each word to the shard of the word (``scatter``); that shard
knows whether the word is new and tells the shard of its first letter (``gather``) with a typed
record, a :class:`Tally` or a :class:`Repeat`; the gather shard counts, and writes each letter's
new count to ``letter-counts``. Exactly once means: for each letter, the committed outputs are the
counts 1, 2, ... n, each once, n being the letter's distinct words. An empty line is a dead letter.

Nothing outside this file knows the stage: its records, processors, declaration and command
(``python tests/kafka/test_scatter_gather_kafka.py letter-count ...``) are here.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import orjson

from streams import cli
from streams.errors import RecordRejected
from streams.runtime.api import (
    BatchState,
    Emit,
    InternalTopic,
    Message,
    On,
    Processors,
    StageContext,
    StoreSpec,
)
from streams.runtime.extras import KafkaConfig
from streams.spec import CommandLine, StageSpec
from streams.topics import Topics


@dataclass(frozen=True)
class Word:
    text: bytes

    def encode(self) -> bytes:
        return self.text

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls(raw)


@dataclass(frozen=True)
class Tally:
    """A word seen for the first time."""

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls()


@dataclass(frozen=True)
class Repeat:
    """A word seen before."""

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        return cls()


class LetterCount:
    def store(self) -> StoreSpec:
        return StoreSpec()

    def close(self) -> None:
        pass

    def init(self, context: StageContext) -> Processors:
        self.scatter, self.gather = context.internal("scatter"), context.internal("gather")
        self.output = context.output("letter-counts")
        return Processors(route=self.route, shards={
            "scatter": [On(Word, self.word)],
            "gather": [On(Tally, self.tally), On(Repeat, self.repeat)]})

    def route(self, message: Message) -> list[Emit]:
        words = (message.value() or b"").lower().split()
        if not words:
            raise RecordRejected("empty_line", "a line without words")
        return [self.scatter.send(Word(word), word) for word in words]

    def word(self, word: Word, message: Message, state: BatchState) -> list[Emit]:
        seen = state.get(b"w" + word.text) is not None
        state.set(b"w" + word.text, b"")
        letter = word.text[:1]
        return [self.gather.send(Repeat() if seen else Tally(), letter)]

    def tally(self, tally: Tally, message: Message, state: BatchState) -> list[Emit]:
        letter = message.key() or b""
        count = int(state.get(b"n" + letter) or b"0") + 1
        state.set(b"n" + letter, str(count).encode())
        return [Emit(self.output, orjson.dumps({"letter": letter.decode(), "count": count}), letter)]

    def repeat(self, repeat: Repeat, message: Message, state: BatchState) -> list[Emit]:
        letter = message.key() or b""
        state.set(b"r" + letter, str(int(state.get(b"r" + letter) or b"0") + 1).encode())
        return []


SPEC = StageSpec("letter-count", inputs=("lines",), outputs=("letter-counts",),
                 internal=(InternalTopic("scatter", {0: Word}),
                           InternalTopic("gather", {0: Tally, 1: Repeat})),
                 build=lambda _settings, _runtime: LetterCount(),
                 cli=CommandLine("each distinct word counted once, by its first letter", metrics_port=9418))


def _lines(count: int) -> list[bytes]:
    """Lines of five words each from 4,000 distinct words (so most are repeats), and some empty."""
    words = [f"{chr(ord('a') + n % 26)}{n:04d}" for n in range(4_000)]
    lines = [" ".join(words[(7 * n + k * 13) % len(words)] for k in range(5)).encode() for n in range(count)]
    return [line if n % 997 else b"  " for n, line in enumerate(lines)]


def _expected(lines: list[bytes]) -> dict[str, int]:
    distinct = {word for line in lines for word in line.split()}
    return dict(Counter(word[:1].decode() for word in distinct))


def _check(outputs: list[dict[str, Any]], expected: dict[str, int]) -> None:
    by_letter: dict[str, list[int]] = {}
    for output in outputs:
        by_letter.setdefault(output["letter"], []).append(output["count"])
    assert {letter: sorted(counts) for letter, counts in by_letter.items()} == {
        letter: list(range(1, n + 1)) for letter, n in expected.items()}


def test_the_stage_offline_counts_each_word_once() -> None:
    lines = _lines(300)
    result = subprocess.run([sys.executable, __file__, "letter-count", "--offline"], input=b"\n".join(lines),
                            capture_output=True, timeout=120, check=True,
                            cwd=Path(__file__).resolve().parents[2])
    _check([orjson.loads(line) for line in result.stdout.splitlines()], _expected(lines))


def test_a_scatter_and_gather_stage_runs_exactly_once_through_sigkills(kafka: KafkaConfig, prefix: str,
                                                                       tmp_path: Path) -> None:
    from testing import harness as h

    lines, topics = _lines(6_000), Topics(prefix)
    h.create_topics(kafka, [f"{prefix}lines"], 3)
    h.produce(kafka, f"{prefix}lines", ((None, line) for line in lines))
    command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", "STREAMS_METRICS_ENABLED=false",
               f"PYTHONPATH={Path(__file__).resolve().parents[2]}", sys.executable, __file__,
               "letter-count", "--topic-prefix", prefix, "--app-id", "app", "--worker-id", "w0",
               "--state-dir", str(tmp_path / "state"), "--shards", "4", "--batch-max-messages", "300"]
    group = topics.group("app", "letter-count")
    internal = [topics.internal("app", "letter-count", name) for name in ("scatter", "gather")]
    report = h.run_with_kills(command, lambda: h.committed_total(kafka, group, f"{prefix}lines", 3),
                              len(lines), 3, tmp_path / "worker.log", timeout_s=600,
                              done=lambda: all(h.caught_up(kafka, group, topic) for topic in internal))
    assert (report.kills, report.exits) == (3, 0), report
    outputs = h.read_all(kafka, f"{prefix}letter-counts", value_of=lambda _key, value: value)
    _check([orjson.loads(value) for value, times in outputs.items() for _ in range(times)], _expected(lines))
    letters = h.read_all(kafka, topics.dead_letters, value_of=lambda _key, value: value)
    assert (len(letters), sum(letters.values())) == (7, 7)  # each empty line once, by its offset


if __name__ == "__main__":
    sys.exit(cli.main(stages=[SPEC]))
