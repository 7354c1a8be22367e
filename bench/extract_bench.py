"""Main-text extraction benchmark (issue 4): how much of a page's text is the article, per page.

    python -m bench.extract_bench [--bootstrap 1000] [--seed 4]

Runs :func:`streams.pages.decode.decode_page` and :func:`streams.pages.extract.extract_text` on the
181 pages of the Zyte article-extraction benchmark (``../shared/corpus/article-extraction-benchmark``:
``html/*.html.gz`` and ``ground-truth.json``, https://github.com/scrapinghub/article-extraction-benchmark)
and scores each text against the ground-truth ``articleBody`` with that benchmark's metric
(:mod:`testing.extraction`, shared with the tests); "±" is the standard deviation of each figure over
``--bootstrap`` resamples of the pages.

Rows: the stage's ``main_text``; resiliparse's main-content extraction with its default options
(what the option choice in ``streams/pages/extract.py`` gains); ``full_text``, all the page's text
(what removing the noise gains). ms/page is decoding plus extraction, the best of three passes.

Second, F1 of resiliparse's main-content extraction as the options of ``MAIN_OPTIONS`` are turned
off one at a time from resiliparse's defaults, then together (raw text, before ``normalise_text``).

Third, the charset detectors on the legacy-encoded pages of ``testing/charsets.py`` (prose
in 17 languages, 36 language/legacy-charset pairs, no declaration): uchardet as ``decode_page`` uses it,
and charset-normalizer (if installed), each right when its charset decodes the bytes to the text.

Writes ``bench/results/extract.md`` and ``extract.json`` and exits non-zero if the figures are not
sane: every page decodes as HTML with a non-empty main text, main-text F1 above 0.8 and above both
other rows, and uchardet right at least as often as charset-normalizer and on 90 % of the pages.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import date
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from streams.pages.decode import DecodedPage, Skipped, decode_page, detect_charset
from streams.pages.extract import FULL_OPTIONS, MAIN_OPTIONS, extract_text, normalise_text
from testing.extraction import evaluate

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "article-extraction-benchmark"
RESULTS = REPO_ROOT / "bench" / "results"
MIN_MAIN_F1 = 0.8
PASSES = 3


class Page(NamedTuple):
    key: str
    body: bytes
    truth: str


def load_corpus(root: Path = CORPUS) -> list[Page]:
    """The benchmark's pages with their ground truth, in the order of ``ground-truth.json``."""
    truth = json.loads((root / "ground-truth.json").read_text(encoding="utf-8"))
    return [Page(key, gzip.decompress((root / "html" / f"{key}.html.gz").read_bytes()),
                 item.get("articleBody") or "")
            for key, item in truth.items()]


# --- the extractors ------------------------------------------------------------------------


def _decoded(page: Page) -> DecodedPage:
    decoded = decode_page(page.body, "text/html", {})
    if isinstance(decoded, Skipped):
        raise AssertionError(f"{page.key}: skipped as {decoded.reason}")
    return decoded


def main_text(page: Page) -> str:
    return extract_text(_decoded(page)).main_text


def resiliparse_defaults(page: Page) -> str:
    return str(extract_plain_text(HTMLTree.parse(_decoded(page).text), main_content=True))


def full_text(page: Page) -> str:
    return normalise_text(str(extract_plain_text(HTMLTree.parse(_decoded(page).text), **FULL_OPTIONS)))


ROWS: tuple[tuple[str, Callable[[Page], str]], ...] = (
    ("main_text", main_text),
    ("resiliparse main_content, default options", resiliparse_defaults),
    ("full_text (main_content=False)", full_text),
)


def run(pages: Sequence[Page], bootstrap: int, seed: int) -> dict[str, Any]:
    truths = [page.truth for page in pages]
    rows = []
    for name, extractor in ROWS:
        timings = []
        for _ in range(PASSES):  # the best pass: the machine is shared, noise only ever adds time
            started = time.perf_counter()
            texts = [extractor(page) for page in pages]
            timings.append((time.perf_counter() - started) * 1000 / len(pages))
        ms_per_page = min(timings)
        rows.append({"name": name, "version": f"resiliparse {version('resiliparse')}",
                     **evaluate(truths, texts, bootstrap, seed), "ms_per_page": ms_per_page,
                     "empty_texts": sum(not text for text in texts)})
    sources = Counter(_decoded(page).charset_source for page in pages)
    return {"date": date.today().isoformat(), "command": "python -m bench.extract_bench",
            "pages": len(pages), "bootstrap": bootstrap, "seed": seed, "rows": rows,
            "charset_sources": dict(sorted(sources.items()))}


# --- option ablation ------------------------------------------------------------------------

_DEFAULTS: dict[str, Any] = {"main_content": True}
_FOUR_OFF: dict[str, Any] = {**_DEFAULTS, "alt_texts": False, "comments": False, "post_meta": False,
                             "list_bullets": False}
ABLATION: tuple[tuple[str, dict[str, Any]], ...] = (
    ("resiliparse defaults (main_content=True)", _DEFAULTS),
    ("alt_texts=False", {**_DEFAULTS, "alt_texts": False}),
    ("comments=False", {**_DEFAULTS, "comments": False}),
    ("post_meta=False", {**_DEFAULTS, "post_meta": False}),
    ("list_bullets=False", {**_DEFAULTS, "list_bullets": False}),
    ("the four above", _FOUR_OFF),
    ("the four + skip_elements figcaption, [class*=caption] (MAIN_OPTIONS)", dict(MAIN_OPTIONS)),
)


