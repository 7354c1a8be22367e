"""A local HTTP server that answers every host as the crawlers' proxy (the ``http_proxy`` variable
Scrapy's HttpProxyMiddleware reads), so no name needs to resolve: the base of the Scrapy tests' and
benchmark's sites, which only say how to answer (:meth:`ProxyServer.answer`)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ProxyServer:
    """Serves on 127.0.0.1, any free port, from a daemon thread while entered."""

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                server.answer(self)

            def do_POST(self) -> None:  # noqa: N802
                server.answer(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def without_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, as servers apply it to a request's path (a path ending in a dot
    segment keeps its slash: ``/a/b/..`` is ``/a/``)."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    trailing = path.endswith(("/.", "/.."))
    return "/" + "/".join(out) + ("/" if trailing and out else "")
