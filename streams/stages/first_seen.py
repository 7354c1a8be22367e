"""The minimal stateful processor: emit each key the first time it is seen.

It is the smallest stage that exercises every part of the runtime (shard state, changelog,
transactional output, offsets), so the runtime benchmark and the SIGKILL tests run it. Its input is
keyed already and is its own shard topic (no routing hop); real stages add the re-keying hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.errors import RecordRejected
from streams.runtime.batch import BatchState, Emit
from streams.runtime.stage import Message, Needs, StageContext

SEEN = b"\x01"


@dataclass
class FirstSeenStage:
    """Emit ``(key, value)`` to ``output_topic`` the first time ``key`` appears on ``input_topic``."""

    input_topic: str
    output_topic: str
    name: str = "first-seen"
    route_topics: list[str] = field(default_factory=list)

    @property
    def state_topic(self) -> str:
        return self.input_topic

    def needs(self) -> Needs:
        return Needs()

    def bind(self, context: StageContext) -> None:
        pass

    def route(self, message: Message) -> list[Emit]:
        raise AssertionError("first-seen has no input topics to route")

    def process(self, message: Message, state: BatchState) -> list[Emit]:
        key = message.key()
        if not key:
            raise RecordRejected("missing_key", "first-seen records must carry a key")
        if state.get(key) is not None:
            return []
        state.set(key, SEEN)
        return [Emit(self.output_topic, message.value(), key)]
