"""The revisit stage offline: one update per fetched page, in order, through route and process."""

from __future__ import annotations

import base64
import dataclasses
import io
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams import config, records
from streams.errors import StateError
from streams.records import RecordKind
from streams.runtime.batch import BatchState
from streams.runtime.offline import LineMessage, run_offline
from streams.runtime.store import MemoryStore
from streams.stages.revisit.allocation import RATE_BINS
from streams.stages.revisit.budget import BudgetState
from streams.stages.revisit.history import decode_history, encode_history
from streams.stages.revisit.hosts import HostChanges, host_key
from streams.stages.revisit.move import ALLOCATION_KEY, IDENTITY_KEY
from streams.stages.revisit.spec import SPEC
from streams.stages.revisit.stage import STATE_IDENTITY, RevisitSettings, RevisitStage
from streams.topics import Topics
from testing.stages import bind

TOPICS = Topics("test.")
TOPOLOGY = SPEC.topology(TOPICS, "test")
PARAGRAPH = ("The river council met on Tuesday to discuss the budget for the new bridge, the harbour "
             "railway and the museum garden, and the minister said the plan would be signed in winter. ")


def page(day: int, text: str = PARAGRAPH * 4, views: int = 1, **fields: Any) -> dict[str, Any]:
    body = (f"<html><body><nav><a href='/'>Home</a></nav><article><h1>Report</h1><p>{text}</p></article>"
            f"<footer>Views: {views}</footer></body></html>")
    record = {"url": "http://Example.com:80/a", "status": 200, "content_type": "text/html; charset=utf-8",
              "body": body, "fetched_at": f"2024-05-{day:02d}T12:00:00Z"}
    record.update(fields)
    return record


def run(lines: list[dict[str, Any] | bytes], settings: RevisitSettings | None = None,
        store: MemoryStore | None = None) -> list[dict[str, Any]]:
    stage = RevisitStage(settings or RevisitSettings())
    out = io.BytesIO()
    encoded = [line if isinstance(line, bytes) else orjson.dumps(line) for line in lines]
    run_offline(TOPOLOGY, stage, store or MemoryStore(), encoded, out=out)
    updates = [orjson.loads(line) for line in out.getvalue().splitlines()]
    for update in updates:
        records.decode(RecordKind.REVISIT_UPDATE, orjson.dumps(update))
    return updates


def test_one_update_per_page_in_order() -> None:
    lines = [
        page(1, headers={"ETag": '"v1"', "Last-Modified": "Wed, 01 May 2024 00:00:00 GMT"}),
        page(2, views=2),                                                     # footer counter only
        {"url": "http://example.com/a", "status": 304, "fetched_at": "2024-05-03T12:00:00Z"},
        page(4, text=PARAGRAPH * 4 + "A new section on the railway station opened today. " * 6),
        {"url": "http://example.com/a", "method": "HEAD", "status": 200, "fetched_at": "2024-05-05T12:00:00Z",
         "headers": {"Content-Length": "12"}},
        {"url": "http://example.com/a", "status": 503, "fetched_at": "2024-05-06T12:00:00Z"},
        page(1, url="http://other.example/b"),
    ]
    updates = run(lines)
    assert [u["signal"] for u in updates] == ["first_fetch", "text_digest", "not_modified", "wording",
                                             "head_changed", "fetch_error", "first_fetch"]
    assert [u.get("change_distance") for u in updates][:2] == [None, 0] and updates[3]["change_distance"] > 0
    assert [u["changed"] for u in updates] == [None, False, False, True, None, None, None]
    assert updates[0]["conditional_headers"] == {"If-None-Match": '"v1"',
                                                 "If-Modified-Since": "Wed, 01 May 2024 00:00:00 GMT"}
    assert updates[0]["next_fetch_at"] == "2024-05-02T12:00:00.000Z" and updates[0]["interval_s"] == 86400
    assert updates[2]["change_rate_estimate"] > 0
    assert (updates[4]["fetch_needed"], updates[4]["fetch_needed_reason"]) == (True, "content_length_changed")
    assert updates[4]["next_fetch_at"] == "2024-05-05T12:00:00.000Z"
    assert updates[6]["url"] == "http://other.example/b"


