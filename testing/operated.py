"""A worker process as an operator sees it: its log lines as they come, its endpoint's port (read
from its log: workers in tests serve on port 0, any free port), and its probes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from testing.harness import PROJECT_ROOT

SERVING = re.compile(r"serving http://[^:]+:(\d+)/metrics")


class Worker:
    """``python -m streams ARGS`` (or ``command`` as given) with its stderr read line by line."""

    def __init__(self, args: Sequence[str], env: dict[str, str],
                 command: Sequence[str] | None = None) -> None:
        argv = [*(command or [sys.executable, "-m", "streams"]), *args]
        self.process = subprocess.Popen(argv, env={**env, "PYTHONUNBUFFERED": "1"}, cwd=PROJECT_ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout_s: float = 90) -> re.Match[str]:
        """The first log line matching ``pattern`` (waiting for it); fails when the worker exits."""
        wanted, deadline = re.compile(pattern), time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self.lines:
                    found = wanted.search(line)
                    if found:
                        return found
                if self.process.poll() is not None and not self._reader.is_alive():
                    code = self.process.returncode
                    raise AssertionError(f"exited {code} before {pattern!r}:\n{self.log()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"no {pattern!r} after {timeout_s} s:\n{self.log()}")
                self._changed.wait(0.2)

    @property
    def port(self) -> int:
        return int(self.wait_for(SERVING.pattern)[1])

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of a probe; (0, {}) while nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
        except OSError:
            return 0, {}

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.get("/readyz")[0] != 200:
            assert self.process.poll() is None, f"exited before ready:\n{self.log()}"
            assert time.monotonic() < deadline, f"not ready after {timeout_s} s:\n{self.log()}"
            time.sleep(0.2)

    def json_lines(self) -> list[dict[str, Any]]:
        """The lines that are JSON objects (``--log-format json``; librdkafka's own lines are not)."""
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, then the exit status (SIGKILL past ``timeout_s``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        """The exit status, once the worker exited by itself (SIGKILL past ``timeout_s``)."""
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self._reader.join(10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return code

    def kill(self) -> None:
        self.process.kill()
        self.wait(10)

    def log(self) -> str:
        return "\n".join(self.lines[-60:])


def worker_env(bootstrap: str, **extra: str) -> dict[str, str]:
    """The test broker, any free metrics port, the default log level (none inherited)."""
    env = {name: value for name, value in os.environ.items()
           if name not in {"STREAMS_LOG_LEVEL", "STREAMS_LOG_FORMAT"}}
    return {**env, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_METRICS_PORT": "0", **extra}
