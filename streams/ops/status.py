"""A worker's ``/status``: what a shard it owns says of one state key, read from its committed state.

``crawl-dedup status`` (:mod:`streams.ops.status_command`) finds the worker that owns a URL's shard
in each stage's consumer group and asks it here: ``GET /status?key=<32 hex digits>``. The worker
answers from the shard's store as the last committed transaction left it, in the HTTP server's
thread, while the engine's thread goes on (a read of RocksDB holds the interpreter lock, and the
runtime publishes a copy of its map of stores made in one step, so a read meets a store that is
open, or one closed a moment ago: an error, answered 503 and asked again). Ownership is the
engine's: the shards whose stores it opened for its assignment, recovered; nothing else (a shard
still recovering, or gone in a rebalance, is 421, and the command asks the group again). All of it
is read from what the runtime publishes of the worker (:mod:`streams.runtime.snapshot`).

What a stage says of a key is its own (:class:`StatusAnswers`): the URL stage whether the URL is
seen and since when, the revisit stage its next fetch, the page stage its last verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qs

from streams.runtime.api import PartitionStore, partition_for
from streams.runtime.snapshot import Published

log = logging.getLogger(__name__)

KEY_BYTES = 16


@runtime_checkable
class StatusAnswers(Protocol):
    """A stage that says what its state holds for a key."""

    def status(self, store: PartitionStore, key: bytes) -> dict[str, Any]:
        """What ``store`` (the shard owning ``key``, committed state) says of ``key``; called from
        another thread than the engine's: read only."""
        ...


class WorkerStatus:
    """``/status`` of one worker (the endpoint's :data:`~streams.ops.health.StatusAnswer`)."""

    def __init__(self, worker: Published, counted: Callable[[str], None]) -> None:
        """``counted(answer)``: each query, by its answer (``answered``, ``not_owned``, ``refused``)."""
        self._worker = worker
        self._counted = counted

    def __call__(self, query: str) -> tuple[int, dict[str, Any]]:
        code, found = self._answer(query)
        self._counted({200: "answered", 421: "not_owned"}.get(code, "refused"))
        return code, found

    def _answer(self, query: str) -> tuple[int, dict[str, Any]]:
        facts = self._worker.facts
        stage, worker = facts.stage, facts.worker_id
        answers = facts.behaviour
        if not isinstance(answers, StatusAnswers):
            return 404, {"error": f"the {stage} stage answers no status", "stage": stage}
        try:
            key = bytes.fromhex(parse_qs(query).get("key", [""])[0])
        except ValueError:
            key = b""
        if len(key) != KEY_BYTES:
            return 400, {"error": "ask /status?key=<the 16-byte state key in hex>", "stage": stage}
        shard = partition_for(key, facts.shards)
        told = {"stage": stage, "group": facts.group, "shard": shard, "worker": worker}
        store = self._worker.stores().get(shard)
        if store is None:
            job = self._worker.lifecycle().recovery.get(shard)
            return 421, {**told, "error": "not_owned",
                         "recovering": job is not None and job.remaining > 0}
        try:
            return 200, {**told, **answers.status(store, key)}
        except Exception as error:  # noqa: BLE001 - a store closed by a rebalance meanwhile: ask again
            log.debug("status of %s in shard %d: %r", key.hex(), shard, error)
            return 503, {**told, "error": f"the shard's store could not be read now: {error}"}
