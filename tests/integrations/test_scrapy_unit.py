"""The Scrapy scheduler's offset bookkeeping (what a restarted or rebalanced process fetches again),
and the verdicts a process waits for."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred

from streams.integrations.offsets import Offsets, committed_at_assignment
from streams.integrations.pacing import Measure
from streams.integrations.verdicts import ABANDONED, Verdicts


def _commit(offsets: Offsets) -> tuple[int, str]:
    [tp] = offsets.commits("new-urls")
    return tp.offset, tp.metadata


def test_the_commit_is_the_lowest_offset_in_flight_with_the_done_ones_past_it() -> None:
    offsets = Offsets()
    offsets.assigned(0, -1001, None)  # nothing committed yet
    assert all(offsets.take(0, offset) for offset in range(10, 15))
    for offset in (10, 12, 14):
        offsets.finish(0, offset)
    assert _commit(offsets) == (11, "1,3")  # 11 and 13 in flight; 12 and 14 done
    offsets.finish(0, 11)
    offsets.finish(0, 13)
    assert _commit(offsets) == (15, "")


def test_a_restarted_process_skips_what_the_metadata_says_was_done() -> None:
    offsets = Offsets()
    offsets.assigned(0, 11, "1,3")
    assert [offsets.take(0, offset) for offset in range(11, 16)] == [True, False, True, False, True]


def test_a_revoked_partition_hands_back_what_was_not_downloading() -> None:
    """Queued requests go back to the group; requests downloading are finished here, committed done."""
    offsets = Offsets()
    offsets.assigned(0, 0, None)
    for offset in range(5):
        offsets.take(0, offset)
    offsets.finish(0, 0)
    offsets.release(0, {3, 4})  # 1 and 2 are downloading
    assert _commit(offsets) == (3, "")
    other = Offsets()
    other.assigned(0, 3, "")
    assert [other.take(0, offset) for offset in (3, 4)] == [True, True]


@given(st.sets(st.integers(0, 60)))
def test_after_a_restart_only_what_was_in_flight_is_fetched_again(finished: set[int]) -> None:
    """Whatever finished, a new process given the commit fetches exactly the offsets not finished."""
    offsets = Offsets()
    offsets.assigned(0, 0, None)
    for offset in range(61):
        offsets.take(0, offset)
    for offset in finished:
        offsets.finish(0, offset)
    low, metadata = _commit(offsets)
    again = Offsets()
    again.assigned(0, low, metadata)
    fetched = {offset for offset in range(low, 61) if again.take(0, offset)}
    assert fetched == set(range(61)) - finished


def test_a_held_offset_is_done_once_its_own_work_and_every_hold_are() -> None:
    offsets = Offsets()
    offsets.assigned(0, 0, None)
    offsets.take(0, 0)
    first, second = offsets.hold(0, 0), offsets.hold(0, 0)
    assert first is not None and second is not None and first != second
    offsets.finish(0, 0)  # its callback is done; two requests it made are fetched here still
    offsets.unhold(0, 0, first)
    offsets.unhold(0, 0, first)  # twice for one token changes nothing
    assert _commit(offsets) == (0, "")
    offsets.unhold(0, 0, second)
    assert _commit(offsets) == (1, "")


def test_holds_before_the_offsets_own_work_and_skips_and_releases() -> None:
    offsets = Offsets()
    offsets.assigned(0, 0, None)
    offsets.take(0, 0)
    token = offsets.hold(0, 0)
    assert token is not None
    offsets.unhold(0, 0, token)  # the held request finished first: the offset waits for its own work
    assert _commit(offsets) == (0, "")
    offsets.finish(0, 0)
    offsets.skip(0, 1)  # another crawl's record: done at once, nothing to fetch again after a crash
    assert offsets.count_in_flight == 1 and _commit(offsets) == (2, "")
    assert offsets.hold(0, 5) is None  # not in flight here
    offsets.take(0, 2)
    offsets.hold(0, 2)
    offsets.release(0, set())  # the partition goes: in flight here counts done, its holds forgotten
    assert _commit(offsets) == (3, "")


class _Committing:
    """A consumer whose ``committed`` answers ``found`` or raises a KafkaException of that code."""

    def __init__(self, found: list[TopicPartition] | int) -> None:
        self.found = found

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if isinstance(self.found, int):
            raise KafkaException(KafkaError(self.found))
        return self.found


def test_an_assignment_while_closing_reads_nothing_and_other_errors_still_raise() -> None:
    at = [TopicPartition("new-urls", 0, 7)]
    assert committed_at_assignment(_Committing(at), at) == at  # type: ignore[arg-type]
    assert committed_at_assignment(_Committing(KafkaError._DESTROY), at) == []  # type: ignore[arg-type]
    with pytest.raises(KafkaException):
        committed_at_assignment(_Committing(KafkaError._TIMED_OUT), at)  # type: ignore[arg-type]


class _Message:
    def __init__(self, verdict: dict[str, object], written_s: float) -> None:
        self._value, self._written_ms = orjson.dumps(verdict), int(written_s * 1000)

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._written_ms)


class _Stats(dict[str, float]):
    def inc_value(self, key: str, count: float = 1, start: float = 0) -> None:
        self[key] = self.get(key, start) + count

    def set_value(self, key: str, value: float) -> None:
        self[key] = value


class _Reader:
    def __init__(self) -> None:
        self.pending: list[_Message] = []

    def consume(self, limit: int, timeout: float) -> list[_Message]:
        out, self.pending = self.pending, []
        return out


def _verdicts(timeout_s: float = 30.0) -> tuple[Verdicts, _Reader]:
    reader = _Reader()
    return Verdicts(reader, timeout_s, _Stats()), reader  # type: ignore[arg-type]


def _answer(deferred: Deferred[Any]) -> list[Any]:
    got: list[Any] = []
    deferred.addCallback(got.append)
    return got


def test_a_url_fetched_twice_at_once_gets_one_verdict_per_fetch_in_order() -> None:
    verdicts, reader = _verdicts()
    for _ in range(2):
        verdicts.expect("http://a.example/")
    first, second = (_answer(verdicts.verdict("http://a.example/")) for _ in range(2))
    reader.pending = [_Message({"url": "http://a.example/", "verdict": "unique"}, time.time()),
                      _Message({"url": "http://b.example/", "verdict": "unique"}, time.time())]  # not ours
    verdicts.turn(time.monotonic())
    assert (first, second) == ([{"url": "http://a.example/", "verdict": "unique"}], [])
    reader.pending = [_Message({"url": "http://a.example/", "verdict": "duplicate"}, time.time())]
    verdicts.turn(time.monotonic())
    assert second == [{"url": "http://a.example/", "verdict": "duplicate"}]
    assert not verdicts.waiting and not verdicts.judged("http://a.example/")


def test_a_verdict_before_its_page_asks_is_kept_and_a_late_one_times_out_or_is_abandoned() -> None:
    verdicts, reader = _verdicts(timeout_s=5)
    verdicts.expect("http://early.example/")
    reader.pending = [_Message({"url": "http://early.example/", "verdict": "unique"}, time.time())]
    verdicts.turn(time.monotonic())
    assert _answer(verdicts.verdict("http://early.example/")) == [{"url": "http://early.example/",
                                                                   "verdict": "unique"}]
    assert _answer(verdicts.verdict("http://not-judged.example/")) == [None]
    verdicts.expect("http://late.example/")
    verdicts.expect("http://closing.example/")
    late = _answer(verdicts.verdict("http://late.example/"))
    verdicts.turn(time.monotonic() + 6)  # past the deadline: parsed without a verdict
    closing = _answer(verdicts.verdict("http://closing.example/"))
    verdicts.abandon()
    assert (late, closing) == ([None], [ABANDONED]) and not verdicts.waiting


class _Stats:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        self.values[key] = self.values.get(key, start) + count

    def set_value(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_sub_millisecond_waits_add_up_to_a_total_above_zero() -> None:
    """Verdicts already there when the callback asks: each wait well under a millisecond."""
    stats = _Stats()
    wait = Measure(stats, "verdict_wait")
    for _ in range(50):
        wait.add(0.0001)
    assert stats.values["crawl_dedup/verdict_waits"] == 50
    assert stats.values["crawl_dedup/verdict_wait_s"] == 0.005
