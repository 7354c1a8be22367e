"""The text of a decoded page: its main content for fingerprints, all its text, its title.

HTML goes through resiliparse (lexbor's HTML5 parser, then ``extract_plain_text``). The main text
uses resiliparse's main-content heuristics (navigation, headers, footers, sidebars, hidden
elements out) with the options of :data:`MAIN_OPTIONS`, chosen for de-duplication and measured on
the 181 pages of the Zyte article-extraction benchmark, where they score better than resiliparse's
defaults (``bench/results/extract.md``; docs/extraction.md, "Measured quality and cost"): image
alt texts, figures, captions, list bullets, user comments and post metadata (bylines, "3 hours
ago") are left out, because they are noise to the article and the parts of a page that differ
between copies of one story or change between fetches of it. The full text is everything outside
scripts, styles, forms and ``<noscript>``, alt texts included (resiliparse drops hidden elements
only in main-content mode).

Every text passes :func:`normalise_text`, so markup whitespace never changes a digest. A page
whose main text is shorter than ``min_main_chars`` gets its full text as main text: the
main-content heuristics drop everything on tiny or unusual pages, and a page with text must never
be fingerprinted as empty (all such pages would collide). So does a page nested deeper than
:data:`MAX_MAIN_CONTENT_DEPTH`. Never raises: lone surrogates are repaired first, and if the parser
itself fails, tags are stripped by a regular expression instead.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException, HTMLTree

from streams.pages.decode import DecodedPage, valid_unicode

EXTRACTION_VERSION: Final = 1
"""Bumped whenever ``main_text`` or ``full_text`` could change for some page (options, normalisation,
the fallback rules, a resiliparse upgrade), since digests of the old texts no longer compare."""

MAIN_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType({
    "main_content": True,
    "preserve_formatting": False,  # block breaks depend on markup, not content; whitespace is collapsed
    "alt_texts": False,
    "list_bullets": False,
    "links": False,
    "form_fields": False,
    "noscript": False,
    "comments": False,
    "post_meta": False,
    "skip_elements": ("figcaption", "[class*=caption]"),
})
FULL_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType({
    "main_content": False,
    "preserve_formatting": False,
    "alt_texts": True,  # False would also drop <figure> with its caption; and image-only pages need it
    "list_bullets": False,
    "links": False,
    "form_fields": False,
    "noscript": False,
})

MAX_MAIN_CONTENT_DEPTH: Final = 512
"""Deeper trees get their full text as main text: resiliparse's main-content pass costs time
quadratic in nesting depth, so a hostile page would stall a worker, and WebKit and Blink stop
nesting at 512 elements anyway. Real pages stay far below (docs/extraction.md, "Main text", has the
timings and the benchmark corpus's deepest page)."""
_TOO_DEEP: Final = " > ".join(["*"] * (MAX_MAIN_CONTENT_DEPTH + 1))  # an element below 512 others

# Removed before NFKC: C0 and C1 controls other than whitespace, and invisible characters whose
# presence depends on the editor or CMS, not the content: soft hyphen, zero-width space, word
# joiner, zero-width no-break space (BOM). ZWJ and ZWNJ stay: they change how Indic, Arabic-script
# and emoji text reads.
_REMOVED: Final = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u00ad\u200b\u2060\ufeff]")
_TAG: Final = re.compile(r"<[^>]*>?")


@dataclass(frozen=True, slots=True)
class ExtractedText:
    """``main_text``: the page's main content (falls back to ``full_text`` on tiny pages);
    ``full_text``: all the page's text, or None when it was not asked for and not needed;
    ``title``: the ``<title>`` ("" for plain text). All normalised by :func:`normalise_text`."""

    main_text: str
    full_text: str | None
    title: str


