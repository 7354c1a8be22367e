"""A pure function of bytes, mapped over a batch in child processes: CPU-bound route steps in parallel.

The page stage spends most of a page's time in HTML parsing and main-text extraction, which hold
the GIL for long stretches; one worker process would use one core. :class:`ProcessMap` runs a
function ``bytes -> bytes`` in ``processes`` children and maps it over a batch, results in input
order. Nothing is pickled: inputs and results cross pipes as raw bytes
(``Connection.send_bytes``/``recv_bytes``), and the function is named by its import path, so a
child can only ever run code of this package on data it is handed (pickle runs code: nothing that
came from a topic is ever unpickled). Children are started with ``forkserver`` so none
inherits the parent's Kafka client threads or RocksDB handles.

``submit`` starts a batch and returns at once, so the worker decides the batch's shard records
while its pages are analysed (the engine processes those first, see ``Engine._prepare``). One
feeder and one reader thread per child move the bytes, so a large input never blocks on a child
that is itself blocked writing a result, and no child waits on a caller busy elsewhere. A child
that dies (OOM, a crash in native code) raises :class:`~streams.errors.RuntimeFailure` in the
worker: the batch is not committed, and the worker restarts from its committed offsets like after
any crash.
"""

from __future__ import annotations

import importlib
import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection

from streams.errors import RuntimeFailure

Function = Callable[[bytes, bytes], bytes]


def _resolve(path: str) -> Function:
    module, _, name = path.partition(":")
    function: Function = getattr(importlib.import_module(module), name)
    return function


def _serve(path: str, context: bytes, connection: Connection) -> None:
    """Child: apply the function to each input until the pipe closes."""
    function = _resolve(path)
    try:
        while True:
            connection.send_bytes(function(context, connection.recv_bytes()))
    except EOFError:
        pass


class ProcessMap:
    """``map(inputs)`` = ``[function(context, x) for x in inputs]``, spread over child processes.

    ``function`` is ``"module:name"`` of a function ``(context: bytes, item: bytes) -> bytes`` that
    must not raise (encode failures in its result); ``context`` (settings, say) is sent once.
    """

    def __init__(self, function: str, context: bytes, processes: int) -> None:
        _resolve(function)  # fail here, not in a child
        spawn = multiprocessing.get_context("forkserver")
        # The fork server imports the function's module once (when it starts: the first ProcessMap
        # of a process), and each child is forked with it imported instead of importing it again.
        spawn.set_forkserver_preload([function.partition(":")[0]])
        self._connections: list[Connection] = []
        self._children = []
        self._pending: Pending | None = None
        for _ in range(processes):
            parent_end, child_end = spawn.Pipe()
            child = spawn.Process(target=_serve, args=(function, context, child_end), daemon=True)
            child.start()
            child_end.close()
            self._connections.append(parent_end)
            self._children.append(child)

    def map(self, inputs: Sequence[bytes]) -> list[bytes]:
        return self.submit(inputs).results()

    def submit(self, inputs: Sequence[bytes]) -> Pending:
        """Start mapping ``inputs``; the caller goes on while the children work (``results()`` waits).

        One submission at a time: a previous one still under way is finished first (its readers
        share the pipes), and its results are dropped if nobody took them (an aborted batch).
        """
        if self._pending is not None:
            self._pending.wait()
        self._pending = Pending(self._connections, inputs)
        return self._pending

    def close(self) -> None:
        """Stop the children, once a submission under way is through (its threads would otherwise
        meet closed pipes); a child that does not exit within 5 s is killed."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None
        for connection in self._connections:
            connection.close()
        for child in self._children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()


Sent = queue.SimpleQueue[int | None]
IN_FLIGHT = 2  # inputs sent to a child ahead of its results: one it works on, one waiting in its pipe


class Pending:
    """One submission: a feeder and a reader thread per child, results in input order.

    Inputs go to whichever child is free (each child has at most :data:`IN_FLIGHT` of them sent
    and not answered), not in fixed shares: pages differ in cost by a factor of 100, and fixed
    shares of a batch of 64 left one child idle while the other finished, 11 % of the batch's time
    on the shared corpus. Results are read as the children write them, so no child blocks on a full
    pipe while the caller is busy elsewhere (the engine decides the batch's shard records
    meanwhile). The threads only move bytes through pipes, which releases the GIL.
    """

    def __init__(self, connections: Sequence[Connection], inputs: Sequence[bytes]) -> None:
        self._inputs = inputs
        self._results: list[bytes] = [b""] * len(inputs)
        self._failure: BaseException | None = None
        self._next = iter(range(len(inputs)))
        self._taking = threading.Lock()
        self._threads = []
        for connection in connections:
            sent: Sent = queue.SimpleQueue()  # indexes sent to the child, in order; None: no more
            free = threading.Semaphore(IN_FLIGHT)
            for step in (self._feed, self._read):
                thread = threading.Thread(target=step, args=(connection, sent, free), daemon=True)
                self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def _take(self) -> int | None:
        with self._taking:
            return None if self._failure is not None else next(self._next, None)

    def _feed(self, connection: Connection, sent: Sent, free: threading.Semaphore) -> None:
        try:
            while True:
                free.acquire()
                index = self._take()
                if index is None:
                    break
                sent.put(index)
                connection.send_bytes(self._inputs[index])
        except OSError:
            pass  # the child died; its reader reports it
        finally:
            sent.put(None)

    def _read(self, connection: Connection, sent: Sent, free: threading.Semaphore) -> None:
        try:
            while (index := sent.get()) is not None:
                self._results[index] = connection.recv_bytes()
                free.release()
        except (EOFError, OSError) as error:
            self._failure = error
            free.release()  # its feeder takes no more: the other children finish the submission's inputs

    def wait(self) -> None:
        for thread in self._threads:
            thread.join()

    def results(self) -> list[bytes]:
        """The results in input order, once all are in; RuntimeFailure if a child died."""
        self.wait()
        if self._failure is not None:
            raise RuntimeFailure(f"an analysis process died: {self._failure!r}") from self._failure
        return self._results
