"""A simulated web with planted duplicates, for the demo, the integration tests and the benchmarks.

Deterministic (seeded) and self-contained, so it runs on a fresh clone without the shared corpus.
Each *article* is a body of generated sentences (English, Chinese or Japanese); a *site* is a
template (header, navigation with many links, sidebar, footer) around it. What is planted:

- mirrors: the same article on another host inside another site's template (a near or exact
  duplicate once the template is removed);
- near copies: the article with a few words changed and a sentence added (a small edit);
- template siblings: different articles on the same site (negatives: the template is shared, the
  text is not);
- CJK pages in legacy encodings (GB18030, Shift_JIS, Big5, EUC-KR declared in the header or in
  ``<meta>``);
- pages that change between fetches (:func:`edited`).

The planted truth (:class:`PlantedPage`) says which earlier page each page copies, if any.
"""

from __future__ import annotations

import base64
import itertools
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from streams import records

_EN_WORDS = (
    "the of and to in is was for on that with as by at from his her they this which be or an are "
    "not have has had it its were one all their there been would when who more will up out about "
    "city river market council school water power company season report study family health team "
    "government plan winter summer data system music film history science road station court "
    "police bridge museum garden island forest village harbour railway election budget minister "
    "player coach match goal league cup record price bank trade energy climate research student "
    "teacher hospital doctor patient program network software user server library street house "
    "build opened closed announced said reported found showed began moved grew fell rose signed "
    "new old first last early late major local national public private central northern southern"
)
_SYLLABLES = tuple(c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ou", "ea"))


def _vocabulary(size: int = 4000, seed: int = 7) -> tuple[str, ...]:
    """Common English words first, then pronounceable made-up words: a vocabulary with a long tail."""
    rng = random.Random(seed)
    made_up = {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(size)}
    return tuple(_EN_WORDS.split()) + tuple(sorted(made_up))


_EN = _vocabulary()
# Word frequencies follow Zipf's law (weight 1/rank), as in real text, so copies and different
# articles share words about as much as real pages do.
_EN_WEIGHTS = tuple(itertools.accumulate(1.0 / rank for rank in range(1, len(_EN) + 1)))
_ZH = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说"
    "产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使"
    "点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明"
    "看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料"
    "象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指"
    "几九区强放决西被干做必战先回则任取据处"
)
_JA = ("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
       "日本語東京大学新聞社会経済政治文化時間今年会議発表市場企業技術研究開発情報問題関係地域生活")
_ENCODINGS = {"zh": ("gb18030", "big5"), "ja": ("shift_jis", "euc_jp"), "en": ("utf-8", "windows-1252")}


@dataclass(frozen=True)
class Site:
    host: str
    name: str
    nav: tuple[str, ...]
    lang: str = "en"


@dataclass(frozen=True)
class Article:
    key: str
    lang: str
    title: str
    paragraphs: tuple[str, ...]


@dataclass
class PlantedPage:
    """One fetched page and what the generator knows about it."""

    url: str
    record: dict[str, Any]
    article: str
    copy_of: str | None = None        # URL of the earlier page this one copies (mirror or near copy)
    kind: str = "original"            # original | mirror | near | sibling
    extra: dict[str, Any] = field(default_factory=dict)


def _sentence(rng: random.Random, lang: str) -> str:
    if lang == "en":
        words = rng.choices(_EN, cum_weights=_EN_WEIGHTS, k=rng.randint(8, 18))
        return " ".join(words).capitalize() + "."
    alphabet = _ZH if lang == "zh" else _JA + _ZH[:200]  # kana and kanji
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(15, 40))) + "。"


def article(rng: random.Random, key: str, lang: str = "en", paragraphs: int = 8) -> Article:
    """A generated article: a title and a few paragraphs of sentences."""
    body = tuple(" ".join(_sentence(rng, lang) for _ in range(rng.randint(3, 6))) for _ in range(paragraphs))
    return Article(key, lang, _sentence(rng, lang).rstrip(".。"), body)


def site(rng: random.Random, host: str, lang: str = "en") -> Site:
    nav = tuple(_sentence(rng, lang)[:24].rstrip(".。") for _ in range(rng.randint(12, 24)))
    return Site(host, host.split(".")[0].title(), nav, lang)


def edited(rng: random.Random, original: Article, changed_words: int = 1) -> Article:
    """A near copy: a word (or a CJK character) replaced, the smallest edit."""
    paragraphs = list(original.paragraphs)
    for _ in range(changed_words):
        index = rng.randrange(len(paragraphs))
        if original.lang == "en":
            words = paragraphs[index].split()
            words[rng.randrange(len(words))] = rng.choices(_EN, cum_weights=_EN_WEIGHTS)[0]
            paragraphs[index] = " ".join(words)
        else:
            text = paragraphs[index]
            position = rng.randrange(len(text))
            paragraphs[index] = text[:position] + rng.choice(_ZH if original.lang == "zh" else _JA) + \
                text[position + 1:]
    return Article(original.key, original.lang, original.title, tuple(paragraphs))


