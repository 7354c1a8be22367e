"""When the harness says a run ended: at the worker's last commit, not when the harness saw it.

A rate is records over seconds, so time the harness spends looking (a read of every shard topic to
its end takes about 2 s) or stopping the worker must not count as the worker's. These tests give
``run_with_kills`` scripted looks and a child that only sleeps; no broker is needed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from testing import harness as h

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
SLOW_LOOK_S = 0.3


def _script(values: list[int]) -> Callable[[], int]:
    """A progress function answering ``values`` in turn, then the last one for ever."""
    answers: Iterator[int] = iter(values)
    last = values[-1]
    return lambda: next(answers, last)


def _slow_done(looks: list[float], true_from: int = 1) -> Callable[[], bool]:
    """``done`` as the harness's topic read is: slow; notes when each look began in ``looks``, and
    is true from the ``true_from``-th look on."""

    def done() -> bool:
        looks.append(time.monotonic())
        time.sleep(SLOW_LOOK_S)
        return len(looks) >= true_from

    return done


def _run(tmp_path: Path, progress: Callable[[], int], done: Callable[[], bool] | None,
         settled: Callable[[], object] | None = None) -> h.KillReport:
    return h.run_with_kills(SLEEPER, progress, total=10, kills=0, log_path=tmp_path / "w.log",
                            done=done, poll_s=0.01, settled=settled)


def test_a_slow_look_that_finds_the_work_done_is_not_counted(tmp_path: Path) -> None:
    looks: list[float] = []
    began = time.monotonic()
    report = _run(tmp_path, _script([0, 3, 10]), _slow_done(looks))
    assert began + report.seconds <= looks[0]  # ended at the commit, before the look began


def test_looks_until_done_holds_and_the_end_is_still_the_input_s_last_commit(tmp_path: Path) -> None:
    looks: list[float] = []
    began = time.monotonic()
    report = _run(tmp_path, _script([0, 10]), _slow_done(looks, true_from=3))
    assert len(looks) == 3
    assert began + report.seconds <= looks[0]


def test_the_stop_is_reported_apart(tmp_path: Path) -> None:
    began = time.monotonic()
    report = _run(tmp_path, _script([10]), None)
    assert report.stop_s > 0
    assert report.seconds + report.stop_s <= time.monotonic() - began


@pytest.mark.parametrize("changes", [1, 3])
def test_shard_commits_after_the_input_move_the_end_to_the_last_of_them(tmp_path: Path,
                                                                          changes: int) -> None:
    """Shard records decided after the input's last commit are work: the run ends at the first
    look that found the shard topics' offsets as they stay, however slow ``done`` is."""
    positions = iter(range(changes))

    def settled() -> object:
        return next(positions, changes - 1)  # moved at each look until the last, then stays

    looks: list[float] = []
    began = time.monotonic()
    report = _run(tmp_path, _script([10]), _slow_done(looks, true_from=changes), settled)
    assert len(looks) == changes  # one look each time the offsets had moved, until they stayed
    ended = began + report.seconds
    assert ended <= looks[-1]  # not charged the last slow look
    assert changes == 1 or ended >= looks[-2]  # but charged the shard work seen after the input


def test_a_look_at_the_shard_offsets_that_fails_moves_the_end_past_it(tmp_path: Path) -> None:
    """Offsets asked while a transaction commits may come back as an error: the end is not taken
    from before it (the commit may have been shard work), and the run goes on."""
    answers: Iterator[object] = iter(["first", KafkaException(), "stays"])

    def settled() -> object:
        answer = next(answers, "stays")
        if isinstance(answer, KafkaException):
            raise answer
        return answer

    looks: list[float] = []
    began = time.monotonic()
    report = _run(tmp_path, _script([10]), _slow_done(looks, true_from=2), settled)
    assert len(looks) == 3  # the failed look could not confirm the end: looked again once it stayed
    assert looks[1] <= began + report.seconds <= looks[2]