def counted(day: int, views: int, version: str = "3.12.7", hour: int = 12,
            url: str = "http://example.com/a") -> dict[str, Any]:
    """A page whose article holds a view counter (churn) and a release number (content)."""
    text = PARAGRAPH * 6 + f"Read {views:,} times. The current release is {version}."
    return page(day, text=text, url=url, fetched_at=f"2024-05-{day:02d}T{hour:02d}:00:00Z")


def test_numbers_that_churn_are_learned_apart_from_numbers_that_are_content() -> None:
    """The counter moves at every fetch: the first time the page cannot tell and probes an hour
    later; the counter moving again there is churn, the release number standing still is content,
    and from then on the counter alone is no change and the release number is one."""
    lines = [counted(1, 1041), counted(2, 1042), counted(2, 1043, hour=13), counted(3, 1050),
             counted(4, 1051, version="3.12.8"), counted(5, 1052, version="3.12.8")]
    edited = dict(lines[-1], body=lines[-1]["body"].replace("river", "canal", 1),
                  fetched_at="2024-05-06T12:00:00Z")
    updates = run([*lines, edited])
    assert [(u["changed"], u["signal"]) for u in updates[1:]] == [
        (None, "numbers_unlearned"), (False, "number_churn"), (False, "number_churn"),
        (True, "number_edit"), (False, "number_churn"), (True, "wording")]
    assert updates[1]["interval_s"] == 3600 and updates[1]["next_fetch_at"] == "2024-05-02T13:00:00.000Z"
    assert updates[-1]["change_distance"] <= 6   # a small edit, graded small, still a change


def test_a_fetch_too_late_to_be_the_probe_places_nothing() -> None:
    """A fetcher that does not follow the probe's time: a day later the release number and the
    counter have both moved again, which says nothing about which is churn; still unplaced."""
    updates = run([counted(1, 1041), counted(2, 1042, version="3.12.8"), counted(3, 1043, version="3.12.9")])
    assert [u["signal"] for u in updates[1:]] == ["numbers_unlearned", "numbers_unlearned"]


def test_a_probe_is_unconditional_and_a_304_to_it_places_nothing() -> None:
    """A server whose ETag follows the content answers a conditional probe 304 whether the counter
    or the release number moved before it, so the probe's update sends no conditional headers; a
    fetcher that sends them anyway gets a 304 that places nothing, and the next full response
    that moves the numbers again is still undecided (a probe again), not an edit."""
    def tagged(line: dict[str, Any], tag: str) -> dict[str, Any]:
        return dict(line, headers={"ETag": f'"{tag}"'})

    not_modified = {"url": "http://example.com/a", "status": 304, "fetched_at": "2024-05-02T13:00:00Z",
                    "headers": {"ETag": '"v1"'}}
    updates = run([tagged(counted(1, 1041), "v1"), tagged(counted(2, 1042), "v1"),
                   not_modified, tagged(counted(3, 1050), "v1")])
    assert [(u["changed"], u["signal"]) for u in updates[1:]] == [
        (None, "numbers_unlearned"), (False, "not_modified"), (None, "numbers_unlearned")]
    assert updates[1]["conditional_headers"] == {} and updates[3]["conditional_headers"] == {}
    assert updates[2]["conditional_headers"] == {"If-None-Match": '"v1"'}


def test_a_host_whose_pages_agree_on_a_churning_number_spares_its_next_pages_the_probe() -> None:
    lines = []
    for index in range(3):
        url = f"http://example.com/{index}"
        lines += [counted(1, 100, url=url), counted(2, 200, url=url), counted(2, 300, hour=13, url=url)]
    updates = run(lines)
    assert [u["signal"] for u in updates[1::3]] == ["numbers_unlearned", "numbers_unlearned", "number_churn"]


