"""The url-dedup stage's offline mode: same route and process code, JSON lines in and out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from streams.runtime.offline import run_offline
from streams.runtime.store import MemoryStore
from streams.topics import Topics
from streams.url_dedup import UrlDedupStage
from streams.urls.canonical import fingerprint

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _lines(*records: object) -> list[bytes]:
    return [r if isinstance(r, bytes) else orjson.dumps(r) for r in records]


def test_each_url_once_and_bad_lines_skipped() -> None:
    topics = Topics()
    stage = UrlDedupStage(topics, "app")
    lines = _lines({"url": "http://a.example/x"}, b"{not json", {"url": "http://a.example/x"},
                   {"url": 5}, {"source_url": "http://a.example/"}, {"url": "http://b.example/"})

    class Sink:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> int:
            self.data += data
            return len(data)

        def flush(self) -> None:
            pass

    sink = Sink()
    written = run_offline(stage, MemoryStore(), lines, topics.new_urls, out=sink)  # type: ignore[arg-type]
    out = [orjson.loads(line) for line in sink.data.splitlines()]
    assert written == 2
    assert [(r["url"], r["host"]) for r in out] == [("http://a.example/x", "a.example"),
                                                     ("http://b.example/", "b.example")]
    assert [r["canonical"] for r in out] == ["http://a.example/x", "http://b.example/"]
    assert out[0]["fingerprint"] == fingerprint("http://a.example/x").hex()


def test_offline_cli_keeps_state_in_its_directory(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "streams", "url-dedup", "--offline", "--state-dir", str(tmp_path)]
    first = subprocess.run(command, input=b'{"url":"http://a.example/"}\n', capture_output=True,
                           cwd=PROJECT_ROOT, check=True)
    again = subprocess.run(command, input=b'{"url":"http://a.example/"}\n{"url":"http://c.example/"}\n',
                           capture_output=True, cwd=PROJECT_ROOT, check=True)
    assert len(first.stdout.splitlines()) == 1
    assert [orjson.loads(x)["url"] for x in again.stdout.splitlines()] == ["http://c.example/"]
