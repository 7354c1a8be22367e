"""Worker processes as an operator runs them (started, stopped, SIGKILLed, restarted), and a
producer that paces a workload's phases while a test changes the workers around it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer

from streams.runtime.kafka_io import KafkaConfig, read_to_end
from streams.topics import Topics
from testing.workload import FRONTIER, PAGES, PROJECT_ROOT, Phase, Record, Workload, _split

# -- worker processes ---------------------------------------------------------------------------------

@dataclass
class Worker:
    """One stage worker process, started, stopped and restarted as an operator (or a supervisor) does.

    Its log (stdout and stderr, INFO level) is appended to ``log`` over every run."""

    command: list[str]
    env: dict[str, str]
    log: Path
    name: str
    stage: str
    process: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)      # return code of every run that ended
    starts: int = 0

    def start(self) -> Worker:
        assert not self.alive(), f"{self.name} is running"
        with open(self.log, "ab") as out:
            out.write(f"=== start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            cwd=PROJECT_ROOT, env=self.env, start_new_session=True)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reap(self) -> int | None:
        """The return code if the process ended since the last look (recorded in ``exits``)."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        self.exits.append(code)
        self.process = None
        return code

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM (finish the batch, commit, leave) and wait; SIGKILL after ``timeout_s``."""
        assert self.process is not None, f"{self.name} is not running"
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None, f"{self.name} is not running"
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.exits.append(self.process.returncode)
            self.process = None
            raise AssertionError(f"{self.name} did not exit within {timeout_s} s; see {self.log}") from None
        code = self.reap()
        assert code is not None
        return code

    def kill(self) -> None:
        """Last resort, for clean-up: SIGKILL the worker's process group."""
        if self.alive():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.reap()

    def runs(self) -> list[str]:
        """The log of each start, in order."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return re.split(r"^=== start \d+ at .*$", text, flags=re.MULTILINE)[1:]

    def assigned(self) -> bool:
        """Whether the current run got its partitions (its ``assignment:`` lifecycle line)."""
        runs = self.runs()
        return bool(runs) and " assignment: owns " in runs[-1]

    def diagnosis(self) -> str:
        """Why the last run ended, from its log: an assertion of librdkafka, a fatal signal with the
        main thread's innermost frame (PYTHONFAULTHANDLER), or a Python exception."""
        runs = self.runs()
        log = runs[-1] if runs else ""
        found = [line.strip() for line in log.splitlines()
                 if "Assertion" in line or line.startswith("Fatal Python error")]
        frames = re.search(r"^Current thread .*\n\s*(File .*)$", log, flags=re.MULTILINE)
        if frames:
            found.append(frames.group(1).strip())
        errors = re.findall(r"^(\w*(?:Error|Exception|Failure)\b.*|error: .*)$", log, flags=re.MULTILINE)
        if errors:
            found.append(errors[-1].strip())
        return "; ".join(found) or "nothing in its log"

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


# -- producing ------------------------------------------------------------------------------------------

def produce(kafka: KafkaConfig, topic: str, items: Sequence[Record], timeout_s: float = 180.0) -> None:
    """Deliver ``items`` once each, in order: idempotent, so a retry through a broker fault (a leader
    killed or stalled under the cluster tests) never writes an input record twice."""
    producer = Producer(kafka.producer(**{"linger.ms": 20, "enable.idempotence": True}))
    for key, value in items:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(timeout_s)
    if left:
        raise AssertionError(f"{left} records to {topic} were not delivered")


class Feeder(threading.Thread):
    """Produces a workload's phases in paced steps while the test changes the workers around it.

    Before a phase of copies it waits (``gate``) until the page stage has decided every earlier page.
    ``produced`` counts records delivered so far; :meth:`wait_for` blocks until a share of them is.
    """

    def __init__(self, kafka: KafkaConfig, topics: Topics, work: Workload, steps_per_phase: int = 4,
                 pause_s: float = 0.5, gate: Callable[[int], None] | None = None) -> None:
        super().__init__(daemon=True, name="feeder")
        self.kafka, self.topics, self.work = kafka, topics, work
        self.steps, self.pause_s, self.gate = steps_per_phase, pause_s, gate
        self.produced = 0
        self.error: BaseException | None = None
        self._moved = threading.Condition()

    def run(self) -> None:
        try:
            for index, phase in enumerate(self.work.phases):
                if phase.copies and self.gate is not None:
                    self.gate(index)
                self.produce_phase(phase)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread by finish()
            self.error = error
        finally:
            with self._moved:
                self._moved.notify_all()

    def produce_phase(self, phase: Phase) -> None:
        names = {FRONTIER: self.topics.frontier, PAGES: self.topics.fetched_pages}
        for step in range(self.steps):
            for kind, items in phase.records.items():
                part = _split(items, self.steps)[step]
                if part:
                    produce(self.kafka, names[kind], part)
                    with self._moved:
                        self.produced += len(part)
                        self._moved.notify_all()
            time.sleep(self.pause_s)

    def wait_for(self, share: float, timeout_s: float = 240.0) -> None:
        """Block until ``share`` (0..1) of the workload is produced."""
        target = share * self.work.total()
        deadline = time.monotonic() + timeout_s
        with self._moved:
            while self.produced < target:
                if self.error is not None or not self.is_alive():
                    break
                if not self._moved.wait(max(0.0, deadline - time.monotonic())):
                    raise AssertionError(f"feeder reached {self.produced} of {target:.0f} in {timeout_s} s")
        if self.error is not None:
            raise self.error

    def finish(self, timeout_s: float = 400.0) -> None:
        self.join(timeout_s)
        if self.is_alive():
            raise AssertionError("the feeder did not finish in time")
        if self.error is not None:
            raise self.error


# -- progress -------------------------------------------------------------------------------------------

def count(kafka: KafkaConfig, topic: str) -> int:
    return sum(1 for _ in read_to_end(kafka, topic))


def _signal_name(code: int) -> str:
    return f"{code} ({signal.Signals(-code).name})" if code < 0 else str(code)
