"""Hostile input without a broker: the generator's expectations against the stages' own code, and
the fixes the hostile mix led to, table by table (tests/kafka/test_hostile_kafka.py runs it through Kafka).
"""

from __future__ import annotations

import gzip
import random
import time
import zlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import records, registry
from streams.config import RuntimeSettings
from streams.errors import RecordRejected
from streams.pages.features import token_hashes
from streams.pages.simhash import ROWS_AT_ONCE, simhash64
from streams.records import RecordKind
from streams.runtime.batch import Emit
from streams.runtime.engine import Engine
from streams.runtime.kafka_io import CLIENT_MAX_MESSAGE_BYTES, RECORD_OVERHEAD, KafkaConfig
from streams.runtime.offline import OfflineDriver
from streams.runtime.runner import OUTPUT_HEADROOM, topic_size_config
from streams.runtime.stage import Stage
from streams.runtime.store import MemoryStore
from streams.stages.content_seen.route import MAX_URL_BYTES
from streams.stages.content_seen.stage import ContentSeenStage
from streams.stages.revisit.schedule import RevisitOutcome
from streams.stages.revisit.stage import RevisitStage, _content_length, revisit_update
from streams.stages.url_dedup.stage import UrlDedupStage
from streams.topics import Topics
from streams.urls import canonical
from testing import hostile
from testing.hostile import PAGE_STAGE, PROCESSED, REVISIT_STAGE, URL_STAGE, Case
from testing.memory_kafka import MemoryKafka
from testing.stages import EchoStage, plain_topology, running

TOPICS = Topics("h.")


def _offline(stage: Stage) -> OfflineDriver:
    """``stage`` (of the registry's stage of its class) driven offline over a fresh store."""
    name = {UrlDedupStage: URL_STAGE, ContentSeenStage: PAGE_STAGE, RevisitStage: REVISIT_STAGE}[type(stage)]
    return OfflineDriver(registry.spec(name).topology(TOPICS, "a"), stage, MemoryStore())


# --- the generator -----------------------------------------------------------------------------------


def test_the_mix_is_deterministic_and_has_every_kind() -> None:
    first, again = hostile.frontier_mix(400, 50, big=0), hostile.frontier_mix(400, 50, big=0)
    assert [(c.kind, c.value, c.key) for c in first] == [(c.kind, c.value, c.key) for c in again]
    assert Counter(c.valid for c in first) == {False: 400, True: 50}
    assert {c.kind for c in first} - {"valid"} == set(hostile._frontier_kinds())
    pages = hostile.pages_mix(400, 50, big=1)
    assert {c.kind for c in pages} - {"valid"} == set(hostile._page_kinds()) | {"page_10mb", "page_17mb",
                                                                               "gzip_bomb"}


def test_processed_frontier_urls_are_distinct_canonical_urls() -> None:
    """So each gives exactly one new URL, which the Kafka test counts."""
    urls = [canonical.canonicalize(str(c.url)) for c in hostile.processed(hostile.frontier_mix(), URL_STAGE)]
    assert len(urls) == len(set(urls))


def test_the_gzip_bomb_inflates_to_a_gibibyte_of_zeros() -> None:
    """Built from one compressed mebibyte (0.2 s, where compressing the gibibyte takes 3 s): checked
    whole on a smaller one, and on the gibibyte by its trailer and its first 16 MiB."""
    assert gzip.decompress(hostile.gzip_bomb(8 * hostile.MIB)) == bytes(8 * hostile.MIB)
    bomb = hostile.gzip_bomb()
    assert len(bomb) < hostile.BOMB_BYTES // 500
    assert int.from_bytes(bomb[-4:], "little") == hostile.BOMB_BYTES % 2 ** 32  # ISIZE, RFC 1952
    inflate = zlib.decompressobj(31)
    assert inflate.decompress(bomb, 16 * hostile.MIB) == bytes(16 * hostile.MIB)  # bounded output


