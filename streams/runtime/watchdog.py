"""A watchdog for Kafka client calls that can block for ever, so a worker rides out a broker restart.

Why it exists: with librdkafka 2.16 a transactional producer that lives through a broker restart
can block in ``send_offsets_to_transaction`` (and behind it ``commit_transaction``) long past the
timeout it was given: the restarted broker is marked decommissioned and the cached group
coordinator is never queried again (librdkafka issues #5511 and #5456; reproduced here with a plain
confluent-kafka producer and consumer). The call holds the worker's main thread in C, so neither
the engine nor Python's signal handlers run again: the worker is wedged, holding its partitions,
and SIGTERM has no effect.

Nothing inside the process can unstick librdkafka, and a second producer with the same
``transactional.id`` beside the wedged one would leave a thread that may still commit. So the
watchdog does what an operator's supervisor would, from inside: the engine wraps each transactional
call in :meth:`Watchdog.guard`; a daemon thread looks once a second, and a call still running
``grace_s`` past its own timeout means the client is wedged. Then the watchdog

- ``restart`` (the default): replaces the process with a fresh copy of itself (``os.execv`` of the
  interpreter and ``sys.orig_argv``, same pid, environment and standard streams). This is exactly a
  SIGKILL followed by a restart, which the crash tests prove safe: the new producer's
  ``init_transactions`` (same ``transactional.id``) aborts the open transaction, the consumer
  resumes from the committed offsets, the stores catch up from the changelog. Sockets and RocksDB
  files are close-on-exec, so the store locks and the metrics port are free for the new image.
- ``exit``: exits with :data:`EXIT_WEDGED` for a supervisor (systemd, Kubernetes) to restart, for
  operators who want restarts counted there.

A stop signal (SIGTERM, SIGINT) that arrives while the main thread is wedged cannot run its handler;
the watchdog sees it through :func:`signal.set_wakeup_fd` and then exits with :data:`EXIT_WEDGED`
instead of restarting, so a stop is never turned into a restart.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger(__name__)

EXIT_WEDGED = 75  # EX_TEMPFAIL: try again (sysexits.h)
TRANSACTION_ATTEMPTS = 3  # each up to its own timeout: a broker stalled past the first one has been
                          # fenced (broker.session.timeout.ms, 9 s) and its partitions led elsewhere
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})

WedgedAction = Literal["restart", "exit"]

# The write ends of the open watchdogs' signal pipes, in start order, and what listened before the
# first of them (main thread only: signal.set_wakeup_fd works nowhere else).
_LISTENING: list[int] = []
_FIRST_PREVIOUS: list[int] = [-1]


def restart_in_place() -> None:
    """Replace this process with a fresh run of the same command line (never returns)."""
    argv = [sys.executable, *sys.orig_argv[1:]]
    log.error("restarting in place: %s", " ".join(argv))
    _flush_outputs()
    os.execv(sys.executable, argv)


def exit_wedged() -> None:
    """Exit at once with :data:`EXIT_WEDGED`; the wedged thread cannot be joined (never returns)."""
    _flush_outputs()
    os._exit(EXIT_WEDGED)


def _flush_outputs() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


class Watchdog:
    """Times the guarded calls of one thread and acts when one overruns (see the module docstring).

    ``on_wedged`` and ``on_stop`` are what happens to a wedged worker without and with a stop signal
    pending; they default to :func:`restart_in_place` / :func:`exit_wedged` (per ``action``) and
    :func:`exit_wedged`, and tests pass their own.
    """

    def __init__(self, grace_s: float, action: WedgedAction = "restart",
                 on_wedged: Callable[[], None] | None = None,
                 on_stop: Callable[[], None] | None = None, tick_s: float = 1.0) -> None:
        self.grace_s = grace_s
        self.tick_s = tick_s
        self._on_wedged = on_wedged or (restart_in_place if action == "restart" else exit_wedged)
        self._on_stop = on_stop or exit_wedged
        self._lock = threading.Lock()
        self._call: tuple[str, float] | None = None  # (name, deadline on the monotonic clock)
        self._stop_requested = threading.Event()
        self._closed = threading.Event()
        self._wakeup: tuple[int, int] | None = None
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def start(self) -> None:
        """Start watching; when called from the main thread, also listen for stop signals."""
        if threading.current_thread() is threading.main_thread():
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)
            self._wakeup = (read_fd, write_fd)
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if not _LISTENING:
                _FIRST_PREVIOUS[0] = previous
            _LISTENING.append(write_fd)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._wakeup is not None:
            with contextlib.suppress(OSError):
                os.write(self._wakeup[1], b"\0")  # wake the watching thread now, not a tick later
        if self._thread.ident is not None:
            self._thread.join(timeout=self.tick_s * 3)
        if self._wakeup is not None:
            if threading.current_thread() is threading.main_thread():
                self._restore_wakeup_fd(self._wakeup[1])
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None

    def _restore_wakeup_fd(self, ours: int) -> None:
        """Give signals back to the watchdog that listened before this one and is still open, or
        else to whoever listened before any (several engines in one process: the tests; they may
        close in any order, and a closed watchdog's pipe must never get signals again)."""
        _LISTENING.remove(ours)
        signal.set_wakeup_fd(_LISTENING[-1] if _LISTENING else _FIRST_PREVIOUS[0], warn_on_full_buffer=False)

    @contextlib.contextmanager
    def guard(self, name: str, timeout_s: float) -> Iterator[None]:
        """Time one call that was given ``timeout_s``; it is wedged ``grace_s`` after that."""
        with self._lock:
            self._call = (name, time.monotonic() + timeout_s + self.grace_s)
        try:
            yield
        finally:
            with self._lock:
                self._call = None

    def transactional(self, name: str, timeout_s: float, call: Callable[[], object]) -> None:
        """A transactional producer call under :meth:`guard`, tried again when it fails with a
        retriable error, as librdkafka documents for ``commit_transaction`` and its siblings (a
        commit that timed out while a stalled broker held its records: the next attempt finds the
        partitions' new leaders), at most :data:`TRANSACTION_ATTEMPTS` times. Abortable and fatal
        errors are the caller's."""
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                with self.guard(name, timeout_s):
                    call()
                return
            except KafkaException as error:
                failure = error.args[0] if error.args else None
                if (attempt == TRANSACTION_ATTEMPTS or not isinstance(failure, KafkaError)
                        or not failure.retriable() or failure.txn_requires_abort() or failure.fatal()):
                    raise
                log.warning("%s failed (%s): trying again", name, failure.str())

    def request_stop(self) -> None:
        """The worker is stopping: a call that wedges from now on exits instead of restarting."""
        self._stop_requested.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    def _watch(self) -> None:
        while not self._closed.is_set():
            self._wait_for_signal()
            with self._lock:
                call = self._call
            if call is not None and time.monotonic() > call[1]:
                self._act(call[0])
                return

    def _wait_for_signal(self) -> None:
        """Sleep one tick, waking early for a signal; remember a stop signal."""
        if self._wakeup is None:
            self._closed.wait(self.tick_s)
            return
        read_fd = self._wakeup[0]
        readable, _, _ = select.select([read_fd], [], [], self.tick_s)
        if not readable:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            if any(number in STOP_SIGNALS for number in os.read(read_fd, 64)):
                self._stop_requested.set()

    def session_lost(self, error: str) -> None:
        """The consumer is in a fatal state: librdkafka gave up its group session (no answer from a
        moving coordinator for ``session_timeout_s``) and, rejoining under the same
        ``group.instance.id``, was fenced by its own new incarnation (``FENCED_INSTANCE_ID``, seen
        when a cluster's leader was SIGKILLed with a 6 s session). Only a new consumer can rejoin:
        the same action as for a wedged call, a restart in place (or an exit with
        :data:`EXIT_WEDGED`), which resumes from the last commit; with a stop pending, an exit."""
        log.error("the consumer lost its group session and cannot rejoin (%s)", error)
        (self._on_stop if self.stop_requested else self._on_wedged)()

    def _act(self, name: str) -> None:
        overrun = "a stop signal is pending" if self.stop_requested else "no stop requested"
        log.error("%s has not returned %.0f s past its timeout: the Kafka client is wedged "
                  "(librdkafka #5511/#5456 after a broker restart); %s", name, self.grace_s, overrun)
        (self._on_stop if self.stop_requested else self._on_wedged)()
