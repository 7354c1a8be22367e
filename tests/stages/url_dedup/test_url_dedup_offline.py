"""The url-dedup stage's offline mode: same route and process code, JSON lines in and out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.runtime.offline import LINES_KEY, run_offline
from streams.runtime.store import MemoryStore
from streams.stages.url_dedup.spec import SPEC
from streams.stages.url_dedup.stage import UrlDedupStage
from streams.topics import Topics
from streams.urls.canonical import fingerprint, host_of, scoped, unscoped

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def _lines(*records: object) -> list[bytes]:
    return [r if isinstance(r, bytes) else orjson.dumps(r) for r in records]


def test_each_url_once_and_bad_lines_skipped() -> None:
    topics = Topics()
    stage = UrlDedupStage()
    lines = _lines({"url": "http://a.example/x"}, b"{not json", {"url": "http://a.example/x"},
                   {"url": 5}, {"source_url": "http://a.example/"}, {"url": "http://b.example/"})
    sink = _Sink()
    written = run_offline(SPEC.topology(topics, "app"), stage, MemoryStore(), lines,
                          out=sink)  # type: ignore[arg-type]
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


@pytest.mark.parametrize(
    ("canonical", "host"),
    [("http://a.example/x", "a.example"), ("http://u:p@a.example:8080/", "a.example"),
     ("http://[2001:db8::1]:81/q", "2001:db8::1"), ("https://127.0.0.1/", "127.0.0.1")],
)
def test_host_of_a_canonical_url(canonical: str, host: str) -> None:
    assert host_of(canonical) == host


def test_offline_bloom_only_mode(tmp_path: Path) -> None:
    lines = b'{"url":"http://a.example/"}\n{"url":"HTTP://A.example:80/"}\n{"url":"http://b.example/"}\n'
    command = [sys.executable, "-m", "streams", "url-dedup", "--offline", "--seen-set", "bloom"]
    result = subprocess.run(command, input=lines, capture_output=True, cwd=PROJECT_ROOT, check=True)
    assert [orjson.loads(x)["canonical"] for x in result.stdout.splitlines()] == [
        "http://a.example/", "http://b.example/"]


def test_offline_refuses_state_of_another_profile(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "streams", "url-dedup", "--offline", "--state-dir", str(tmp_path)]
    subprocess.run(command, input=b'{"url":"http://a.example/"}\n', cwd=PROJECT_ROOT, check=True,
                   capture_output=True)
    refused = subprocess.run([*command, "--profile", "aggressive"], input=b'{"url":"http://a.example/"}\n',
                             cwd=PROJECT_ROOT, capture_output=True, check=False)
    assert refused.returncode == 2
    assert b"url-dedup-migrate" in refused.stderr


def test_canonicalize_command_writes_one_line_per_input_line() -> None:
    result = subprocess.run([sys.executable, "-m", "streams", "canonicalize", "--profile", "aggressive"],
                            input=b"HTTP://www.Example.com:80/a/../b?utm_source=x#f\nftp://example.com/\n",
                            capture_output=True, cwd=PROJECT_ROOT, check=True)
    first, second = (orjson.loads(line) for line in result.stdout.splitlines())
    assert first["canonical"] == "http://example.com/b"
    assert first["fingerprint"] == fingerprint("http://example.com/b").hex()
    assert second == {"url": "ftp://example.com/",
                      "error": "unsupported_scheme: scheme 'ftp' is not http or https"}


def _offline(stage: UrlDedupStage, store: MemoryStore,
             records: list[dict[str, object]]) -> list[dict[str, object]]:
    sink = _Sink()
    run_offline(SPEC.topology(Topics(), "app"), stage, store, _lines(*records), out=sink)  # type: ignore[arg-type]
    return [orjson.loads(line) for line in sink.data.splitlines()]


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


def test_a_named_crawl_sees_only_its_own_urls_and_an_unnamed_record_is_read_as_before() -> None:
    """A URL is new once per crawl name: a new crawl sees none of an earlier one's URLs; records
    without a name (or with null) share the unnamed crawl, keyed by the URL's fingerprint alone."""
    stage, store = UrlDedupStage(), MemoryStore()
    out = _offline(stage, store, [
        {"url": "http://a.example/x"}, {"url": "http://a.example/x", "crawl": "june"},
        {"url": "HTTP://A.example:80/x", "crawl": "june"}, {"url": "http://a.example/x", "crawl": None},
        {"url": "http://a.example/x", "crawl": "july"}, {"url": "http://a.example/x", "crawl": "june july"},
    ])
    assert [(record["canonical"], record.get("crawl")) for record in out] == [
        ("http://a.example/x", None), ("http://a.example/x", "june"), ("http://a.example/x", "july"),
        ("http://a.example/x", "june july")]
    assert [record["fingerprint"] for record in out] == [
        fingerprint("http://a.example/x").hex(), fingerprint("http://a.example/x", "june").hex(),
        fingerprint("http://a.example/x", "july").hex(), fingerprint("http://a.example/x", "june july").hex()]
    assert len({record["fingerprint"] for record in out}) == 4
    again = _offline(stage, store, [{"url": "http://a.example/x", "crawl": "june"}, {"url": "http://a.example/x"}])
    assert again == []


@pytest.mark.parametrize(("crawl", "url"), [("", "http://a.example/x"), ("june", "http://a.example/x"),
                                            ("june july", "http://a.example/a%20b"), ("a b c", "https://b.example/")])
def test_a_scoped_value_gives_back_its_crawl_and_url(crawl: str, url: str) -> None:
    assert unscoped(scoped(url, crawl)) == (crawl, url)
    assert fingerprint(url, crawl) == fingerprint(scoped(url, crawl))


class _CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.meta_writes = 0

    def set_meta(self, name: str, value: bytes) -> None:
        self.meta_writes += 1
        super().set_meta(name, value)


def test_lines_count_on_from_the_last_run_with_a_write_only_where_the_state_changed() -> None:
    """The line count a next run over the same state counts on from is stored by the lines that
    wrote state, and once at the end: a metadata write for every line cost a tenth of a URL's time
    offline. A run whose lines were all seen before still ends with its count stored."""
    topics, store = Topics(), _CountingStore()
    urls = _lines(*({"url": f"http://a.example/{n % 3}"} for n in range(30)))
    assert run_offline(SPEC.topology(topics, "app"), UrlDedupStage(), store, urls,
                       out=_Sink()) == 3  # type: ignore[arg-type]
    assert store.get_meta(LINES_KEY) == b"30"
    assert store.meta_writes <= 3 + 1 + 2  # three new URLs, the end, the stage's own metadata
    store.meta_writes = 0
    assert run_offline(SPEC.topology(topics, "app"), UrlDedupStage(), store, urls,
                       out=_Sink()) == 0  # type: ignore[arg-type]
    assert (store.get_meta(LINES_KEY), store.meta_writes) == (b"60", 1)
