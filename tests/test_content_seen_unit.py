"""content_seen without a broker: the stage's steps on a memory store, settings refusal, the analysis pool."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streams import simweb
from streams.content_seen import ContentSeenSettings, ContentSeenStage
from streams.errors import ConfigError
from streams.runtime.offline import LineMessage, run_offline
from streams.runtime.store import MemoryStore
from streams.topics import Topics

TOPICS = Topics("unit.")


class _Sink:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.lines.extend(line for line in data.split(b"\n") if line)
        return len(data)

    def flush(self) -> None:
        pass


def _verdicts(stage: ContentSeenStage, store: MemoryStore,
              pages: list[simweb.PlantedPage]) -> list[dict[str, Any]]:
    sink = _Sink()
    run_offline(stage, store, [orjson.dumps(page.record) for page in pages], TOPICS.page_verdicts,
                out=sink)  # type: ignore[arg-type]
    return [orjson.loads(line) for line in sink.lines]


def test_a_shard_built_with_other_settings_is_refused() -> None:
    store = MemoryStore()
    pages = simweb.crawl(seed=1, articles=2)
    assert len(_verdicts(ContentSeenStage(TOPICS, "a"), store, pages)) == len(pages)
    other = ContentSeenStage(TOPICS, "a", ContentSeenSettings(hamming_threshold=4))
    with pytest.raises(ConfigError, match="block tables built as"):
        other.open_shard(0, store)


def test_waiting_state_is_gone_once_every_page_is_decided() -> None:
    store = MemoryStore()
    _verdicts(ContentSeenStage(TOPICS, "a"), store, simweb.crawl(seed=4, articles=6))
    kinds = {key[:1] for key, _ in store.items()}
    assert kinds <= {b"t", b"m"}, kinds  # buckets and metadata; no page or progress left behind


def test_analysis_processes_give_the_same_routes() -> None:
    pages = simweb.crawl(seed=6, articles=4)
    messages = [LineMessage(TOPICS.fetched_pages, number, orjson.dumps(page.record))
                for number, page in enumerate(pages)]
    messages.append(LineMessage(TOPICS.fetched_pages, len(pages), b'{"url": "https://x.example/"}'))
    inline = ContentSeenStage(TOPICS, "a")
    pooled = ContentSeenStage(TOPICS, "a", ContentSeenSettings(analysis_processes=2))
    pooled.prepare(messages)
    assert [pooled.route(m) for m in messages] == [inline.route(m) for m in messages]