def ablation(pages: Sequence[Page]) -> list[dict[str, Any]]:
    trees = [HTMLTree.parse(_decoded(page).text) for page in pages]
    truths = [page.truth for page in pages]
    return [{"options": name, "f1": evaluate(truths, [str(extract_plain_text(tree, **options))
                                                     for tree in trees], 0, 0)["f1"]}
            for name, options in ABLATION]


# --- charset detectors ------------------------------------------------------------------------


def _charset_normalizer(body: bytes) -> str | None:
    import charset_normalizer

    best = charset_normalizer.from_bytes(body).best()
    return best.encoding if best else None


DETECTORS: tuple[tuple[str, Callable[[bytes], str | None]], ...] = (
    ("uchardet (resiliparse), as decode_page maps it", detect_charset),
    ("charset-normalizer", _charset_normalizer),
)


def _decodes_to(body: bytes, codec: str | None, text: str) -> bool:
    try:
        return codec is not None and body.decode(codec) == text
    except (UnicodeDecodeError, LookupError):
        return False


def compare_detectors() -> list[dict[str, Any]]:
    """Right answers and time per call of each installed detector on the legacy-encoded samples."""
    from testing.charsets import CASES, SAMPLES, encodable, html_page

    pages = [(f"{case.lang}/{case.encoding}", html_page(encodable(SAMPLES[case.lang], case.encoding)),
              case.encoding) for case in CASES if case.encoding != "utf-8"]
    rows = []
    for name, detector in DETECTORS:
        try:
            detector(b"probe")
        except ImportError:
            continue
        started, wrong = time.perf_counter(), []
        for label, text, encoding in pages:
            body = text.encode(encoding)
            if not _decodes_to(body, detector(body), text):
                wrong.append(f"{label} as {detector(body)}")
        ms_per_call = (time.perf_counter() - started) * 1000 / len(pages)
        package = "resiliparse" if name.startswith("uchardet") else "charset-normalizer"
        rows.append({"name": name, "version": f"{package} {version(package)}", "pages": len(pages),
                     "right": len(pages) - len(wrong), "wrong": wrong, "ms_per_call": ms_per_call})
    return rows


def check(result: dict[str, Any]) -> list[str]:
    """What is not sane about ``result`` (house style: benchmarks assert their results)."""
    main, defaults, full = result["rows"]
    problems = []
    if main["empty_texts"]:
        problems.append(f"{main['empty_texts']} pages with an empty main text")
    if main["f1"] <= MIN_MAIN_F1:
        problems.append(f"main-text F1 {main['f1']:.3f} <= {MIN_MAIN_F1}")
    for other in (defaults, full):
        if main["f1"] <= other["f1"]:
            problems.append(f"main-text F1 {main['f1']:.3f} <= {other['name']} F1 {other['f1']:.3f}")
    uchardet, *others = result["detectors"]
    if uchardet["right"] < 0.9 * uchardet["pages"]:
        problems.append(f"uchardet right on only {uchardet['right']} of {uchardet['pages']} pages")
    for other in others:
        if uchardet["right"] < other["right"]:
            problems.append(f"uchardet right on {uchardet['right']} pages, "
                            f"{other['name']} on {other['right']}")
    return problems


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Main-text extraction, {result['pages']} pages of the Zyte article-extraction benchmark, "
             f"one run ({result['date']}): `{result['command']}`; ± is the standard deviation over "
             f"{result['bootstrap']} bootstrap resamples of the pages, as the benchmark's evaluate.py "
             "reports it.", "",
             "| extractor | version | F1 | precision | recall | accuracy | ms/page |",
             "|---|---|---|---|---|---|---:|"]
    for row in result["rows"]:
        cells = [f"{row[m]:.3f} ± {row[m + '_std']:.3f}" for m in ("f1", "precision", "recall", "accuracy")]
        lines.append(f"| {row['name']} | {row['version']} | {' | '.join(cells)} | {row['ms_per_page']:.1f} |")
    sources = ", ".join(f"{name} {count}" for name, count in result["charset_sources"].items())
    lines += ["", f"Charset source of the pages (served as `text/html` without a charset): {sources}.", "",
              "Main-content options, F1 of the raw extracted text (before normalise_text):", "",
              "| options | F1 |", "|---|---:|"]
    lines += [f"| {row['options']} | {row['f1']:.3f} |" for row in result["ablation"]]
    lines += ["",
              "Charset detection on the undeclared legacy-encoded test pages "
              "(`tests/pages/test_pages_decode.py`):", "",
              "| detector | version | right | ms/call | wrong (page as detected charset) |",
              "|---|---|---:|---:|---|"]
    for row in result["detectors"]:
        lines.append(f"| {row['name']} | {row['version']} | {row['right']} of {row['pages']} | "
                     f"{row['ms_per_call']:.2f} | {', '.join(row['wrong']) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for the ± figures")
    parser.add_argument("--seed", type=int, default=4, help="seed of the bootstrap resampling")
    args = parser.parse_args(argv)
    if not (CORPUS / "ground-truth.json").is_file():
        print(f"extract_bench: the corpus is not at {CORPUS}; put the article-extraction-benchmark "
              "checkout (html/*.html.gz, ground-truth.json) there", file=sys.stderr)
        return 2
    pages = load_corpus()
    result = run(pages, args.bootstrap, args.seed)
    result["ablation"] = ablation(pages)
    result["detectors"] = compare_detectors()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "extract.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = markdown(result)
    (RESULTS / "extract.md").write_text(table, encoding="utf-8")
    print(table, end="")
    problems = check(result)
    for problem in problems:
        print(f"extract_bench: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
