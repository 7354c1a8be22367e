"""The minimal stateful processor: emit each key the first time it is seen.

It is the smallest stage that exercises every part of the runtime (shard state, changelog,
transactional output, offsets), so the runtime benchmark and the SIGKILL tests run it. Its input is
keyed already and is its own shard topic (no routing hop); real stages add the re-keying hop. Its
declaration (the topics named on the command line) is :mod:`streams.stages.first_seen.spec`.
"""

from __future__ import annotations

from streams.errors import RecordRejected
from streams.runtime.api import BatchState, Emit, Message, Processors, StageContext, StoreSpec

SEEN = b"\x01"


class FirstSeenStage:
    """Emit ``(key, value)`` to its output the first time ``key`` appears on its input."""

    def __init__(self) -> None:
        self._output = ""

    def store(self) -> StoreSpec:
        return StoreSpec()

    def init(self, context: StageContext) -> Processors:
        self._output = context.output("output")
        return Processors(shards={"input": self.process})

    def close(self) -> None:
        """Nothing of its own to stop."""

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if not key:
            raise RecordRejected("missing_key", "first-seen records must carry a key")
        if state.get(key) is not None:
            return []
        state.set(key, SEEN)
        return [Emit(self._output, message.value(), key)]
