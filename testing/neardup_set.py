"""A labelled near-duplicate set built from the shared corpus, and the metric it is scored with.

    python -m bench.neardup_set [--out pages.jsonl]   # writes the set as JSON lines, prints counts

The corpus (``../shared/corpus``, see its MANIFEST.md) holds real pages but no labelled duplicates,
so they are made here, deterministically (``SEED``), by the transformations listed in
docs/near-duplicates.md, each a small pure function of testing/neardup_transforms.py:

* originals: every corpus page whose main text has at least ``MIN_ORIGINAL_CHARS`` characters and
  shares under ``MAX_OVERLAP`` of its character 8-grams with an earlier kept page (the corpus
  has natural copies: many of Readability's small test pages are one lorem-ipsum article);
* near-duplicates of each original (same cluster): ``mirror_host`` (another host, links and host
  names rewritten), ``swap_boilerplate`` (header, nav, footer, aside replaced by another site's),
  two small edits (``change_words``, ``change_numbers``, ``add_sentence``, ``remove_sentence``:
  at most 3% of the words), and re-encodings (``reencode``: GBK, GB18030, Big5,
  Shift_JIS, EUC-JP, EUC-KR or windows-1252, declared in the header, in a meta tag, or not at all;
  two for CJK pages);
* negatives: the originals themselves (unrelated pages, and postlight's several pages of one site
  template), plus ``template_swap`` pages: an original's template around the article of a page
  held out of the set (``HELD_OUT_SHARE``), each its own cluster, kept only when the swap really
  changed the main text.

Records are in the fetched-page format (``url``, ``status``, ``method``, ``headers``,
``content_type``, ``body_base64``, ``fetched_at``), shuffled with the seed; ``fetched_at`` follows
that order. :func:`score` defines the metric.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import random
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import mmh3
import orjson

from streams.pages.decode import DecodedPage, decode_page
from streams.pages.extract import extract_text
from testing.neardup_transforms import (
    SENTENCE_END,
    UNIT,
    add_sentence,
    change_numbers,
    change_words,
    mirror_host,
    reencode,
    remove_sentence,
    swap_boilerplate,
    template_swap,
)

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
SEED = 2007
MIN_ORIGINAL_CHARS = 300
MAX_OVERLAP = 0.3
HELD_OUT_SHARE = 0.15
# Big5 is Python's big5hkscs: the WHATWG Encoding Standard's Big5 is HKSCS, and Python's plain big5
# encoder puts Cyrillic and kana where every browser decodes other characters.
ENCODINGS = {"ja": ("shift_jis", "euc_jp"), "zh": ("gbk", "gb18030", "big5hkscs"), "ko": ("euc_kr",),
             "other": ("windows-1252", "gbk", "shift_jis", "big5hkscs", "euc_kr")}
DECLARATIONS = ("header", "meta", "none")

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_URL_TAG = re.compile(r"<(?:link[^>]+rel=[\"']?canonical|meta[^>]+property=[\"']og:url)[^>]*>", re.I)
_HREF = re.compile(r"(?:href|content)=[\"']?(https?://[^\"' >]+)", re.I)


@dataclass(frozen=True)
class Source:
    """One corpus page: its decoded HTML, a URL, its language class and main text."""

    name: str
    html: str
    url: str
    lang: str  # "ja", "zh", "ko" or "other"
    main: str

    @property
    def cjk(self) -> bool:
        return self.lang != "other"


@dataclass(frozen=True)
class LabelledPage:
    """A fetched-page record with its label: ``cluster`` (pages of one cluster are near-duplicates)."""

    record: dict[str, Any]
    cluster: str
    transform: str
    cjk: bool
    source: str


# --- sources ---------------------------------------------------------------------------------------


def corpus_files(corpus: Path = CORPUS) -> list[Path]:
    """The HTML pages of the corpus, in a fixed order."""
    return (sorted((corpus / "article-extraction-benchmark" / "html").glob("*.html.gz"))
            + sorted((corpus / "readability" / "test" / "test-pages").glob("*/source.html"))
            + sorted((corpus / "postlight" / "fixtures").rglob("*.html")))


def load_sources(corpus: Path = CORPUS) -> list[Source]:
    """Originals: long enough and not natural copies of an earlier page (module docstring)."""
    kept: list[Source] = []
    holders: dict[int, list[int]] = {}  # 8-gram hash -> kept pages that have it
    sizes: list[int] = []
    for path in corpus_files(corpus):
        raw = path.read_bytes()
        page = decode_page(gzip.decompress(raw) if path.suffix == ".gz" else raw, "text/html", {})
        if not isinstance(page, DecodedPage):
            continue
        main = extract_text(page).main_text
        mine = grams(main)
        shared = Counter(j for gram in mine for j in holders.get(gram, ()))
        if len(main) < MIN_ORIGINAL_CHARS or any(count > MAX_OVERLAP * max(1, min(len(mine), sizes[j]))
                                                 for j, count in shared.items()):
            continue
        for gram in mine:
            holders.setdefault(gram, []).append(len(kept))
        name = str(path.relative_to(corpus))
        kept.append(Source(name, page.text, _url_of(page.text, name, len(kept)), _lang(main), main))
        sizes.append(len(mine))
    return kept


def grams(text: str) -> set[int]:
    """A sample of the text's character 8-grams: those whose hash is 0 mod 8 (Broder 1997)."""
    hashes = (mmh3.hash(text[i:i + 8], signed=False) for i in range(max(1, len(text) - 7)))
    return {value for value in hashes if value % 8 == 0}


