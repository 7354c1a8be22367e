"""A real site to crawl, locally: linked pages on 127.0.0.1 under several host names, with planted copies.

One threaded HTTP server answers for every host: Scrapy reaches it as its HTTP proxy (the
``http_proxy`` environment variable, which Scrapy's HttpProxyMiddleware reads), so a request for
``http://mirror.test/p/3.html`` arrives with that host and the server answers as that host; no name
needs to resolve. It resolves dot segments in a path, as web servers do, so every spelling of a page
serves it; its access log, by page, is the ground truth of what was fetched (``tests/`` and
``bench/scrapy_bench.py`` crawl it).

The site (:func:`build`), from ``seed``:
- ``site<n mod 4>.test/p/<n>.html``: ``pages`` articles, each with its own paragraphs of text; every page
  links to a few others, each link in another spelling of the same URL (relative, dot segments,
  upper-case host, default port, fragment, ``index`` paths) so the crawler meets every page under
  several names;
- ``mirror.test/p/<n>.html``: an exact copy of some articles' pages (another host, links absolute);
- ``site<n mod 4>.test/amp/<n>.html``: a near copy of some (one word of the article changed);
- ``version``: articles with ``n`` in ``changing`` serve half of their paragraphs rewritten after
  :meth:`SiteServer.next_version` (pages that change between two crawls).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from testing.proxy_server import ProxyServer, without_dot_segments


@dataclass
class Site:
    pages: dict[tuple[str, str], str]  # (host, path) -> HTML
    clusters: list[set[str]]  # URLs of one text (original with its mirror or near copy)
    changing: set[int] = field(default_factory=set)
    version: int = 0
    rewritten: dict[tuple[str, str], str] = field(default_factory=dict)  # the changing pages, version 1


SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "bu", "da", "fe", "gi", "ho", "ju", "pe")
VOCABULARY = tuple(sorted({"".join(random.Random(n).choices(SYLLABLES, k=2 + n % 3)) for n in range(20_000)}))


def _paragraphs(rng: random.Random, count: int) -> list[str]:
    """Text over a vocabulary of some thousand words (a few dozen would make every page's SimHash
    alike, and fill the block tables' buckets as no real site does)."""
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(40, 70))) + "." for _ in range(count)]


HOSTS = 4


def host_of(number: int) -> str:
    """The host of article ``number``: the site spreads over several (several Scrapy processes)."""
    return f"site{number % HOSTS}.test"


def url_of(number: int) -> str:
    return f"http://{host_of(number)}/p/{number}.html"


def _spelling(rng: random.Random, number: int, here: int) -> str:
    """One of the ways page ``here`` links to article ``number`` (relative forms only on its host)."""
    host = host_of(number)
    absolute = [f"http://{host.upper()}/p/{number}.html", f"http://{host}:80/p/{number}.html",
                f"http://{host}/x/../p/{number}.html", f"http://{host}/p/./{number}.html#top"]
    relative = [f"/p/{number}.html", f"../p/{number}.html", f"/p/{number}.html#section-2"]
    return rng.choice(absolute + (relative if host == host_of(here) else []))


def _html(title: str, paragraphs: list[str], links: list[str]) -> str:
    body = "".join(f"<p>{text}</p>" for text in paragraphs)
    anchors = "".join(f'<li><a href="{href}">link</a></li>' for href in links)
    return (f"<html><head><title>{title}</title></head><body><nav><ul>{anchors}</ul></nav>"
            f"<article><h1>{title}</h1>{body}</article></body></html>")


def build(pages: int = 300, seed: int = 1, mirrors: int = 30, near: int = 20, changing: int = 20) -> Site:
    rng = random.Random(seed)
    texts = {number: _paragraphs(rng, 6) for number in range(pages)}
    site = Site({}, [], set(rng.sample(range(1, pages), changing)))
    mirrored = rng.sample(range(1, pages), mirrors)
    nears = rng.sample([n for n in range(1, pages) if n not in mirrored], near)
    targets: dict[int, list[int]] = {}
    for number in range(pages):
        targets[number] = [rng.randrange(pages) for _ in range(4)] + [(number + 1) % pages]
        links = [_spelling(rng, target, number) for target in targets[number]]
        if number in mirrored:
            links.append(f"http://mirror.test/p/{number}.html")
        if number in nears:
            links.append(f"http://{host_of(number)}/amp/{number}.html")
        site.pages[(host_of(number), f"/p/{number}.html")] = _html(f"Article {number}", texts[number], links)
        if number in site.changing:  # rewritten: half its paragraphs new, its links the same
            text = _paragraphs(random.Random(seed * 100_003 + number), 3) + texts[number][3:]
            site.rewritten[(host_of(number), f"/p/{number}.html")] = _html(f"Article {number}", text, links)
    for number in mirrored:  # the whole page copied, its links made absolute (same text, same nav)
        links = [url_of(target) for target in targets[number]] + [f"http://mirror.test/p/{number}.html"]
        site.pages[("mirror.test", f"/p/{number}.html")] = _html(f"Article {number}", texts[number], links)
        site.clusters.append({url_of(number), f"http://mirror.test/p/{number}.html"})
    for number in nears:  # the page with one word of its last paragraph changed
        edited = list(texts[number])
        words = edited[-1].split(" ")
        words[len(words) // 2] = "lighthouse"
        edited[-1] = " ".join(words)
        links = [url_of(target) for target in targets[number]] + [f"http://{host_of(number)}/amp/{number}.html"]
        site.pages[(host_of(number), f"/amp/{number}.html")] = _html(f"Article {number}", edited, links)
        site.clusters.append({url_of(number), f"http://{host_of(number)}/amp/{number}.html"})
    return site


class SiteServer(ProxyServer):
    """Serves a :class:`Site` on 127.0.0.1 as an HTTP proxy; ``log`` holds every request's URL."""

    def __init__(self, site: Site, delay_s: float = 0.0, jitter_s: float = 0.0, seed: int = 0,
                 opened: threading.Event | None = None) -> None:
        """``opened``: when given, every response waits until it is set (up to two minutes), so that
        a test can let processes join before any of them has anything to crawl."""
        self.site = site
        self.opened = opened
        self.delay_s = delay_s  # per response: a real site's latency, a crawl long enough to be killed
        self.jitter_s = jitter_s  # each response's delay drawn uniformly within delay_s +- jitter_s
        self._random = random.Random(seed)
        self.log: list[str] = []
        self.crawlers: list[str] = []  # the X-Crawler header of each request, beside ``log``
        self.times: list[float] = []  # when each request came (time.monotonic), beside ``log``
        self._lock = threading.Lock()
        super().__init__()

    def __enter__(self) -> SiteServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        host = (parts.hostname or handler.headers.get("Host", "")).lower()
        path = without_dot_segments(parts.path or "/")  # as a web server resolves them
        with self._lock:
            self.log.append(f"http://{host}{path}")
            self.crawlers.append(handler.headers.get("X-Crawler", ""))
            self.times.append(time.monotonic())
            delay_s = self.delay_s + self._random.uniform(-self.jitter_s, self.jitter_s)
        if self.opened is not None:
            self.opened.wait(120)
        time.sleep(max(0.0, delay_s))
        html = self.site.pages.get((host, path))
        if self.site.version:
            html = self.site.rewritten.get((host, path), html)
        status, body = (200, html.encode()) if html is not None else (404, b"not found")
        handler.send_response(status)
        handler.send_header("Content-Type", "text/html; charset=utf-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def next_version(self) -> None:
        self.site.version += 1

    def fetches(self) -> Counter[str]:
        with self._lock:
            return Counter(self.log)
