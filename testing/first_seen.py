"""The runtime's minimal stateful stage: emit each key of a keyed stream the first time it is seen.

The smallest stage that exercises every part of the runtime (a shard's state, its changelog,
transactional output, offsets, the local path), so the runtime benchmark (``bench/runtime_bench.py``,
its ``confluent`` row) and the SIGKILL test of the runtime (``tests/kafka/test_crash_kafka.py``) run
it. Not one of the crawl's stages, so not in the package: run it as

    python -m testing.first_seen --input IN --output OUT [worker options]

Its route sends each record on to its shard by its own key; a worker that owns the shard decides
it at once (:mod:`streams.runtime.local_path`), so with one worker the records make one hop, as
they did when its input was its shard topic.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from streams import cli
from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.runtime.api import BatchState, Emit, Message, Processors, Stage, StageContext, StoreSpec
from streams.spec import CommandLine, StageSpec

SEEN = b"\x01"


class FirstSeenStage:
    """Emit ``(key, value)`` to its output the first time ``key`` appears on its input."""

    def __init__(self) -> None:
        self._shards = self._output = ""

    def store(self) -> StoreSpec:
        return StoreSpec()

    def init(self, context: StageContext) -> Processors:
        self._shards, self._output = context.internal("shards").topic, context.output("output")
        return Processors(route=self.route, shards={"shards": self.process})

    def close(self) -> None:
        """Nothing of its own to stop."""

    def route(self, message: Message) -> list[Emit]:
        key = message.key()
        if not key:
            raise RecordRejected("missing_key", "first-seen records must carry a key")
        return [Emit(self._shards, message.value(), key)]

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key() or b""
        if state.get(key) is not None:
            return []
        state.set(key, SEEN)
        return [Emit(self._output, message.value(), key)]


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    return FirstSeenStage()


def _topic_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--input", required=True, help="keyed input topic")
    command.add_argument("--output", required=True)


def _topic_names(args: argparse.Namespace) -> dict[str, str]:
    return {"input": args.input, "output": args.output}


SPEC = StageSpec(
    "first-seen", inputs=("input",), outputs=("output",), build=_build,
    cli=CommandLine("a minimal stateful processor (benchmarks)", metrics_port=9413, offline=False,
                    topic_options=_topic_options, topic_names=_topic_names,
                    description="The runtime's minimal stateful processor: the first record of each "
                                "key, once (benchmarks and crash tests)."))


def main(argv: Sequence[str] | None = None) -> int:
    """The stage's worker command: ``first-seen`` with ``argv`` (the command line's by default)."""
    return cli.main(["first-seen", *(sys.argv[1:] if argv is None else argv)], stages=[SPEC])


if __name__ == "__main__":
    sys.exit(main())