def _outcome(driver: OfflineDriver, offset: int, case: Case, output: str) -> tuple[str, list[Any]]:
    """What the stage makes of one case, as the engine would file it: processed, or the reason."""
    try:
        emits = driver.decide(driver.message(offset, case.value, case.key))
    except RecordRejected as rejected:
        return rejected.reason, []
    except Exception as error:  # noqa: BLE001 - the engine's processing_error
        return f"processing_error {error!r}", []
    return PROCESSED, [orjson.loads(e.value or b"") for e in emits if e.topic == output]


@pytest.mark.parametrize(("name", "stage", "output"), [
    (URL_STAGE, UrlDedupStage(), TOPICS.new_urls),
    (PAGE_STAGE, ContentSeenStage(), TOPICS.page_verdicts),
    (REVISIT_STAGE, RevisitStage(), TOPICS.revisit_updates),
], ids=[URL_STAGE, PAGE_STAGE, REVISIT_STAGE])
def test_every_case_meets_its_expectation(name: str, stage: Stage, output: str) -> None:
    mix = hostile.frontier_mix if name == URL_STAGE else hostile.pages_mix
    cases = mix(600, 40, 1)
    driver, wrong = _offline(stage), Counter[tuple[str, str, str]]()
    for offset, case in enumerate(cases):
        got, outputs = _outcome(driver, offset, case, output)
        if got != case.expect[name]:
            wrong[(case.kind, case.expect[name], got)] += 1
        elif got == PROCESSED:
            assert [o["url"] for o in outputs] == [case.url], case.kind
            said = [f"{o['verdict']}:{o['reason']}" if o.get("reason") else o.get("verdict") for o in outputs]
            assert name != PAGE_STAGE or case.verdict in (None, said[0]), (case.kind, said)
    assert not wrong


# --- the fixes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("depth", "reason"), [
    (1, None), (127, None), (128, "invalid_json"), (300, "invalid_json"), (2000, "invalid_json")])
def test_nesting_is_limited_to_what_can_be_written_back(depth: int, reason: str | None) -> None:
    """The record is level 1; orjson writes 254 levels at most, so 300 used to pass and then fail."""
    raw = b'{"url": "http://x.example/", "x": ' + b"[" * depth + b"]" * depth + b"}"
    if reason is None:
        orjson.dumps(records.decode(RecordKind.FRONTIER_URL, raw))
    else:
        with pytest.raises(RecordRejected) as rejected:
            records.decode(RecordKind.FRONTIER_URL, raw)
        assert rejected.value.reason == reason


@pytest.mark.parametrize(("url", "reason"), [
    ("http://x.example/" + "a" * (MAX_URL_BYTES - 17), None),
    ("http://x.example/" + "a" * (MAX_URL_BYTES - 16), "url_too_long"),
    ("http://x.example/" + "\u00e9" * 2040, "url_too_long"),  # 2,057 characters, 4,097 bytes
    ("javascript:void(0)", None),  # not canonicalized here: a page is a page
])
def test_the_page_stage_bounds_urls(url: str, reason: str | None) -> None:
    page = orjson.dumps({"url": url, "body": "<p>some words of text</p>"})
    got, outputs = _outcome(_offline(ContentSeenStage()), 0, Case("t", page, {}), TOPICS.page_verdicts)
    assert got == (reason or PROCESSED)
    assert [o["url"] for o in outputs] == ([] if reason else [url])


@pytest.mark.parametrize(("declared", "expected"), [
    ("123", 123), (" 42 ", 42), ("9" * 18, 10 ** 18 - 1), ("9" * 19, 3), ("9" * 5000, 3),
    ("-1", 3), ("\u0661\u0662", 3), ("", 3)])
def test_an_unreadable_content_length_is_the_body_length(declared: str, expected: int) -> None:
    assert _content_length({"body": "abc"}, {"content-length": declared}, b"abc") == expected


@pytest.mark.parametrize(("next_fetch", "written"), [
    (datetime(2024, 5, 1, tzinfo=UTC).timestamp(), "2024-05-01T00:00:00.000Z"),
    (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() + 86400.0, "9999-12-31T23:59:59.000Z"),
    (-1e15, "0001-01-01T00:00:00.000Z")])
