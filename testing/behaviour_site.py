"""A local site to compare Scrapy's behaviours on, with and without the stages (the Scrapy tests).

:class:`BehaviourSite` answers every host on 127.0.0.1 as the crawlers' HTTP proxy (the
``http_proxy`` variable Scrapy's HttpProxyMiddleware reads), so no name needs to resolve; its
access log (method, URL with dot segments resolved, headers, body) is the ground truth of what a
crawl fetched. Routes: ``echo*.test`` answers any method with the request it got, as JSON;
``a-gate.test/`` answers once :attr:`BehaviourSite.gate` is set (a slow page that holds a crawl's
only download slot); :attr:`BehaviourSite.redirects` maps a URL to (status, Location); any other
URL is a small HTML page.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from testing.proxy_server import ProxyServer, without_dot_segments


@dataclass(frozen=True)
class Hit:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


class BehaviourSite(ProxyServer):
    def __init__(self) -> None:
        self.log: list[Hit] = []
        self.redirects: dict[str, tuple[int, str]] = {}
        self.gate = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def __enter__(self) -> BehaviourSite:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.gate.set()
        self.close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        host = (parts.hostname or "").lower()
        query = f"?{parts.query}" if parts.query else ""
        url = f"http://{host}{without_dot_segments(parts.path or '/')}{query}"
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in handler.headers.items()}
        with self._lock:
            self.log.append(Hit(handler.command, url, headers, body))
        status, extra, content = 200, {"Content-Type": "text/html; charset=utf-8"}, b""
        if url in self.redirects:
            status, location = self.redirects[url]
            extra = {"Location": location}
        elif host.startswith("echo"):
            content = json.dumps({"method": handler.command, "url": url, "headers": headers,
                                  "body": body.decode("latin-1")}, sort_keys=True).encode()
            extra = {"Content-Type": "application/json"}
        else:
            if host == "a-gate.test":
                self.gate.wait(60)
            content = f"<html><head><title>{url}</title></head><body><p>{url}</p></body></html>".encode()
        handler.send_response(status)
        for name, value in {**extra, "Content-Length": str(len(content))}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(content)

    def fetched(self, method: str = "GET") -> list[str]:
        with self._lock:
            return [hit.url for hit in self.log if hit.method == method]


@contextmanager
def released_when(condition: Callable[[], bool], gate: threading.Event,
                  settle_s: float = 0.5) -> Iterator[None]:
    """Set ``gate`` once ``condition`` holds (polled in a thread), ``settle_s`` later."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and not condition():
            time.sleep(0.05)
        time.sleep(settle_s)
        gate.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
