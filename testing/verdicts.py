"""The page stage's verdicts on a planted crawl (:mod:`streams.dev.simweb`): what offline mode
decides on it, and whether verdicts read from Kafka are what was planted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from streams.dev import simweb
from streams.runtime.kafka_io import KafkaConfig
from testing.cli import run_cli


def offline_verdicts(kafka: KafkaConfig, pages: list[simweb.PlantedPage],
                      state: Path) -> list[dict[str, Any]]:
    lines = b"".join(orjson.dumps(page.record) + b"\n" for page in pages)
    result = run_cli(kafka, "content-seen", "--offline", "--state-dir", str(state), stdin=lines)
    assert result.returncode == 0, result.stderr.decode()
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def check_against_plan(pages: list[simweb.PlantedPage], verdicts: list[dict[str, Any]],
                        reference: list[dict[str, Any]]) -> None:
    """One verdict per page; originals unique, mirrors (same main text) exact duplicates of their
    originals; near copies as the offline mode decided them (whether 2 changed words stay within k
    bits is SimHash's call)."""
    by_url = Counter(v["url"] for v in verdicts)
    assert set(by_url) == {page.url for page in pages}
    assert max(by_url.values()) == 1, "a page got two verdicts"
    found = {v["url"]: v for v in verdicts}
    offline = {v["url"]: v for v in reference}
    for page in pages:
        verdict = found[page.url]
        expected = {"original": "unique", "mirror": "duplicate"}.get(page.kind, offline[page.url]["verdict"])
        assert verdict["verdict"] == expected, (page.kind, page.url, verdict)
        if page.kind == "mirror":
            assert verdict["kind"] == "exact" and verdict["distance"] == 0, verdict
            assert verdict["duplicate_of"] == page.copy_of, verdict
        if page.kind == "near":
            assert verdict["duplicate_of"] == offline[page.url]["duplicate_of"], verdict
        assert (verdict["simhash"], verdict["digest"]) == (offline[page.url]["simhash"],
                                                          offline[page.url]["digest"])