def render(page_site: Site, item: Article, path: str, charset: str = "utf-8",
           meta_charset: bool = True) -> str:
    """The article inside the site's template: header, navigation, sidebar, footer."""
    links = "".join(f'<li><a href="https://{page_site.host}/{i}">{label}</a></li>'
                    for i, label in enumerate(page_site.nav))
    paragraphs = "".join(f"<p>{text}</p>" for text in item.paragraphs)
    meta = f'<meta charset="{charset}">' if meta_charset else ""
    return (f"<!DOCTYPE html><html lang=\"{item.lang}\"><head>{meta}<title>{item.title} | {page_site.name}"
            f"</title></head><body><header><nav><a href=\"/\">{page_site.name}</a><ul>{links}</ul></nav>"
            "</header>"
            f"<main><article><h2>{item.title}</h2>{paragraphs}</article></main>"
            f"<aside><h3>{page_site.nav[0]}</h3><ul>{links[:400]}</ul></aside>"
            f"<footer><p>{page_site.name} {path} &copy; 2026. {' '.join(page_site.nav[:6])}</p></footer>"
            "</body></html>")


def fetched(url: str, html: str, fetched_at: datetime, charset: str = "utf-8",
            header_charset: bool = True, status: int = 200) -> dict[str, Any]:
    """A fetched-page record (``crawl.fetched-pages``) with the body as raw bytes in base64."""
    body = html.encode(charset, errors="xmlcharrefreplace")
    content_type = f"text/html; charset={charset}" if header_charset else "text/html"
    return {"url": url, "status": status, "content_type": content_type,
            "headers": {"content-type": content_type, "content-length": str(len(body))},
            "body_base64": base64.b64encode(body).decode("ascii"),
            "fetched_at": records.rfc3339(fetched_at)}


def crawl(seed: int = 1, articles: int = 60, start: datetime | None = None) -> list[PlantedPage]:
    """A crawl in fetch order: originals, then mirrors, near copies and template siblings later."""
    rng = random.Random(seed)
    clock = start or datetime(2026, 11, 1, tzinfo=UTC)
    sites = {lang: [site(rng, f"{lang}site{i}.example", lang) for i in range(4)]
             for lang in ("en", "zh", "ja")}
    pages: list[PlantedPage] = []
    for number in range(articles):
        lang = ("en", "en", "zh", "ja")[number % 4]
        home, mirror_site = rng.sample(sites[lang], 2)
        item = article(rng, f"a{number}", lang)
        charset = rng.choice(_ENCODINGS[lang])
        url = f"https://{home.host}/news/{number}.html"
        clock += timedelta(seconds=1)
        html = render(home, item, url, charset)
        pages.append(PlantedPage(url, fetched(url, html, clock, charset), item.key, extra={"lang": lang}))
        later = clock + timedelta(hours=1)
        mirror_url = f"https://{mirror_site.host}/mirror/{number}.html"
        mirror_charset = rng.choice(_ENCODINGS[lang])
        pages.append(PlantedPage(mirror_url, fetched(mirror_url, render(mirror_site, item, mirror_url,
                                                                        mirror_charset, meta_charset=False),
                                                     later, mirror_charset), item.key, url, "mirror"))
        if number % 2 == 0:
            near_url = f"https://{home.host}/amp/{number}.html"
            near = render(home, edited(rng, item), near_url)
            pages.append(PlantedPage(near_url, fetched(near_url, near, later + timedelta(minutes=5)),
                                     item.key, url, "near"))
    return sorted(pages, key=lambda page: page.record["fetched_at"])


def refetches(rng: random.Random, pages: list[PlantedPage],
              after: timedelta = timedelta(days=1)) -> list[PlantedPage]:
    """Every original fetched again ``after`` later: half unchanged, half rewritten (half its paragraphs).

    ``extra["changed"]`` is the truth for the revisit stage; an unchanged refetch is a copy of its
    own earlier fetch for the page stage.
    """
    out = []
    for page in pages:
        if page.kind != "original":
            continue
        body = base64.b64decode(page.record["body_base64"])
        changed = rng.random() < 0.5
        if changed:
            body = _rewrite_half(rng, body, page.extra.get("lang", "en"),
                                 page.record["content_type"].partition("charset=")[2] or "utf-8")
        when = records.parse_rfc3339(page.record["fetched_at"]) + after
        record = {**page.record, "body_base64": base64.b64encode(body).decode("ascii"),
                  "fetched_at": records.rfc3339(when)}
        out.append(PlantedPage(page.url, record, page.article, None if changed else page.url, "refetch",
                               {"changed": changed}))
    return out


def _rewrite_half(rng: random.Random, body: bytes, lang: str, charset: str) -> bytes:
    """The page with the first half of its article's paragraphs replaced by new ones."""
    html = body.decode(charset, "replace")
    head, _, rest = html.partition("<article>")
    article_html, _, tail = rest.partition("</article>")
    parts = article_html.split("<p>")
    for index in range(1, 1 + (len(parts) - 1) // 2):
        parts[index] = " ".join(_sentence(rng, lang) for _ in range(4)) + "</p>"
    return (head + "<article>" + "<p>".join(parts) + "</article>" + tail).encode(charset, "xmlcharrefreplace")