def test_next_fetch_times_stay_within_rfc3339_years(next_fetch: float, written: str) -> None:
    outcome = RevisitOutcome(None, None, "first_fetch", 86400.0, next_fetch, None, {})
    assert revisit_update("http://x.example/", outcome)["next_fetch_at"] == written


def _first_batch(stage: Stage, record: bytes, limits: dict[str, int] | None = None,
                 outputs: tuple[str, ...] = ("out",), offset: int = 0) -> tuple[MemoryKafka, Engine]:
    """Run one batch of ``stage`` over ``record``, at ``offset`` of partition 1 of its input (after
    records of another key)."""
    with running(stage, plain_topology(outputs=outputs), limits=limits) as (engine, broker, _):
        for _ in range(offset):
            broker.append("in", 1, b"orig", b'{"k": "earlier"}')
        broker.append("in", 1, b"orig", record)
        engine.step()
        return broker, engine


def _topics(broker: MemoryKafka) -> list[str]:
    """Where the batch's records went, the changelog left out."""
    return [event.split()[1] for event in broker.events
            if event.startswith("produce ") and "changelog" not in event]


@pytest.mark.parametrize(("limits", "value_bytes", "topic", "key"), [
    ({"shards": 100}, 90, "shards", b"k"),
    ({"shards": 100}, 120, "dlq", b"k"),
    (None, CLIENT_MAX_MESSAGE_BYTES - RECORD_OVERHEAD - 40, "shards", b"k"),   # librdkafka's default
    (None, CLIENT_MAX_MESSAGE_BYTES, "dlq", b"k"),
    ({"shards": 20 * hostile.MIB}, 10 * hostile.MIB, "shards", b"k"),
])
def test_an_output_over_its_topic_limit_is_a_dead_letter(limits: dict[str, int] | None, value_bytes: int,
                                                         topic: str, key: bytes) -> None:
    value = orjson.dumps({"k": "k", "pad": "p" * (value_bytes - 20)})
    broker, engine = _first_batch(EchoStage(), value, limits, offset=3)
    if topic == "shards":
        assert value in [m.value() for m in broker.committed_records("shards")]
        assert not broker.committed_records("dlq")
    else:
        [letter] = broker.committed_records("dlq")
        record = orjson.loads(letter.value() or b"")
        assert (record["reason"], record["source_offset"], record["value_size"]) == (
            "output_too_large", 3, len(value))
        assert engine.counters.dead_letters_by_reason == {"output_too_large": 1}


def test_a_refused_output_leaves_no_part_of_itself_behind() -> None:
    class TwoEmits(EchoStage):
        def route(self, message: Any) -> list[Emit]:
            return [Emit("small", b"x"), Emit("big", b"y" * 200)]

    broker, _ = _first_batch(TwoEmits(), b"{}", {"small": 100, "big": 100}, outputs=("small", "big"))
    assert _topics(broker) == ["dlq"]


@pytest.mark.parametrize(("client", "asked", "expected"), [
    ({}, None, None), ({}, 20_000_000, 20_000_000), ({}, 5_000_000_000, 1_000_000_000),
    ({"message.max.bytes": "2000000"}, 20_000_000, "2000000")])
def test_the_producer_takes_records_as_large_as_the_topics(client: dict[str, str], asked: int | None,
                                                           expected: object) -> None:
    conf = KafkaConfig("127.0.0.1:1", client).transactional_producer("t", 30.0, max_message_bytes=asked)
    assert conf.get("message.max.bytes") == expected


@pytest.mark.parametrize("max_record_bytes", [1000, 16 * hostile.MIB])
def test_stage_topics_take_the_largest_record_and_what_a_stage_adds(max_record_bytes: int) -> None:
    size = int(topic_size_config(max_record_bytes)["max.message.bytes"])
    assert size == max_record_bytes + OUTPUT_HEADROOM + RECORD_OVERHEAD


