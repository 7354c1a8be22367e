"""A pure function of bytes, mapped over a batch in child processes: CPU-bound route steps in parallel.

The page stage spends most of a page's time in HTML parsing and main-text extraction, which hold
the GIL for long stretches; one worker process would use one core. :class:`ProcessMap` runs a
function ``bytes -> bytes`` in ``processes`` children and maps it over a batch, results in input
order. Nothing is pickled: inputs and results cross pipes as raw bytes
(``Connection.send_bytes``/``recv_bytes``), and the function is named by its import path, so a
child can only ever run code of this package on data it is handed (the DEVELOPERS rule: never
unpickle anything that came from a topic). Children are started with ``forkserver`` so none
inherits the parent's Kafka client threads or RocksDB handles.

One feeder thread per child writes its inputs while the calling thread reads results, so a large
input never blocks on a child that is itself blocked writing a result. A child that dies (OOM,
a crash in native code) raises :class:`~streams.errors.RuntimeFailure` in the worker: the batch is
not committed, and the worker restarts from its committed offsets like after any crash.
"""

from __future__ import annotations

import importlib
import multiprocessing
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
        self._connections: list[Connection] = []
        self._children = []
        for _ in range(processes):
            parent_end, child_end = spawn.Pipe()
            child = spawn.Process(target=_serve, args=(function, context, child_end), daemon=True)
            child.start()
            child_end.close()
            self._connections.append(parent_end)
            self._children.append(child)

    def map(self, inputs: Sequence[bytes]) -> list[bytes]:
        count = len(self._connections)
        shares = [list(range(index, len(inputs), count)) for index in range(count)]
        feeders = [threading.Thread(target=self._feed, args=(connection, [inputs[i] for i in share]),
                                    daemon=True)
                   for connection, share in zip(self._connections, shares, strict=True)]
        for feeder in feeders:
            feeder.start()
        results: list[bytes] = [b""] * len(inputs)
        try:
            for connection, share in zip(self._connections, shares, strict=True):
                for index in share:
                    results[index] = connection.recv_bytes()
        except (EOFError, OSError) as error:
            raise RuntimeFailure(f"an analysis process died: {error!r}") from error
        for feeder in feeders:
            feeder.join()
        return results

    @staticmethod
    def _feed(connection: Connection, items: list[bytes]) -> None:
        try:
            for item in items:
                connection.send_bytes(item)
        except OSError:
            pass  # the child died; the reader reports it

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        for child in self._children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