def test_a_threshold_set_by_the_operator_ignores_small_edits() -> None:
    edited = PARAGRAPH.replace("river", "canal") + PARAGRAPH * 5
    updates = run([page(1, text=PARAGRAPH * 6), page(2, text=edited)], RevisitSettings(simhash_threshold=10))
    assert (updates[1]["changed"], updates[1]["signal"]) == (False, "simhash_trivial")


def test_histories_of_format_1_are_read_and_compared_once_without_wording() -> None:
    """A store written before wording digests (history format 1, no state identity) is adopted: its
    histories are read, the first fetch whose text differs is undecided, the next ones decided (a
    full response, changed or not, stores the wording digest)."""
    store = MemoryStore()
    run([page(1)], store=store)
    key = next(k for k, _ in store.items() if k.startswith(b"h"))
    history = decode_history(store.get(key) or b"")
    legacy = dataclasses.replace(history, wording_digest=None)
    store.apply({key: bytes([1]) + encode_history(legacy)[1:-2],
                 IDENTITY_KEY: None}, None)  # format 1: without the wording digest and number buckets
    assert decode_history(store.get(key) or b"").wording_digest is None
    edited = PARAGRAPH * 3 + "A new section on the railway station opened today. " * 6
    updates = run([page(2, text=edited), page(3), page(4)], store=store)
    assert [(u["changed"], u["signal"]) for u in updates] == [(None, "features_upgraded"), (True, "wording"),
                                                              (False, "digest")]
    assert store.get(IDENTITY_KEY) == STATE_IDENTITY


def test_a_shard_of_the_build_before_number_buckets_is_adopted_and_upgraded() -> None:
    """A shard written with histories of format 2 says so in its identity: it is adopted, its
    histories read; numbers that moved since are undecided once (nothing to compare them with),
    then learned; the identity is rewritten with the first record decided."""
    store = MemoryStore()
    run([counted(1, 1041)], store=store)
    key = next(k for k, _ in store.items() if k.startswith(b"h"))
    history = dataclasses.replace(decode_history(store.get(key) or b""), number_buckets=None)
    store.apply({key: bytes([2]) + encode_history(history)[1:-1],
                 IDENTITY_KEY: b"histories 2; change features 1; host priors 1"}, None)
    assert decode_history(store.get(key) or b"") == dataclasses.replace(history, legacy_wording=True)
    updates = run([counted(2, 1042), counted(2, 1043, hour=13)], store=store)
    assert [(u["changed"], u["signal"]) for u in updates] == [(None, "features_upgraded"),
                                                              (None, "numbers_unlearned")]
    assert store.get(IDENTITY_KEY) == STATE_IDENTITY


def test_a_shard_of_the_build_before_host_shapes_is_adopted_and_upgraded() -> None:
    """The build before wrote host states of format 1 (no shape scores) and budget states of format 1
    (a fixed spend window) under its own identity: both are read as they are, the host's pages go
    on from what it showed (no shape scored yet: the default), and the identity is rewritten."""
    store = MemoryStore()
    run([counted(1, 1041), counted(2, 1042), counted(2, 1043, hour=13)], store=store)
    host = HostChanges.decode(store.get(host_key("example.com")))
    budget = BudgetState.decode(store.get(ALLOCATION_KEY))
    old_host = struct.pack(">Bddd", 1, host.changes, host.watched_s, host.clock_s)
    old_budget = (struct.pack(">BdIIdddd", 1, budget.mu_s, budget.unestimated, budget.since_solve,
                              budget.correction, budget.spend_weight, budget.clock_s, budget.started_s)
                  + struct.pack(f">{RATE_BINS}I", *budget.counts))
    store.apply({host_key("example.com"): old_host, ALLOCATION_KEY: old_budget,
                 IDENTITY_KEY: b"histories 3; change features 1; host priors 1; host numbers 1"}, None)
    updates = run([counted(3, 1050, version="3.12.8")], store=store)
    assert [(u["changed"], u["signal"]) for u in updates] == [(True, "number_edit")]
    assert store.get(IDENTITY_KEY) == STATE_IDENTITY
    upgraded = HostChanges.decode(store.get(host_key("example.com")))
    assert upgraded.changes == pytest.approx(host.changes + 1, rel=1e-3)
    assert len(store.get(ALLOCATION_KEY) or b"") == len(budget.encode())


