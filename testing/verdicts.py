"""The page stage's verdicts on a planted crawl (:mod:`streams.dev.simweb`): what offline mode
decides on it, and whether verdicts read from Kafka are what was planted.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from streams import records
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
        expected = {"original": "unique", "mirror": "duplicate", "identical": "duplicate"}.get(
            page.kind, offline[page.url]["verdict"])
        assert verdict["verdict"] == expected, (page.kind, page.url, verdict)
        if page.kind == "mirror":
            assert verdict["kind"] == "exact" and verdict["distance"] == 0, verdict
            assert verdict["duplicate_of"] == page.copy_of, verdict
        if page.kind == "identical":  # its text's duplicate_of: any earlier page with that text, when
            # copies race (docs/content-seen.md); its payload's first capture: the original
            assert verdict["kind"] == "exact" and verdict["first_capture_url"] == page.copy_of, verdict
        if page.kind == "near":
            assert verdict["duplicate_of"] == offline[page.url]["duplicate_of"], verdict
        assert (verdict["simhash"], verdict["digest"]) == (offline[page.url]["simhash"],
                                                          offline[page.url]["digest"])
        for name in PAYLOAD_FIELDS:  # the first capture of a byte-identical payload
            assert verdict.get(name) == offline[page.url].get(name), (name, verdict, offline[page.url])


PAYLOAD_FIELDS = ("payload_digest", "first_capture_url", "first_capture_fetched_at",
                  "first_capture_warc_record_id")


def with_identical_copies(pages: list[simweb.PlantedPage], every: int = 4) -> list[simweb.PlantedPage]:
    """``pages``, each original given a WARC-Record-ID, and every ``every``-th original fetched
    again from another host, byte for byte, an hour after the crawl's last page (kind ``identical``:
    an exact copy whose verdict names the original as the first capture of its payload; after every
    planted page, so no planted copy can take it for its earlier page)."""
    last = max(records.parse_rfc3339(page.record["fetched_at"]) for page in pages)
    out, copies = [], []
    for number, page in enumerate(pages):
        if page.kind != "original":
            out.append(page)
            continue
        record = {**page.record, "warc_record_id": f"<urn:uuid:00000000-0000-4000-8000-{number:012d}>"}
        out.append(dataclasses.replace(page, record=record))
        if len(out) % every == 0:
            later = last + timedelta(hours=1, seconds=len(copies))
            url = f"https://identical{number}.example/copy.html"
            copy = {**page.record, "url": url, "fetched_at": records.rfc3339(later)}
            copies.append(dataclasses.replace(page, url=url, record=copy, kind="identical", copy_of=page.url))
    return out + copies
