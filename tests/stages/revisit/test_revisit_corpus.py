"""Change detection on real pages: small real edits are changes, boilerplate churn is not.

The pages are the shared corpus's (``../shared/corpus``, MANIFEST.md): the Zyte article-extraction
benchmark's 181 pages with their article text, and Readability's test pages with the content it
extracts. From each page, transformations kept here (the corpus's rule: never in the corpus):

* *edits* of the article: one word of it replaced, or a clause inserted after one, at a place that
  occurs once in the page's HTML and inside its article text (so the edit is in the article);
* *churn* outside it, drawn afresh for every fetch: a view counter, the time of rendering and a
  build id in a footer, a session token on every link and in a hidden CSRF field, a rotating
  "popular" list in a ``<nav>``, a rotating sponsor's sentence in an ``<aside>``.

Each pair goes through the revisit stage offline (route and process, as a worker runs them), both
fetches churned. Targets (issue 35): at most 5 % of edits called unchanged, at most 1 % of churn
called changed. ``pytest tests/stages/revisit/test_revisit_corpus.py -s`` prints the shares.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from streams.runtime.offline import run_offline
from streams.runtime.store import MemoryStore
from streams.stages.revisit.spec import SPEC
from streams.stages.revisit.stage import RevisitStage
from streams.topics import Topics

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "corpus"
TOPICS = Topics("test.")
_WORD = re.compile(r"(?<![\w&#/=.-])([A-Za-z]{6,})(?![\w-])")
_TAGS = re.compile(r"<[^>]*>")
_SPONSORS = ("Try our hosted search for your site, free for thirty days.",
             "Monitor your servers and get paged before your users notice.",
             "Learn the language from its makers: video courses now on sale.",
             "Hire developers who already know this stack: post a job today.")
_TITLES = ("Markets rally as rates hold", "Ten tips for a better garden",
           "The history of the harbour railway", "Council approves the library budget",
           "Winter storms close the mountain roads", "A new museum opens by the river")


def pages() -> Iterator[tuple[str, str, str]]:
    """(name, html, article text) of the corpus pages that have their article text."""
    benchmark = CORPUS / "article-extraction-benchmark"
    truth = json.loads((benchmark / "ground-truth.json").read_text())
    for path in sorted((benchmark / "html").glob("*.html.gz")):
        key = path.name.removesuffix(".html.gz")
        if key in truth:
            html = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
            yield key[:12], html, truth[key]["articleBody"]
    for folder in sorted((CORPUS / "readability" / "test" / "test-pages").iterdir()):
        source, expected = folder / "source.html", folder / "expected.html"
        if source.exists() and expected.exists():
            article = " ".join(_TAGS.sub(" ", expected.read_text(errors="replace")).split())
            yield folder.name, source.read_text(errors="replace"), article


def edit(html: str, article: str, rng: random.Random) -> str | None:
    """One word of the article replaced, or a clause inserted after it; None when no word qualifies."""
    words = set(article.split())
    counts = Counter(re.findall(r"\w+", html))
    candidates = [m for m in _WORD.finditer(html)
                  if m.group(1) in words and counts[m.group(1)] == 1
                  and html.rfind(">", 0, m.start()) > html.rfind("<", 0, m.start())]
    if not candidates:
        return None
    found = rng.choice(candidates)
    word = found.group(1)
    replacement = rng.choice([word[::-1].lower(), f"{word}, as the committee reported yesterday,"])
    return html[:found.start()] + replacement + html[found.end():]


def churn(html: str, rng: random.Random) -> str:
    """Boilerplate that changes on every fetch, outside the article (module docstring)."""
    token = f"{rng.getrandbits(128):032x}"
    def session(link: re.Match[str]) -> str:
        def tagged(href: re.Match[str]) -> str:
            return f'href="{href.group(1)}{"&" if "?" in href.group(1) else "?"}sid={token}"'

        return re.sub(r'href="([^"#]*)"', tagged, link.group(0))

    html = re.sub(r"<a\s[^>]*>", session, html)
    popular = "".join(f'<li><a href="/p/{rng.randint(1, 999)}">{t}</a></li>' for t in rng.sample(_TITLES, 3))
    top = (f'<nav class="popular"><ul>{popular}</ul></nav>'
           f'<aside class="sponsor"><p>{rng.choice(_SPONSORS)}</p></aside>'
           f'<form><input type="hidden" name="csrf" value="{token}"></form>')
    footer = (f"<footer><p>{rng.randint(1000, 2_000_000):,} views. Rendered 2026-{rng.randint(1, 12):02d}-"
              f"{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} UTC, "
              f"build {token[:7]}."
              "</p></footer>")
    html = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + top, html, count=1, flags=re.I)
    closing = html.lower().rfind("</body>")
    return html[:closing] + footer + html[closing:] if closing >= 0 else html + footer


def changed(before: str, after: str) -> bool | None:
    stage = RevisitStage()
    out = io.BytesIO()
    lines = [orjson.dumps({"url": "http://corpus.example/page", "status": 200, "content_type": "text/html",
                           "body": body, "fetched_at": f"2026-01-0{day}T00:00:00Z"})
             for day, body in ((1, before), (2, after))]
    run_offline(SPEC.topology(TOPICS, "test"), stage, MemoryStore(), lines, out=out)
    decision: bool | None = orjson.loads(out.getvalue().splitlines()[1])["changed"]
    return decision


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str, str]]:
    if not CORPUS.is_dir():
        pytest.skip(f"the shared corpus is absent ({CORPUS}): real pages' edits and churn are built from it")
    return list(pages())


def test_small_real_edits_are_seen(corpus: list[tuple[str, str, str]]) -> None:
    rng = random.Random(35)
    outcomes = []
    for _name, html, article in corpus:
        edited = edit(html, article, rng)
        if edited is not None:
            outcomes.append(changed(churn(html, rng), churn(edited, rng)))
    missed = sum(outcome is not True for outcome in outcomes) / len(outcomes)
    print(f"\nedits of the article called unchanged: {missed:.3%} of {len(outcomes)}")
    assert len(outcomes) >= 250 and missed <= 0.05


def test_boilerplate_churn_is_not_a_change(corpus: list[tuple[str, str, str]]) -> None:
    rng = random.Random(36)
    outcomes = [changed(churn(html, rng), churn(html, rng)) for _name, html, _article in corpus]
    false = sum(outcome is True for outcome in outcomes) / len(outcomes)
    print(f"\nboilerplate churn called changed: {false:.3%} of {len(outcomes)}")
    assert false <= 0.01
