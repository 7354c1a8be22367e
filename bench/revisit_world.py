"""A simulated web whose change processes are known, for the revisit benchmark (bench/revisit_sim.py).

Each :class:`SimPage` changes by a known process: Poisson with a rate from minutes to months, never,
or periodically (a fixed period and a random phase). A *change* replaces two of the article's six
paragraphs (about 80 of 250 words). Some pages also have *trivial* changes that must not count: a
view counter that moves on every response, in the footer (boilerplate, outside the main text) or
as a sentence of the article (inside it: its SimHash moves by a few bits). Each page's server
answers in one of these styles:

* ``etag_lm``: a strong ETag of the content version and Last-Modified = time of the last change; 304
  on a matching If-None-Match (or, without one, an If-Modified-Since not older than Last-Modified).
* ``lm`` / ``etag``: only one of the two. ``none``: no validators, always 200.
* ``body_etag``: a weak ETag hashed from the whole response body (as frameworks that ETag dynamic
  pages do), so a counter changes it on every response and it never matches.
* ``lm_now``: Last-Modified is the time of the response (dynamic pages), so it always moves.

Quiet pages (no counter) get one of the first four; pages with counters one of the last three.
Everything is drawn from one seeded generator, so a run is reproducible.

Two worlds (:data:`WORLDS`): ``mixed`` (:func:`build_world`: fast, medium and slow Poisson pages,
periodic pages, pages that never change, on 97 hosts), and ``textbook``
(:func:`build_textbook_world`: Poisson pages only, mean times between changes log-uniform from an
hour to half a year, 15 % never changing, every one of ten hosts mixing all rates).
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

from streams import records

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
PARAGRAPHS = 6
WORDS_PER_PARAGRAPH = 42
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from they this which be or an are not have has "
    "had it its were one all their there been would when who more will up out about city river market "
    "council school water power company season report study family health team government plan winter "
    "summer data system music film history science road station court police bridge museum garden "
    "island forest village harbour railway election budget minister player coach match goal league cup "
    "record price bank trade energy climate research student teacher hospital doctor patient program "
    "network software user server library street house build opened closed announced said reported "
    "found showed began moved grew fell rose signed new old first last early late major local national "
    "public private central northern southern"
)
_WORDS = _WORD_TEXT.split()

# (kind, share, low, high): Poisson mean times between changes drawn log-uniformly in [low, high].
POISSON_CLASSES = (("fast", 0.06, 10 * MINUTE, 4 * HOUR), ("medium", 0.30, 4 * HOUR, 4 * DAY),
                   ("slow", 0.30, 4 * DAY, 120 * DAY))
NEVER_SHARE = 0.14
PERIODS_S = (6 * HOUR, DAY, 7 * DAY)           # the remaining 20 %: periodic pages
NOISY_SHARE = 0.30                              # pages with a counter (half footer, half in the text)
QUIET_SERVERS = (("etag_lm", 0.35), ("lm", 0.20), ("etag", 0.15), ("none", 0.30))
NOISY_SERVERS = (("none", 0.40), ("body_etag", 0.30), ("lm_now", 0.30))


@dataclass
class SimPage:
    """One page: its true change process, what it looks like now, and how its server answers."""

    index: int
    url: str
    kind: str                      # fast | medium | slow | never | periodic
    rate_per_s: float              # Poisson rate (0 for never and periodic)
    period_s: float                # periodic pages (0 otherwise)
    noise: str                     # none | footer | text
    server: str
    next_change_s: float
    version: int = 0
    last_change_s: float = -30 * DAY
    generations: list[int] = field(default_factory=lambda: [0] * PARAGRAPHS)
    counter: int = 0
    _article: tuple[int, str] = (-1, "")

    def advance(self, now_s: float, rng: random.Random) -> float | None:
        """Apply every change up to ``now_s``; return the time of the first one applied, if any."""
        first = None
        while self.next_change_s <= now_s:
            first = self.next_change_s if first is None else first
            self.version += 1
            self.last_change_s = self.next_change_s
            for paragraph in rng.sample(range(PARAGRAPHS), 2):
                self.generations[paragraph] += 1
            gap_s = self.period_s if self.kind == "periodic" else rng.expovariate(self.rate_per_s)
            self.next_change_s += gap_s
        return first

    def article(self) -> str:
        if self._article[0] != self.version:
            paragraphs = "".join(f"<p>{_paragraph(self.index, i, g)}</p>"
                                 for i, g in enumerate(self.generations))
            self._article = (self.version, paragraphs)
        return self._article[1]


def build_world(pages: int, seed: int) -> list[SimPage]:
    """``pages`` pages with the class, noise and server mix of the module docstring."""
    rng = random.Random(seed)
    world = []
    for index in range(pages):
        kind, rate, period = _draw_process(rng)
        noise, server = _noise_and_server(rng)
        first_change = rng.expovariate(rate) if rate > 0 else math.inf
        if kind == "periodic":
            first_change = rng.uniform(0.0, period)
        world.append(SimPage(index=index, url=f"http://site{index % 97}.example/page/{index}", kind=kind,
                             rate_per_s=rate, period_s=period, noise=noise, server=server,
                             next_change_s=first_change))
    return world


# The textbook model (Cho and Garcia-Molina, "Effective page refresh policies for web crawlers",
# TODS 2003): every page Poisson, mean times between changes log-uniform from an hour to half a year,
# some never changing; every host mixes all of them, so a host's pages do not agree on a rate.
TEXTBOOK_PERIODS_S = (HOUR, 180 * DAY)
TEXTBOOK_NEVER_SHARE = 0.15
TEXTBOOK_HOSTS = 10
TEXTBOOK_KINDS = ((DAY, "hours"), (7 * DAY, "days"), (30 * DAY, "weeks"), (math.inf, "months"))


def build_textbook_world(pages: int, seed: int) -> list[SimPage]:
    """``pages`` Poisson pages of the textbook model above on :data:`TEXTBOOK_HOSTS` hosts, each host's
    pages drawn alike; counters and servers as in :func:`build_world`. A page's kind names the scale
    of its mean time between changes (under a day: ``hours``; a week: ``days``; a month: ``weeks``;
    else ``months``), or ``never``."""
    rng = random.Random(seed)
    low, high = (math.log(bound) for bound in TEXTBOOK_PERIODS_S)
    world = []
    for index in range(pages):
        mean_s = math.inf if rng.random() < TEXTBOOK_NEVER_SHARE else math.exp(rng.uniform(low, high))
        rate = 0.0 if math.isinf(mean_s) else 1.0 / mean_s
        kind = "never" if rate == 0 else next(name for bound, name in TEXTBOOK_KINDS if mean_s < bound)
        noise, server = _noise_and_server(rng)
        world.append(SimPage(index=index, url=f"http://host{index % TEXTBOOK_HOSTS}.example/page/{index}",
                             kind=kind, rate_per_s=rate, period_s=0.0, noise=noise, server=server,
                             next_change_s=rng.expovariate(rate) if rate > 0 else math.inf))
    return world


WORLDS = {"mixed": build_world, "textbook": build_textbook_world}


def _noise_and_server(rng: random.Random) -> tuple[str, str]:
    """A page's counter (none, in the footer, in the text) and its server's style."""
    noise = "none" if rng.random() >= NOISY_SHARE else rng.choice(("footer", "text"))
    return noise, _draw(rng, QUIET_SERVERS if noise == "none" else NOISY_SERVERS)


def _draw_process(rng: random.Random) -> tuple[str, float, float]:
    roll = rng.random()
    for kind, share, low, high in POISSON_CLASSES:
        if roll < share:
            return kind, 1.0 / math.exp(rng.uniform(math.log(low), math.log(high))), 0.0
        roll -= share
    if roll < NEVER_SHARE:
        return "never", 0.0, 0.0
    return "periodic", 0.0, rng.choice(PERIODS_S)


def _draw(rng: random.Random, choices: tuple[tuple[str, float], ...]) -> str:
    roll = rng.random()
    for name, share in choices:
        if roll < share:
            return name
        roll -= share
    return choices[-1][0]


@functools.lru_cache(maxsize=20_000)
def _paragraph(page: int, paragraph: int, generation: int) -> str:
    rng = random.Random(f"{page}:{paragraph}:{generation}")
    return " ".join(rng.choice(_WORDS) for _ in range(WORDS_PER_PARAGRAPH)).capitalize() + "."


def respond(page: SimPage, now_s: float, request_headers: dict[str, str]) -> dict[str, Any]:
    """The ``fetched_page`` record of a GET at ``now_s`` with the client's conditional headers."""
    page.counter += 1
    body = _body(page)
    headers = _validators(page, now_s, body)
    fetched_at = records.rfc3339(EPOCH + timedelta(seconds=now_s))
    if _not_modified(page, headers, request_headers):
        return {"url": page.url, "status": 304, "headers": headers, "fetched_at": fetched_at}
    return {"url": page.url, "status": 200, "headers": headers, "content_type": "text/html; charset=utf-8",
            "body": body, "fetched_at": fetched_at}