def overlap(a: set[int], b: set[int]) -> float:
    """Containment of the smaller gram sample in the larger."""
    return len(a & b) / max(1, min(len(a), len(b)))


def _url_of(html: str, name: str, index: int) -> str:
    tag = _URL_TAG.search(html[:200_000])
    found = _HREF.search(tag.group(0)) if tag else None
    base = found.group(1) if found else f"https://page{index}.corpus.example/{Path(name).parent.name}"
    return f"{base}{'&' if '?' in base else '?'}src={index}"  # unique: two corpus pages may share one


def _lang(text: str) -> str:
    cjk = len(_CJK.findall(text))
    if len(_HANGUL.findall(text)) > 0.2 * len(text):
        return "ko"
    if cjk < 0.2 * len(text):
        return "other"
    return "ja" if _KANA.search(text) else "zh"


# --- the set ---------------------------------------------------------------------------------------


def build_set(corpus: Path = CORPUS, seed: int = SEED, clusters: int | None = None) -> list[LabelledPage]:
    """The labelled pages in evaluation order (shuffled with ``seed``).

    ``clusters`` keeps a seeded sample of that many originals (and as many template pages as the
    full set would have per original), for tests that cannot afford the whole set.
    """
    sources = load_sources(corpus)
    rng = random.Random(seed)
    shuffled = rng.sample(sources, len(sources))
    held = round(HELD_OUT_SHARE * len(sources))
    donors, kept = shuffled[:held], shuffled[held:]
    if clusters is not None and clusters < len(kept):
        donors, kept = donors[:max(1, held * clusters // len(kept))], kept[:clusters]
    vocabulary = {cjk: [unit for s in kept if s.cjk == cjk for unit in UNIT.findall(s.main)]
                  for cjk in (False, True)}
    sentences = {cjk: [(p.strip(), n) for s in donors if s.cjk == cjk for p in SENTENCE_END.split(s.main)
                       if 3 <= (n := len(UNIT.findall(p))) <= 40] for cjk in (False, True)}
    for cjk in (False, True):
        sentences[cjk] = sentences[cjk] or sentences[not cjk]
    pages: list[LabelledPage] = []
    for index, source in enumerate(kept):
        local = random.Random(f"{seed}:{source.name}")
        pages.extend(_cluster(source, index, local, kept, vocabulary[source.cjk], sentences[source.cjk]))
    for index, donor in enumerate(donors):
        html = _template_page(donor, random.Random(f"{seed}:{donor.name}"), kept)
        if html is not None:
            pages.append(_page(f"{donor.url}&v=template", html, f"template-{index}", "template_swap", donor))
    rng.shuffle(pages)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for position, page in enumerate(pages):
        page.record["fetched_at"] = (start + timedelta(seconds=position)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return pages


def _template_page(donor: Source, rng: random.Random, kept: list[Source], tries: int = 5) -> str | None:
    """``donor``'s article in the template of a kept page, when the swap really replaced the article
    (its main text is not a copy of the template page's, by the originals' rule); else None."""
    for template in rng.sample(kept, tries):
        html = template_swap(template.html, donor.html)
        page = decode_page(html, "text/html", {})
        if isinstance(page, DecodedPage) and overlap(grams(extract_text(page).main_text),
                                                     grams(template.main)) <= MAX_OVERLAP:
            return html
    return None


def _cluster(source: Source, index: int, rng: random.Random, kept: list[Source], vocabulary: list[str],
             sentences: list[tuple[str, int]]) -> list[LabelledPage]:
    """An original and its near-duplicates, all labelled with the original's cluster."""
    cluster, url, html = f"c{index}", source.url, source.html
    host = url.split("/")[2].split(":")[0]
    donor = rng.choice([other for other in kept if other is not source])
    variants = [(url, html, "original"),
                (mirror_host(url, host, f"mirror{index}.example.net"),
                 mirror_host(html, host, f"mirror{index}.example.net"), "mirror_host"),
                (f"{url}&v=swap", swap_boilerplate(html, donor.html), "swap_boilerplate")]
    edits: dict[str, Callable[[], str]] = {
        "change_words": lambda: change_words(html, rng, vocabulary),
        "change_numbers": lambda: change_numbers(html, rng),
        "add_sentence": lambda: add_sentence(html, rng, sentences),
        "remove_sentence": lambda: remove_sentence(html, rng),
    }
    for name in rng.sample(sorted(edits), 2):
        variants.append((f"{url}&v={name}", edits[name](), name))
    pages = [_page(u, h, cluster, t, source) for u, h, t in variants]
    for number in range(2 if source.cjk else 1):
        encoding, declared = rng.choice(ENCODINGS[source.lang]), rng.choice(DECLARATIONS)
        body, content_type = reencode(html, encoding, declared)
        pages.append(_page(f"{url}&v=enc{number}", body, cluster, f"reencode:{declared}", source,
                           content_type))
    return pages


def _page(url: str, body: str | bytes, cluster: str, transform: str, source: Source,
          content_type: str = "text/html; charset=utf-8") -> LabelledPage:
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    record = {"url": url, "status": 200, "method": "GET", "headers": {"content-type": content_type},
              "content_type": content_type, "body_base64": base64.b64encode(raw).decode("ascii")}
    return LabelledPage(record, cluster, transform, source.cjk, source.name)


# --- the metric ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scores:
    """Counts of the duplicate class and the derived precision, recall and F1."""

    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float:
        predicted = self.true_positives + self.false_positives
        return self.true_positives / predicted if predicted else 1.0

    @property
    def recall(self) -> float:
        actual = self.true_positives + self.false_negatives
        return self.true_positives / actual if actual else 1.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"tp": self.true_positives, "fp": self.false_positives, "fn": self.false_negatives,
                "precision": round(self.precision, 4), "recall": round(self.recall, 4),
                "f1": round(self.f1, 4)}


@dataclass
class Run:
    """One system's verdicts on the set: ``matches[i]`` is the earlier page it named, or None."""

    name: str
    matches: list[int | None]
    fingerprint_s: float = 0.0
    index_s: float = 0.0
    notes: str = ""


def score(pages: list[LabelledPage], matches: list[int | None],
          where: Callable[[LabelledPage], bool] = lambda _: True) -> Scores:
    """Precision, recall and F1 of the duplicate class, pages taken in order.

    ``matches[i]`` is the index of the earlier page a system named as page ``i``'s original, or
    None for "new". Page ``i`` is truly a duplicate iff an earlier page has its cluster. A match in
    the same cluster is a true positive; a match in another cluster is a false positive (and, for a
    true duplicate, also a false negative: its original was not found); a true duplicate with no
    match is a false negative. ``where`` restricts the counts to some pages (by transform, script).
    """
    seen: set[str] = set()
    tp = fp = fn = 0
    for index, (page, match) in enumerate(zip(pages, matches, strict=True)):
        duplicate = page.cluster in seen
        seen.add(page.cluster)
        if not where(page):
            continue
        if match is not None and not 0 <= match < index:
            raise ValueError(f"page {index} matched page {match}, which is not earlier")
        correct = match is not None and pages[match].cluster == page.cluster
        tp += correct
        fp += match is not None and not correct
        fn += duplicate and not correct
    return Scores(tp, fp, fn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the pages as JSON lines")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    pages = build_set()
    counts: dict[str, int] = {}
    for page in pages:
        counts[page.transform] = counts.get(page.transform, 0) + 1
    print(f"{len(pages)} pages, {len({p.cluster for p in pages})} clusters: {counts}")
    if args.out:
        with args.out.open("wb") as out:
            for page in pages:
                out.write(orjson.dumps({"cluster": page.cluster, "transform": page.transform, "cjk": page.cjk,
                                        "source": page.source, "record": page.record}) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
