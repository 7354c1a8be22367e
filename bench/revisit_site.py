"""The real histories as a website: each page version rendered into HTML, served with churn.

A fetch of a page at time ``t`` gets the page's file as it was at ``t`` (bench/revisit_history.py),
its markdown rendered (markdown-it-py, CommonMark with tables and raw HTML; YAML front matter gives
the title, and a ``releases`` list in it the table endoflife.date shows) inside one template per
site: a header with the site's navigation, a sidebar listing the titles of the site's pages as they
are at ``t`` (so one page's new title changes every page's sidebar: real boilerplate change), the
article, and a footer. Around it, churn that a crawler must not take for a change, drawn afresh for
every response: a view counter, the time of rendering and a build id, a session token in the
sign-in link, a CSRF token in a meta tag and a hidden form field, a rotating "popular pages" list
and a rotating sponsor's sentence. And one sentence of churn inside the article itself, where a
crawler's main-text extraction keeps it: a view counter, the time the page was generated, both, or
that time in words (weekday and month names), at the article's top or bottom, one form per site
(:data:`_ARTICLE_CHURN`), so that a rule learned on one site's template cannot assume another's. It
is template, not content: the page's own numbers are the commit's.

The truth: a page *changed* when the visible text of its article as committed (title and rendered
body, tags stripped, whitespace collapsed; the churn sentence is not part of it) differs; a commit
that only touched the rest of the front matter, markup or whitespace does not change it. Half the
pages (drawn by URL) answer conditional requests: a strong ETag of the article and sidebar as built,
Last-Modified the last time either changed, and 304 to a matching If-None-Match (RFC 9110 section
13.2.2: If-Modified-Since only without one). The other
half send no validators and always answer 200.
"""

from __future__ import annotations

import bisect
import hashlib
import html
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import yaml
from markdown_it import MarkdownIt

from bench.revisit_history import Dataset, Page

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
_MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable("table")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)
_MDX_IMPORT = re.compile(r"^(import|export) .*$", re.M)
_TAG = re.compile(r"<[^>]*>")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_SPONSORS = (
    "Ship faster with hosted search for your documentation: instant answers, typo tolerance, analytics.",
    "Our cloud runs your builds on every push. Free for open source projects, forever.",
    "Learn the framework from the people who build it: video courses, now twenty percent off.",
    "Monitor your production errors and performance in one place. Start a free trial today.",
    "Deploy to the edge in seconds with automatic previews for every pull request you open.",
    "Hire developers who already know this stack: post a job on our board and reach thousands.",
)


def _views(rng: random.Random, at: datetime) -> str:
    return f"This page has been viewed {rng.randint(1_000, 2_000_000):,} times."


def _generated(rng: random.Random, at: datetime) -> str:
    return f"Page generated {at:%Y-%m-%d %H:%M:%S} UTC in {rng.randint(8, 90)} ms."


def _views_and_generated(rng: random.Random, at: datetime) -> str:
    return f"Viewed {rng.randint(1_000, 2_000_000):,} times; page generated {at:%Y-%m-%d %H:%M:%S} UTC."


def _served_in_words(rng: random.Random, at: datetime) -> str:
    readers = rng.randint(2, 400)
    return f"Served {at:%A}, {at.day} {at:%B %Y} at {at:%H:%M} UTC to one of {readers} readers online."


# The article's churn sentence of the n-th site (in the manifest's order): form n % 4, placed after
# the title when (n + n // 4) is even, else at the end.
_ARTICLE_CHURN = (_views, _generated, _views_and_generated, _served_in_words)


class _FrontMatterLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML's safe loader (libyaml's when built: endoflife.date's front matter is long) with dates
    kept as written: the pages show them so, and a version with an impossible date (a 2024-02-30
    fixed by the next commit) still renders rather than losing its front matter."""


_FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)


@dataclass
class Version:
    start_s: float
    title: str
    article: str       # rendered HTML of the article (title and body)
    text_id: int       # interned visible text: equal ids, equal text
    words_id: int      # interned visible text with every number masked: equal across a numbers-only edit


@dataclass
class SitePage:
    """A page as served: its versions, the site's other pages, its server's habits."""

    index: int
    url: str
    host: str
    conditional: bool
    versions: list[Version]
    starts: list[float] = field(default_factory=list)
    fetches: int = 0

    def __post_init__(self) -> None:
        self.starts = [v.start_s for v in self.versions]

    def at(self, t_s: float) -> Version:
        return self.versions[max(0, bisect.bisect_right(self.starts, t_s) - 1)]

    def real_changes(self, begin_s: float = 0.0, end_s: float = float("inf")) -> int:
        """Changes of the article's text with ``begin_s < t <= end_s``."""
        return sum(1 for t_s in self.change_times_s() if begin_s < t_s <= end_s)

    def change_times_s(self) -> list[float]:
        """When the article's text changed: the start of each version whose text differs from the last."""
        return [b.start_s for a, b in zip(self.versions, self.versions[1:], strict=False)
                if a.text_id != b.text_id]


