"""A stage in one file: each new item of a group numbered 1, 2, 3... in the order the group met them.

What a stage of one's own is made of, with the runtime's parts a real one uses: an internal
topic (``groups``: items re-keyed by their group, so that a group's count lives in one shard), the
local path (a worker that owns a group's shard numbers its items in the transaction that routed
them) and two named stores (:mod:`streams.runtime.tables`): ``counts`` (group -> items numbered)
and ``seen`` (group and item -> its number), one keyed by the group, one moved by the group part of
its key. Its output is exactly once when both stores, the output and the offsets commit together:
a lost count would number two items alike, a count kept for a lost output would leave a gap
(``tests/kafka/test_crash_kafka.py`` checks both under SIGKILL). Run it as

    python -m testing.numbered --input IN --output OUT [worker options]

Input records: key = the item, value = its group (no NUL byte). Output: key = the item, value =
``group NUMBER``. A record without either is a dead letter.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from streams import cli
from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.runtime.api import (
    BatchState,
    Emit,
    InternalTopic,
    Message,
    Processors,
    Stage,
    StageContext,
    StoreSpec,
    Table,
    partition_for,
)
from streams.runtime.extras import Placed
from streams.spec import CommandLine, StageSpec

SEP = b"\x00"


class ByGroup:
    """The move of ``seen``: an entry goes to the shard of its group, the part of its key before NUL."""

    def __init__(self, old_shards: int, shards: int) -> None:
        self.shards = shards

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        group = key[len(SEEN.prefix):].partition(SEP)[0]
        return ((partition_for(group, self.shards), key, value),)

    def finish(self) -> Iterable[Placed]:
        return ()


COUNTS = Table(b"c")  # group -> decimal count; moved by the group, the default
SEEN = Table(b"s", ByGroup)  # group NUL item -> decimal number


class NumberedStage:
    """Numbers each group's new items; an item met again is not numbered again."""

    def __init__(self) -> None:
        self._groups = self._output = ""

    def store(self) -> StoreSpec:
        return StoreSpec(tables={"counts": COUNTS, "seen": SEEN})

    def init(self, context: StageContext) -> Processors:
        self._groups, self._output = context.internal("groups").topic, context.output("output")
        return Processors(route=self.route, shards={"groups": self.number})

    def close(self) -> None:
        """Nothing of its own to stop."""

    def route(self, message: Message) -> list[Emit]:
        item, group = message.key(), message.value()
        if not item or not group or SEP in group:
            raise RecordRejected("schema", "a record needs an item (key) and a group without NUL (value)")
        return [Emit(self._groups, item, group)]

    def number(self, message: Message, state: BatchState) -> list[Emit]:
        group, item = message.key() or b"", message.value() or b""
        if SEEN.get(state, group + SEP + item) is not None:
            return []
        number = int(COUNTS.get(state, group) or b"0") + 1
        COUNTS.set(state, group, b"%d" % number)
        SEEN.set(state, group + SEP + item, b"%d" % number)
        return [Emit(self._output, group + b" %d" % number, item)]


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    return NumberedStage()


def _topic_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--input", required=True, help="items keyed by themselves, their group as value")
    command.add_argument("--output", required=True)


def _topic_names(args: argparse.Namespace) -> dict[str, str]:
    return {"input": args.input, "output": args.output}


SPEC = StageSpec(
    "numbered", inputs=("input",), outputs=("output",), build=_build, internal=(InternalTopic("groups"),),
    cli=CommandLine("each group's new items numbered (a stage in one file)", metrics_port=9414,
                    offline=False, topic_options=_topic_options, topic_names=_topic_names,
                    description="Each new item of a group numbered in the order the group met it, "
                                "exactly once: a stage of two named stores, in one file."))


def main(argv: Sequence[str] | None = None) -> int:
    """The stage's worker command: ``numbered`` with ``argv`` (the command line's by default)."""
    return cli.main(["numbered", *(sys.argv[1:] if argv is None else argv)], stages=[SPEC])


if __name__ == "__main__":
    sys.exit(main())