def test_a_shard_of_another_build_is_refused() -> None:
    store = MemoryStore()
    store.apply({IDENTITY_KEY: b"histories 9"}, None)
    with pytest.raises(StateError, match="another build"):
        run([page(1)], store=store)


def test_binary_bodies_are_compared_by_digest() -> None:
    def pdf(day: int, data: bytes) -> dict[str, Any]:
        return {"url": "http://example.com/doc.pdf", "status": 200, "content_type": "application/pdf",
                "body_base64": base64.b64encode(data).decode(), "fetched_at": f"2024-05-{day:02d}T00:00:00Z"}

    updates = run([pdf(1, b"%PDF-1.7 one"), pdf(2, b"%PDF-1.7 one"), pdf(3, b"%PDF-1.7 two")])
    assert [(u["changed"], u["signal"]) for u in updates] == [(None, "first_fetch"), (False, "digest"),
                                                              (True, "digest")]


def test_bad_lines_get_no_update_and_do_not_stop_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    updates = run([page(1), b"{not json", orjson.dumps({"status": 200}), page(2)])
    assert len(updates) == 2
    assert "invalid_json" in capsys.readouterr().err


def test_updates_are_keyed_by_host_and_state_by_canonical_url() -> None:
    _, processors = bind(RevisitStage(), TOPOLOGY, 1)
    shards = TOPICS.shards("test", "revisit")
    store = MemoryStore()
    keys = []
    for spelling in ("HTTP://EXAMPLE.com:80/a", "http://example.com/a#top"):
        routed = processors.route(LineMessage(TOPICS.fetched_pages, 1, orjson.dumps(page(1, url=spelling))))
        assert len(routed) == 1 and routed[0].topic == shards and routed[0].key is not None
        state = BatchState(store)
        shard_message = LineMessage(shards, 1, routed[0].value or b"", routed[0].key)
        emitted = processors.shards["shards"](shard_message, state)  # type: ignore[operator]
        store.apply(state.writes, None)
        keys.append(routed[0].key)
        assert [(e.topic, e.key) for e in emitted] == [(TOPICS.revisit_updates, b"example.com")]
    assert keys[0] == keys[1]
    assert orjson.loads(emitted[0].value or b"")["signal"] == "digest"


def test_settings_from_the_environment_reach_the_stage() -> None:
    environ = {"STREAMS_REVISIT_POLICY": "fixed", "STREAMS_REVISIT_FIXED_INTERVAL_S": "7200",
               "STREAMS_REVISIT_HOST_INTERVAL_BOUNDS": "slow.example=86400:864000, example.org=60:600"}
    settings = config.load(RevisitSettings, "revisit", environ=environ)
    assert settings.host_interval_bounds == ("slow.example=86400:864000", "example.org=60:600")
    updates = run([page(1), page(2), page(1, url="http://slow.example/")], settings)
    assert [u["interval_s"] for u in updates] == [7200, 7200, 86400]


def test_offline_command_answers_each_line_before_the_next(tmp_path: Path) -> None:
    """The simulator's contract: write a line, read its update, then write the next (flushed per line)."""
    command = [sys.executable, "-m", "streams", "revisit", "--offline", "--state-dir", str(tmp_path)]
    signals = []
    for _ in range(2):   # the second process finds the first one's state in --state-dir
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as process:
            assert process.stdin is not None and process.stdout is not None
            for day in (1, 2):
                process.stdin.write(orjson.dumps(page(day + 2 * len(signals))) + b"\n")
                process.stdin.flush()
                signals.append(orjson.loads(process.stdout.readline())["signal"])
            process.stdin.close()
            assert process.wait(timeout=30) == 0
    assert signals == ["first_fetch", "digest", "digest", "digest"]