class Site:
    """Every page of the dataset, rendered once per version, grouped by host."""

    def __init__(self, dataset: Dataset, hosts: Sequence[str] = ()) -> None:
        """``hosts``: every site's host in the manifest's order, when ``dataset`` holds only some of
        them (a site's article churn is the form of its place in that order)."""
        texts: dict[str, int] = {}
        self.window_s = dataset.window_s
        self.pages = [_site_page(i, page, texts) for i, page in enumerate(dataset.pages)]
        self.by_host: dict[str, list[SitePage]] = {}
        for page in self.pages:
            self.by_host.setdefault(page.host, []).append(page)
        order = list(hosts) or list(self.by_host)
        self.churn = {host: (_ARTICLE_CHURN[n % len(_ARTICLE_CHURN)], (n + n // len(_ARTICLE_CHURN)) % 2 == 0)
                      for n, host in enumerate(order) if host in self.by_host}

    def reset(self) -> None:
        """Back to no fetch served, so a replay's responses do not depend on the replays before it."""
        for page in self.pages:
            page.fetches = 0

    def respond(self, page: SitePage, t_s: float, request: dict[str, str]) -> dict[str, Any]:
        """The ``fetched_page`` record of a GET of ``page`` at ``t_s`` with ``request``'s headers."""
        page.fetches += 1
        version = page.at(t_s)
        siblings = self.by_host[page.host]
        sidebar = "".join(f'<li><a href="{s.url}">{html.escape(s.at(t_s).title)}</a></li>' for s in siblings)
        fetched_at = (EPOCH + timedelta(seconds=t_s)).isoformat().replace("+00:00", "Z")
        headers: dict[str, str] = {}
        if page.conditional:
            built = hashlib.blake2b((version.article + sidebar).encode(), digest_size=8).hexdigest()
            headers["ETag"] = f'"{built}"'
            changed_s = max(version.start_s, *(s.at(t_s).start_s for s in siblings))
            headers["Last-Modified"] = format_datetime(EPOCH + timedelta(seconds=int(changed_s)), usegmt=True)
            if request.get("If-None-Match") == headers["ETag"]:
                return {"url": page.url, "status": 304, "headers": headers, "fetched_at": fetched_at}
        body = self._body(page, version, sidebar, t_s, siblings)
        return {"url": page.url, "status": 200, "headers": headers,
                "content_type": "text/html; charset=utf-8", "body": body, "fetched_at": fetched_at}

    def _body(self, page: SitePage, version: Version, sidebar: str, t_s: float,
              siblings: list[SitePage]) -> str:
        rng = random.Random(f"{page.url}:{page.fetches}")
        token = f"{rng.getrandbits(128):032x}"
        popular = "".join(f'<li><a href="{s.url}">{html.escape(s.at(t_s).title)}</a></li>'
                          for s in rng.sample(siblings, min(5, len(siblings))))
        rendered = (EPOCH + timedelta(seconds=t_s)).strftime("%Y-%m-%d %H:%M:%S")
        sponsor, views, took_ms = rng.choice(_SPONSORS), rng.randint(1_000, 2_000_000), rng.randint(8, 90)
        form, on_top = self.churn[page.host]
        churn = f'<p class="page-meta">{html.escape(form(rng, EPOCH + timedelta(seconds=t_s)))}</p>'
        title, _, rest = version.article.partition("</h1>")
        article = f"{title}</h1>{churn}{rest}" if on_top else f"{version.article}{churn}"
        return (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<title>{html.escape(version.title)} | {page.host}</title>'
            f'<meta name="csrf-token" content="{token}"></head><body>'
            f'<header><nav><a href="/">{page.host}</a> <a href="/guide/">Guide</a> <a href="/api/">API</a> '
            f'<a href="/blog/">Blog</a> <a href="/login?session={token}">Sign in</a></nav>'
            f'<form action="/search"><input name="q"><input type="hidden" name="csrf" value="{token}"></form>'
            f'</header><div class="layout"><aside class="sidebar"><nav><ul>{sidebar}</ul></nav>'
            f'<div class="popular"><h3>Popular pages</h3><ul>{popular}</ul></div></aside>'
            f'<main><article>{article}</article></main>'
            f'<aside class="sponsor"><p>{sponsor}</p></aside></div>'
            f'<footer><p>{views:,} views. Rendered {rendered} UTC in '
            f'{took_ms} ms, build {token[:7]}.</p><p>Content licensed CC BY 4.0.</p></footer>'
            f'</body></html>')


def render(path: str, source: str) -> tuple[str, str]:
    """(title, article HTML) of one file version: front matter's title, else the first heading."""
    meta: dict[str, Any] = {}
    found = _FRONT_MATTER.match(source)
    if found:
        try:
            loaded = yaml.load(found.group(1), Loader=_FrontMatterLoader)  # noqa: S506 (a safe loader)
            meta = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            meta = {}
        source = source[found.end():]
    if path.endswith(".mdx"):
        source = _MDX_IMPORT.sub("", source)
    title = str(meta.get("title") or meta.get("linkTitle") or "")
    if not title:
        # Not a heading inside a comment (the semantic conventions keep Hugo's front matter in one).
        blanked = _COMMENT.sub(lambda comment: re.sub(r"[^\n]", " ", comment.group()), source)
        heading = re.search(r"^# (.+)$", blanked, re.M)
        title = heading.group(1).strip() if heading else path.rsplit("/", 1)[-1]
        if heading:
            source = source[:heading.start()] + source[heading.end():]
    return title, f"<h1>{html.escape(title)}</h1>{_releases(meta)}{_MARKDOWN.render(source)}"


def _releases(meta: dict[str, Any]) -> str:
    """The front matter's ``releases`` list as the table the page shows (endoflife.date renders its
    products' release cycles so: without it their edits, versions and dates, would be invisible).
    Every field of any release is a column, in the order first seen, headed by the label the site
    shows (:data:`_RELEASE_LABELS`; other fields by their name), so that renaming a field in the
    source (``support`` to ``eoas``, ``latestReleaseDate`` to ``latestDate`` and back) changes no
    text, as on the site; links are targets, not text, and are left out. A missing cell is empty."""
    releases = [r for r in meta.get("releases") or () if isinstance(r, dict)]
    if not releases:
        return ""
    columns: dict[str, list[Any]] = {}
    for name in dict.fromkeys(key for release in releases for key in release):
        if "link" not in str(name).lower():
            columns.setdefault(_RELEASE_LABELS.get(str(name), str(name)), []).append(name)
    head = "".join(f"<th>{html.escape(label)}</th>" for label in columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(next((r[n] for n in names if n in r), None)))}"
                                    "</td>" for names in columns.values()) + "</tr>" for r in releases)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


_RELEASE_LABELS = {
    "releaseCycle": "Release", "codename": "Codename", "releaseDate": "Released", "support": "Active support",
    "eoas": "Active support", "eol": "End of life", "eoes": "Extended support", "lts": "LTS",
    "latest": "Latest", "latestReleaseDate": "Latest release date", "latestDate": "Latest release date",
    "discontinued": "Discontinued",
}


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return "" if value is None else str(value)


def visible_text(article: str) -> str:
    """What a reader sees of the article: tags out, entities read, whitespace collapsed."""
    return " ".join(html.unescape(_TAG.sub(" ", article)).split())


def _site_page(index: int, page: Page, texts: dict[str, int]) -> SitePage:
    versions = []
    for start_s, source in page.versions:
        title, article = render(page.path, source)
        text = visible_text(article)
        text_id = texts.setdefault(text, len(texts))
        words_id = texts.setdefault("\0" + _NUMBER.sub("#", text), len(texts))
        versions.append(Version(start_s, title, article, text_id, words_id))
    conditional = hashlib.blake2b(page.url.encode(), digest_size=1).digest()[0] % 2 == 0
    return SitePage(index, page.url, page.host, conditional, versions)
