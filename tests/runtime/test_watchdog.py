"""The watchdog that rescues a worker wedged in a Kafka call (``streams/runtime/watchdog.py``).

In process: which action a wedged call gets, and that calls returning in time get none. In a child
process: a real restart in place (``os.execv`` of the same command line) and a real exit with
``EXIT_WEDGED`` when SIGTERM arrived while the call was blocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.runtime.watchdog import EXIT_WEDGED, TRANSACTION_ATTEMPTS, Watchdog


def _watchdog(acted: list[str], grace_s: float = 0.2) -> Watchdog:
    return Watchdog(grace_s, on_wedged=lambda: acted.append("wedged"),
                    on_stop=lambda: acted.append("stop"), tick_s=0.05)


def _wait_for(condition: list[str], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not condition:
        time.sleep(0.02)


@pytest.mark.parametrize(("stop_first", "expected"), [(False, ["wedged"]), (True, ["stop"])])
def test_a_call_past_its_timeout_and_grace_is_acted_on(stop_first: bool, expected: list[str]) -> None:
    acted: list[str] = []
    watchdog = _watchdog(acted)
    watchdog.start()
    try:
        if stop_first:
            watchdog.request_stop()
        with watchdog.guard("send_offsets_to_transaction", timeout_s=0.1):
            _wait_for(acted)
    finally:
        watchdog.close()
    assert acted == expected


def test_calls_that_return_in_time_are_left_alone() -> None:
    acted: list[str] = []
    watchdog = _watchdog(acted, grace_s=0.3)
    watchdog.start()
    try:
        for _ in range(5):
            with watchdog.guard("commit_transaction", timeout_s=0.1):
                time.sleep(0.1)
        time.sleep(0.5)  # between calls nothing is timed
    finally:
        watchdog.close()
    assert acted == []


def test_a_stop_signal_is_seen_even_when_its_handler_cannot_run() -> None:
    """The wakeup fd tells the watchdog of SIGTERM; the engine's own handler is not needed."""
    acted: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # a handler that tells nobody
    watchdog = _watchdog(acted)
    watchdog.start()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        with watchdog.guard("commit_transaction", timeout_s=0.1):
            _wait_for(acted)
    finally:
        watchdog.close()
        signal.signal(signal.SIGTERM, previous)
    assert acted == ["stop"]
    assert signal.set_wakeup_fd(-1) == -1  # close() gave back the previous wakeup fd


WEDGED_CHILD = textwrap.dedent("""
    import signal, sys, threading
    from pathlib import Path
    from streams.runtime.watchdog import Watchdog

    runs = Path(sys.argv[1])
    runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
    if runs.read_text().count("run") > 1:
        print("second run", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: None)
    watchdog = Watchdog(0.2, "restart", tick_s=0.05)
    watchdog.start()
    print("wedging", flush=True)
    with watchdog.guard("send_offsets_to_transaction", 0.1):
        threading.Event().wait()  # blocked for ever, as librdkafka is
""")


def _child(tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "wedged.py"
    script.write_text(WEDGED_CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_wedged_process_restarts_in_place(tmp_path: Path) -> None:
    child = _child(tmp_path)
    output, _ = child.communicate(timeout=30)
    assert child.returncode == 0, output
    assert output.count("wedging") == 1 and "second run" in output, output
    assert (tmp_path / "runs").read_text().count("run") == 2


def test_sigterm_while_wedged_exits_instead_of_restarting(tmp_path: Path) -> None:
    child = _child(tmp_path)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "wedging"
    child.send_signal(signal.SIGTERM)
    output, _ = child.communicate(timeout=30)
    assert child.returncode == EXIT_WEDGED, output
    assert (tmp_path / "runs").read_text().count("run") == 1


def _failing(errors: list[KafkaError]) -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        if len(calls) <= len(errors):
            raise KafkaException(errors[len(calls) - 1])

    return calls, call


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)


@pytest.mark.parametrize(("errors", "calls", "raises"), [
    ([], 1, False),
    ([TIMED_OUT], 2, False),                     # a commit that timed out while a leader was stalled
    ([TIMED_OUT, TIMED_OUT], 3, False),
    ([TIMED_OUT] * TRANSACTION_ATTEMPTS, TRANSACTION_ATTEMPTS, True),       # bounded
    ([KafkaError(KafkaError._STATE, "abort", retriable=True, txn_requires_abort=True)], 1, True),
    ([KafkaError(KafkaError._FENCED, "fenced", fatal=True)], 1, True),
    ([KafkaError(KafkaError._INCONSISTENT, "not retriable")], 1, True),
])
def test_transactional_calls_are_tried_again_only_when_retriable(errors: list[KafkaError], calls: int,
                                                                  raises: bool) -> None:
    """librdkafka: a retriable error of commit_transaction (and its siblings) may be retried; an
    abortable or fatal one is the engine's to handle (abort, or stop)."""
    made, call = _failing(errors)
    watchdog = _watchdog([])
    if raises:
        with pytest.raises(KafkaException):
            watchdog.transactional("commit_transaction", 1.0, call)
    else:
        watchdog.transactional("commit_transaction", 1.0, call)
    assert len(made) == calls
