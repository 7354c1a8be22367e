"""The worker's HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz`` and ``/status`` on one port.

What an orchestrator reads is the status code; the body (JSON) says why, for the operator:

- ``/healthz`` (liveness): 200 while the main loop shows a sign of life within
  ``stall_after_s`` (a loop turn, a committed part of a batch, a chunk of changelog replayed), 503
  once it has not for that long: the process is wedged, restart it. A worker that is still
  recovering is alive (recovery reports its progress), and so is one that waits for input.
- ``/readyz`` (readiness): 200 once the worker has its assignment from the group, has recovered the
  shards of that assignment from their changelogs and is consuming (its loop turned since); 503
  before that (joining the group, recovering) and while it stops. An assignment may be empty (more
  workers than shards): such a worker is ready, as a standby. A worker that keeps standby copies
  (``[runtime] standby_replicas``) is ready once each has caught up with its changelog once, so a
  rolling restart waits for the new worker to be able to stand in for the next one.

- ``/status?key=HEX``: what the shard owning a state key says of it (:mod:`streams.ops.status`),
  for ``crawl-dedup status``.

The port is the worker's metrics port, taken exactly: a port in use is a start-up error naming it,
``0`` explicitly asks for any free port (logged). It is bound before the worker joins its group
(:func:`bind`), so the worker can tell the group where it answers
(:func:`streams.ops.owners.advertised_client_id`).
Answers are computed from the worker's lifecycle as the runtime publishes it, a
:class:`~streams.runtime.snapshot.LifecycleSnapshot` taken for each probe in the server's thread.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import CollectorRegistry, make_wsgi_app

from streams.errors import ConfigError
from streams.runtime.snapshot import LifecycleSnapshot

log = logging.getLogger(__name__)

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Answer = tuple[bool, dict[str, Any]]
StatusAnswer = Callable[[str], tuple[int, dict[str, Any]]]  # query string -> (HTTP status, body)
STATUS_LINES = {200: "200 OK", 400: "400 Bad Request", 404: "404 Not Found",
                421: "421 Misdirected Request", 503: "503 Service Unavailable"}
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names, not a bind


def liveness(lifecycle: LifecycleSnapshot, stall_after_s: float, now: float | None = None) -> Answer:
    """(alive, facts): the main loop showed a sign of life within ``stall_after_s``. Decided on the
    age as reported (to the millisecond), so a stalled answer never shows an age of exactly
    ``stall_after_s``."""
    quiet_s = round((time.monotonic() if now is None else now) - lifecycle.last_turn, 3)
    alive = quiet_s <= stall_after_s or lifecycle.phase == "stopped"
    return alive, {"status": "ok" if alive else "stalled", "phase": lifecycle.phase,
                   "seconds_since_loop_turned": quiet_s, "stall_after_s": stall_after_s}


def readiness(lifecycle: LifecycleSnapshot, stall_after_s: float, now: float | None = None) -> Answer:
    """(ready, facts): assigned, recovered, consuming, and not stalled."""
    alive, facts = liveness(lifecycle, stall_after_s, now)
    ready = lifecycle.ready and alive
    shards = sorted(p for t, p in lifecycle.owned if t in lifecycle.shard_topics)
    recovering = {str(shard): {"replayed": job.done, "to_replay": job.total,
                               "percent": round(100 * job.ratio, 1)}
                  for shard, job in sorted(lifecycle.recovery.items()) if job.remaining > 0}
    return ready, {"ready": ready, "phase": lifecycle.phase, "assigned": lifecycle.assigned,
                   "shards": shards, "partitions": len(lifecycle.owned), "recovering": recovering,
                   "standbys": {str(shard): lag for shard, lag in sorted(lifecycle.standbys.items())},
                   "standbys_warm": lifecycle.standbys_warm, "stalled": not alive}


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Probes every few seconds are not log lines."""


class Endpoint:
    """The WSGI application: the registry on ``/metrics``, the two probes, the state's ``/status``,
    404 elsewhere. ``lifecycle``: the worker's lifecycle now
    (:meth:`~streams.runtime.snapshot.Published.lifecycle`), asked at each probe."""

    def __init__(self, registry: CollectorRegistry, lifecycle: Callable[[], LifecycleSnapshot] | None,
                 stall_after_s: float, status: StatusAnswer | None = None) -> None:
        self._metrics = make_wsgi_app(registry)
        self._lifecycle, self._stall_after_s = lifecycle, stall_after_s
        self._status = status

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in {"/metrics", "/"}:
            answer: Iterable[bytes] = self._metrics(environ, start_response)
            return answer
        if path == "/status" and self._status is not None:
            code, found = self._status(environ.get("QUERY_STRING", ""))
            return _json(start_response, STATUS_LINES.get(code, f"{code} Error"), found)
        probe = {"/healthz": liveness, "/readyz": readiness}.get(path)
        if probe is None or self._lifecycle is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics, /healthz, /readyz, /status\n"]
        ok, facts = probe(self._lifecycle(), self._stall_after_s)
        return _json(start_response, "200 OK" if ok else "503 Service Unavailable", facts)


def _json(start_response: StartResponse, status: str, found: dict[str, Any]) -> list[bytes]:
    body = orjson.dumps(found) + b"\n"
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store")])
    return [body]


class Bound:
    """A port bound and served in a daemon thread before its application is known: it answers 404
    until :meth:`attach` gives it one (a worker binds its port before it joins its group)."""

    def __init__(self, server: WSGIServer, host: str) -> None:
        self._server = server
        self.host = host
        self.port: int = server.server_port

    def attach(self, app: Endpoint) -> None:
        self._server.set_app(app)

    @property
    def address(self) -> str:
        """``host:port`` where it answers; the host is empty when it listens on every address (the
        one the group sees the worker connect from is then the one to use)."""
        host = "" if self.host in WILDCARD_HOSTS else self.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def serve(app: Endpoint, host: str, port: int) -> int:
    """Serve ``app`` on ``host:port`` in a daemon thread; return the port bound (``0``: any)."""
    bound = bind(host, port)
    bound.attach(app)
    return bound.port


def _not_yet(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"not yet: the worker is starting\n"]


def bind(host: str, port: int) -> Bound:
    """Bind ``host:port`` (``0``: any free port) and serve it in a daemon thread, with no application
    yet (:class:`Bound`)."""
    server_class = _Server6 if ":" in host else _Server
    try:
        server = make_server(host, port, _not_yet, server_class=server_class, handler_class=_Quiet)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ConfigError(f"metrics port {port} on {host} is taken (another worker on this host?): "
                              "give each worker its own with --metrics-port or STREAMS_METRICS_PORT, "
                              "or 0 for any free port") from error
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {error}") from error
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return Bound(server, host)