def extract_text(page: DecodedPage, *, min_main_chars: int = 200, full_text: bool = True) -> ExtractedText:
    """The main text, full text and title of ``page`` (the module docstring says how and why).

    ``full_text=False`` skips the second extraction pass (a good part of a page's time,
    docs/extraction.md, "Measured quality and cost") unless the main text falls back to it; the
    stages only fingerprint the main text.
    """
    if page.media != "html":
        text = normalise_text(page.text)
        return ExtractedText(text, text, "")
    html = page.text
    try:
        tree, html = _parse(html)
        too_deep = tree.document is not None and tree.document.query_selector(_TOO_DEEP) is not None
        main = "" if too_deep else normalise_text(str(extract_plain_text(tree, **MAIN_OPTIONS)))
        full = None
        if full_text or len(main) < min_main_chars:
            full = normalise_text(str(extract_plain_text(tree, **FULL_OPTIONS)))
        title = normalise_text(str(tree.title or ""))
    except HTMLParserException:
        stripped = normalise_text(_TAG.sub(" ", valid_unicode(html)))
        return ExtractedText(stripped, stripped, "")
    return ExtractedText(full if full is not None and len(main) < min_main_chars else main, full, title)


BOILERPLATE_ELEMENTS: Final = ("nav", "aside", "form", "dialog", "[role=navigation]", "[role=complementary]",
                                "[role=search]", "[hidden]", "[aria-hidden=true]")
"""Left out of a page's declared main content by :func:`change_text`: navigation, sidebars, forms and
hidden elements (the HTML sectioning and ARIA landmark elements that hold them)."""
_PAGE_BOILERPLATE: Final = (*BOILERPLATE_ELEMENTS, "header", "footer", "[role=banner]", "[role=contentinfo]")
_MAIN_LANDMARKS: Final = ("main, [role=main]", "article")


def _options(skip: tuple[str, ...]) -> Mapping[str, Any]:
    return MappingProxyType({**FULL_OPTIONS, "alt_texts": False, "skip_elements": (*skip, "figcaption")})


_INSIDE_LANDMARK: Final = _options(BOILERPLATE_ELEMENTS)
_OUTSIDE_BOILERPLATE: Final = _options(_PAGE_BOILERPLATE)


def change_text(page: DecodedPage, *, min_main_chars: int = 200) -> str:
    """The text whose change is a change of the page, for the revisit stage.

    A page that declares its main content, one ``<main>`` (or ``role=main``) element, else one
    ``<article>``, gets that element's whole text less the :data:`BOILERPLATE_ELEMENTS` inside it:
    what the site's author marked as the page's content, every part of it. The main-content
    heuristics (:func:`extract_text`) drop link-dense blocks and short pages whole, which is right
    for finding copies (what two copies share is their prose) but hides real edits of a
    documentation page's lists of links, tables and one-line entries. The declared element is taken
    when its text is at least as long as the heuristics' main text or ``min_main_chars`` (an
    ``<article>`` holding only a share button or metadata is not the page). Otherwise the main text
    of :func:`extract_text`, and when it is shorter than ``min_main_chars`` the text outside the
    page's header, footer and boilerplate elements; only when that is empty the full text.
    :func:`extract_text` falls back to the full text directly, navigation and footer included, and
    a short page would carry its sidebar's rotating lists, counters and dates into its text and look
    changed on every fetch. The content-seen stage keeps :func:`extract_text`; this is the revisit
    stage's own (docs/revisit.md, "Change signals").
    """
    if page.media != "html":
        return normalise_text(page.text)
    html = page.text
    try:
        tree, html = _parse(html)
        if tree.document is not None and tree.document.query_selector(_TOO_DEEP) is not None:
            return normalise_text(str(extract_plain_text(tree, **FULL_OPTIONS)))
        text = normalise_text(str(extract_plain_text(tree, **MAIN_OPTIONS)))
        if len(text) < min_main_chars:
            text = (normalise_text(str(extract_plain_text(tree, **_OUTSIDE_BOILERPLATE)))
                    or normalise_text(str(extract_plain_text(tree, **FULL_OPTIONS))))
            shortest = 0
        else:
            shortest = min(len(text), min_main_chars)
        declared = _declared_main(tree)   # changes the tree: last
        return declared if declared and len(declared) >= shortest else text
    except HTMLParserException:
        return normalise_text(_TAG.sub(" ", valid_unicode(html)))