# Letters, digits, marks, CJK, kana, Thai, astral ideographs and letters, separators.
_TEXT = st.text(st.sampled_from("ab Z9-.\u00e9\u0301\u4e2d\u6587\u3042\u30ab \u0e01\U00020000"
                                "\U0001d401\u00df,\n"), max_size=60)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, piece_chars=st.integers(1, 9), gram=st.integers(1, 3))
def test_tokens_hashed_in_pieces_are_the_tokens_of_the_whole(text: str, piece_chars: int, gram: int) -> None:
    """Long texts are hashed a megabyte at a time (400 MB less for a 10 MB page): same hashes."""
    whole = token_hashes(text, cjk_ngram_chars=gram, piece_chars=10 ** 9)
    assert token_hashes(text, cjk_ngram_chars=gram, piece_chars=piece_chars).tolist() == whole.tolist()


def test_a_long_text_hashed_in_pieces_is_unchanged() -> None:
    text = hostile._text(random.Random(5), 400_000) + "\u4e2d\u6587" * 1000 + "x" * 20_000
    assert token_hashes(text).tolist() == token_hashes(text, piece_chars=10 ** 9).tolist()
    assert token_hashes(text, piece_chars=1000).tolist() == token_hashes(text, piece_chars=10 ** 9).tolist()


@pytest.mark.parametrize("features", [1, ROWS_AT_ONCE - 1, ROWS_AT_ONCE, ROWS_AT_ONCE + 1,
                                      3 * ROWS_AT_ONCE + 7])
def test_a_simhash_summed_in_parts_is_the_simhash_of_the_whole(features: int) -> None:
    """The product goes 65,536 features at a time (770 MB less for a 10 MB page): same fingerprint."""
    generator = np.random.default_rng(features)
    hashes = generator.integers(0, 2 ** 64, features, dtype=np.uint64)
    weights = generator.integers(1, 50, features).astype(np.float64)
    matrix = np.unpackbits(hashes.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    bits = (2.0 * (weights @ matrix) > weights.sum()).astype(np.uint8)
    assert simhash64(hashes, weights) == int(np.packbits(bits, bitorder="little").view("<u8")[0])


@pytest.mark.parametrize(("timeout_s", "parts"), [(30.0, {1}), (0.15, {2, 3, 4, 5, 6})])
def test_a_batch_that_runs_long_is_committed_in_parts(timeout_s: float, parts: set[int]) -> None:
    """Slow records (0.04 s each here) must not hold one transaction open past its timeout, which the
    broker punishes by aborting it and fencing the producer: then the batch failed on every retry."""
    class Slow(EchoStage):
        def route(self, message: Any) -> list[Emit]:
            time.sleep(0.04)
            return super().route(message)

    settings_ = RuntimeSettings(worker_id="w", shards=2, transaction_timeout_s=timeout_s)
    with running(Slow(), settings=settings_) as (engine, broker, _):
        for offset in range(6):
            broker.append("in", 0, None, b'{"k": "%d"}' % offset)
        engine.step()
    commits = [offsets[("in", 0)] for offsets in broker.commits]
    assert len(commits) in parts  # a budget of a third of the timeout: 0.05 s, about two records a part
    assert commits == sorted(set(commits)) and commits[-1] == 6
    assert len(broker.committed_records("shards")) == 6 and engine.counters.consumed == 6


def test_a_dead_letter_a_stage_writes_itself_is_counted_by_its_reason() -> None:
    """The page stage's page_unavailable: the verdict stands, so no exception reaches the engine."""
    class VerdictAndLetter(EchoStage):
        def route(self, message: Any) -> list[Emit]:
            letter = records.dead_letter(reason="page_unavailable", detail="gone", stage="s", topic="in",
                                         partition=0, offset=7, key=None, value=None)
            return [Emit("verdicts", b"v"), Emit("dlq", letter)]

    broker, engine = _first_batch(VerdictAndLetter(), b"{}", outputs=("verdicts",))
    assert _topics(broker) == ["verdicts", "dlq"]
    assert (engine.counters.dead_letters, engine.counters.dead_letters_by_reason) == (
        1, {"page_unavailable": 1})