def _body(page: SimPage) -> str:
    counter = f"<p>This report has been read {page.counter} times.</p>" if page.noise == "text" else ""
    footer = f"Views: {page.counter}" if page.noise == "footer" else "Contact us"
    return (f"<!doctype html><html><head><title>Page {page.index}</title></head><body>"
            f"<nav><a href='/'>Home</a> <a href='/news'>News</a> <a href='/sport'>Sport</a></nav>"
            f"<main><article><h1>Report {page.index}</h1>{page.article()}{counter}"
            f"</article></main><footer>{footer} | Copyright Example</footer></body></html>")


def _validators(page: SimPage, now_s: float, body: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    if page.server in ("etag_lm", "etag"):
        headers["ETag"] = f'"p{page.index}-v{page.version}"'
    if page.server == "body_etag":
        headers["ETag"] = 'W/"' + hashlib.blake2b(body.encode(), digest_size=8).hexdigest() + '"'
    if page.server in ("etag_lm", "lm"):
        headers["Last-Modified"] = _http_date(max(page.last_change_s, -30 * DAY))
    if page.server == "lm_now":
        headers["Last-Modified"] = _http_date(now_s)
    return headers


def _not_modified(page: SimPage, headers: dict[str, str], request: dict[str, str]) -> bool:
    """RFC 9110 section 13.2.2: If-None-Match first; If-Modified-Since only without it."""
    if "If-None-Match" in request:
        return "ETag" in headers and request["If-None-Match"] == headers["ETag"]
    if "If-Modified-Since" in request and "Last-Modified" in headers:
        return request["If-Modified-Since"] == headers["Last-Modified"]
    return False


def _http_date(seconds: float) -> str:
    return format_datetime(EPOCH + timedelta(seconds=math.floor(seconds)), usegmt=True)
