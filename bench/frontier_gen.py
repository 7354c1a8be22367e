"""A synthetic crawl frontier with realistic URL shapes and a known set of distinct canonical URLs.

Distinct URLs are built already in the safe canonical form (lower-case host, no default port, no
fragment, escapes normalised), on a few thousand hosts with the path shapes crawlers meet: news
articles by date, product pages with ids, category listings with paging, search and tag pages with
query parameters, static files. Repeats are the same URLs discovered again, about half of them
spelled differently in ways the safe profile undoes (host case, ``:80``, a fragment, an escaped
unreserved character, a ``./`` segment, or a relative link with its ``source_url``). So the
number of distinct canonical URLs is known by construction, without canonicalizing anything.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import orjson

WORDS = (
    "news", "world", "market", "city", "sport", "music", "film", "science", "health", "travel",
    "food", "tech", "cloud", "data", "open", "river", "stone", "light", "north", "garden",
    "summer", "winter", "green", "red", "blue", "paper", "glass", "iron", "story",
)
TLDS = ("com", "org", "net", "de", "fr", "co.uk", "io", "jp", "cn", "com.br", "ru", "it")


def _hosts(rng: random.Random, count: int) -> list[str]:
    return [f"{rng.choice(('', 'www.', 'blog.', 'shop.', 'news.'))}{rng.choice(WORDS)}{i}."
            f"{rng.choice(TLDS)}" for i in range(count)]


def _path(rng: random.Random, index: int) -> str:
    shape = index % 6
    slug = "-".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
    if shape == 0:
        return f"/{2015 + index % 10}/{1 + index % 12:02d}/{slug}-{index}.html"
    if shape == 1:
        return f"/product/{index}?ref={rng.choice(WORDS)}&color={rng.choice(('red', 'blue', 'green'))}"
    if shape == 2:
        return f"/{rng.choice(WORDS)}/{slug}/page/{index}"
    if shape == 3:
        return f"/search?q={rng.choice(WORDS)}+{rng.choice(WORDS)}&page={index}"
    if shape == 4:
        return f"/tag/{slug}?id={index}&sort=date"
    return f"/static/{slug}/{index}.pdf"


def _variant(rng: random.Random, url: str) -> dict[str, object]:
    """The same resource spelled differently, in a way the safe profile undoes."""
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    choice = rng.randrange(6)
    if choice == 0:
        return {"url": f"{scheme.upper()}://{host.upper()}/{path}"}
    if choice == 1:
        return {"url": f"{scheme}://{host}:{443 if scheme == 'https' else 80}/{path}"}
    if choice == 2:
        return {"url": f"{url}#section-{rng.randrange(9)}"}
    if choice == 3:
        return {"url": f"{scheme}://{host}/./{path}"}
    if choice == 4:
        return {"url": url.replace("-", "%2D", 1) if "-" in path else url}
    leaf = path.rsplit("/", 1)[-1]
    directory = path[: len(path) - len(leaf)]
    return {"url": leaf or "./", "source_url": f"{scheme}://{host}/{directory}index.html"}


def frontier(total: int, repeat_share: float = 0.7, hosts: int = 5000, seed: int = 5) -> tuple[
        Iterator[bytes], int]:
    """``total`` frontier records (JSON bytes) and the number of distinct canonical URLs in them."""
    records, urls = frontier_urls(total, repeat_share, hosts, seed)
    return records, len(urls)


def frontier_urls(total: int, repeat_share: float = 0.7, hosts: int = 5000, seed: int = 5) -> tuple[
        Iterator[bytes], list[str]]:
    """:func:`frontier`, with the distinct canonical URLs themselves (the expected output)."""
    rng = random.Random(seed)
    distinct = max(1, int(total * (1 - repeat_share)))
    host_names = _hosts(rng, hosts)
    urls = [f"{'https' if i % 3 else 'http'}://{rng.choice(host_names)}{_path(rng, i)}"
            for i in range(distinct)]
    order = list(range(distinct)) + [rng.randrange(distinct) for _ in range(total - distinct)]
    rng.shuffle(order)
    first_seen: set[int] = set()

    def records() -> Iterator[bytes]:
        for index in order:
            url = urls[index]
            repeat = index in first_seen and rng.random() < 0.5
            record = _variant(rng, url) if repeat else {"url": url}
            first_seen.add(index)
            record.setdefault("source_url", None)
            record["depth"] = 1 + index % 5
            yield orjson.dumps(record)

    return records(), urls