def _parse(html: str) -> tuple[HTMLTree, str]:
    """The parsed tree of ``html`` and the text it was parsed from: ``html`` itself, or with its lone
    surrogates repaired (:func:`streams.pages.decode.valid_unicode`) when the parser refuses them.

    Why not repair first: the parser encodes the text to UTF-8 anyway and raises
    ``UnicodeEncodeError`` on a surrogate, so trying it first saves a second encoding of the whole
    page (a few percent of a page's analysis); it fails only on a page that holds a lone surrogate,
    which a fetcher's JSON can carry and a decoded body cannot."""
    try:
        return HTMLTree.parse(html), html
    except UnicodeEncodeError:
        html = valid_unicode(html)
        return HTMLTree.parse(html), html


def _declared_main(tree: HTMLTree) -> str:
    """The text of the page's one main landmark (:func:`change_text`), or "" when it has none (or
    several, as a listing page has articles). The tree is left holding only that element."""
    body = tree.body
    if body is None:
        return ""
    for selector in _MAIN_LANDMARKS:
        found = body.query_selector_all(selector)
        if len(found) == 1:
            body.replace_children(found[0])
            return normalise_text(str(extract_plain_text(tree, **_INSIDE_LANDMARK)))
        if len(found) > 1:
            return ""
    return ""


def normalise_text(text: str) -> str:
    """One spelling for the same visible text: invisible format characters and control characters
    removed, NFKC, every whitespace run one space, no leading or trailing space.

    NFKC rather than NFC because copies of one text differ in compatibility forms as much as in
    composition: full-width and half-width forms (CJK pages), ligatures (PDF-to-HTML), NBSP and
    the other Unicode spaces, decomposed accents (Vietnamese in windows-1258). Case is kept; the
    features may fold it. Removal comes first, so that NFKC sees the final neighbours, which makes
    the function idempotent (tested)."""
    text = _REMOVED.sub("", valid_unicode(text))
    if not text.isascii():  # ASCII is its own NFKC
        for char, folded in _COMMON_COMPAT:
            text = text.replace(char, folded)
        text = unicodedata.normalize("NFKC", text)
    if "  " in text or any(space in text for space in _OTHER_SPACES):
        return " ".join(text.split())  # str.split(): runs of Unicode White_Space, ends dropped
    return text.strip(" ")  # the common case, without a list of every word


# Why the fast paths of normalise_text give the same text as NFKC then split and join:
# * NFKC (UAX #15) is the canonical composition of the compatibility decomposition, and a character
#   has the same compatibility decomposition as its own NFKC form, so replacing characters by their
#   NFKC forms leaves the NFKC of the whole text unchanged. ``unicodedata.normalize`` returns at once
#   when its quick check passes, and fails it on the whole text for one NBSP; these characters are
#   the compatibility forms common on real pages (the shared corpus's main texts), replaced by
#   ``str.replace``, which does not look at a text without them. Derived here, never written out.
# * ``" ".join(text.split())`` differs from ``text.strip(" ")`` only when the text holds two spaces in
#   a row or a whitespace character other than the space (``str.isspace``, what ``str.split``
#   splits on).
_COMMON_COMPAT: Final = tuple((char, unicodedata.normalize("NFKC", char)) for char in
                              "\u00a0\u3000\u2026\u2002\u2003\u2009\u200a\u202f")
_OTHER_SPACES: Final = ("\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0",
                        "\u1680", *map(chr, range(0x2000, 0x200B)), "\u2028", "\u2029", "\u202f", "\u205f",
                        "\u3000")
"""Every character but the space for which ``str.isspace()`` is true, in Python 3.11 to 3.13
(a test holds it to the running Python's)."""
