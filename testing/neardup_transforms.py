"""The transformations that make near-duplicates (and template negatives) of a page (testing/neardup_set.py).

Each is a small pure function of its inputs (an explicit ``random.Random`` where it chooses): HTML
text in, HTML text out (``reencode``: bytes and a Content-Type out). They are listed, with what
they do to the main text, in docs/near-duplicates.md. The edits touch only the article (the
element :func:`article` finds), so they change what a main-text extractor keeps.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from resiliparse.parse.html import DOMNode, HTMLTree, NodeType

MAX_EDIT_SHARE = 0.03  # an edit changes at most this share of the article's words
CHROME = ("header, nav, footer, aside, #header, #footer, #nav, #navigation, #sidebar, .header, .footer, "
          ".nav, .navbar, .navigation, .site-header, .site-footer, .sidebar, .menu")
UNIT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]{1,2}|[^\W\d_]+")  # a CJK pair or a word
SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")
_NUMBER = re.compile(r"\d+")
_META_CHARSET = re.compile(rb"<meta[^>]+(?:charset|http-equiv=[\"']?content-type)[^>]*>", re.I)
_HEAD = re.compile(rb"<head[^>]*>", re.I)



def mirror_host(html: str, host: str, mirror: str) -> str:
    """The page as served by another host: every spelling of its host name rewritten."""
    return re.sub(re.escape(host), mirror, html, flags=re.I)


def swap_boilerplate(html: str, donor_html: str) -> str:
    """The page's header, nav, footer and aside (outside its article) replaced by the donor's."""
    tree, donor = HTMLTree.parse(html), HTMLTree.parse(donor_html)
    for node in _chrome(tree):
        node.decompose()
    chrome = _chrome(donor)
    if tree.body is None:
        return html
    heads = [node for node in chrome if node.tag in ("header", "nav") or "head" in _names(node)
             or "nav" in _names(node) or "menu" in _names(node)]
    top, bottom = tree.create_element("div"), tree.create_element("div")
    top.inner_html = "".join(node.html for node in heads)
    bottom.inner_html = "".join(node.html for node in chrome if node not in heads)
    if tree.body.first_child is None:
        tree.body.append_child(top)
    else:
        tree.body.insert_before(top, tree.body.first_child)
    tree.body.append_child(bottom)
    return str(tree)


def change_words(html: str, rng: random.Random, vocabulary: list[str]) -> str:
    """A few words of the article (1 to 5, at most ``MAX_EDIT_SHARE``) replaced by other words."""
    def edit(nodes: list[DOMNode], budget: int) -> None:
        _replace_units(nodes, rng, min(budget, rng.randint(1, 5)), UNIT, lambda _: rng.choice(vocabulary))
    return _edit_text(html, rng, edit)


def change_numbers(html: str, rng: random.Random) -> str:
    """One to three numbers of the article (dates, counters) changed; words if it has none."""
    def edit(nodes: list[DOMNode], budget: int) -> None:
        count = min(budget, rng.randint(1, 3))
        if not _replace_units(nodes, rng, count, _NUMBER, lambda old: str(int(old) + rng.randint(1, 9))):
            _replace_units(nodes, rng, count, UNIT, lambda old: old[::-1])
    return _edit_text(html, rng, edit)


def add_sentence(html: str, rng: random.Random, sentences: list[tuple[str, int]]) -> str:
    """One sentence from another article (``(sentence, words)`` pairs) added to a paragraph; one of at
    most ``MAX_EDIT_SHARE`` of the words, or the start of one."""
    def edit(nodes: list[DOMNode], budget: int) -> None:
        fitting = [text for text, words in sentences if words <= budget] or [rng.choice(sentences)[0][:12]]
        node = rng.choice(nodes)
        node.text = f"{node.text} {rng.choice(fitting)}"
    return _edit_text(html, rng, edit)


def remove_sentence(html: str, rng: random.Random) -> str:
    """One sentence of at most ``MAX_EDIT_SHARE`` of the words removed; a few words if none is short."""
    def edit(nodes: list[DOMNode], budget: int) -> None:
        options = [(node, part) for node in nodes for part in SENTENCE_END.split(node.text or "")
                   if 3 <= len(UNIT.findall(part)) <= budget]
        if not options:
            _replace_units(nodes, rng, min(budget, 3), UNIT, lambda _: "")
            return
        node, part = rng.choice(options)
        node.text = (node.text or "").replace(part, "", 1)
    return _edit_text(html, rng, edit)


def reencode(html: str, encoding: str, declaration: str) -> tuple[bytes, str]:
    """The page in another charset, declared in the header, in a ``<meta charset>``, or not at all.

    Characters the charset lacks become numeric character references, which parse back to the
    same text. Returns the body and its Content-Type.
    """
    body = _META_CHARSET.sub(b"", html.encode(encoding, "xmlcharrefreplace"))
    if declaration == "meta":
        meta = f'<meta charset="{encoding}">'.encode()
        head = _HEAD.search(body)
        body = body[:head.end()] + meta + body[head.end():] if head else meta + body
    return body, f"text/html; charset={encoding}" if declaration == "header" else "text/html"


def template_swap(template_html: str, article_html: str) -> str:
    """The template page with its article replaced by the other page's article."""
    tree, other = HTMLTree.parse(template_html), HTMLTree.parse(article_html)
    target, content = article(tree), article(other)
    if target is None or content is None:
        return template_html
    target.inner_html = content.inner_html
    return str(tree)


def _names(node: DOMNode) -> str:
    return f"{node.id} {node.class_name}".lower()


def _chrome(tree: HTMLTree) -> list[DOMNode]:
    """Top-level site chrome: elements of ``CHROME`` not inside an article, main or other chrome."""
    if tree.body is None:
        return []
    total = len(tree.body.text or "")
    found: list[DOMNode] = []
    for node in tree.body.query_selector_all(CHROME):
        inside = node.parent is None or node.parent.closest("article, main") is not None
        if len(node.text or "") <= 0.3 * total and not inside and not any(n.contains(node) for n in found):
            found.append(node)
    return found


def article(tree: HTMLTree) -> DOMNode | None:
    """The element holding the article: the longest ``article`` or ``main``, else the parent of the
    most paragraph text."""
    if tree.body is None:
        return None
    tagged = [n for n in tree.body.query_selector_all("article, [itemprop=articleBody], main")
              if len(n.text or "") >= 200]
    if tagged:
        return max(tagged, key=lambda n: len(n.text or ""))
    weight: dict[DOMNode, int] = {}
    for paragraph in tree.body.query_selector_all("p"):
        parent = paragraph.parent
        if parent is not None:
            weight[parent] = weight.get(parent, 0) + len(paragraph.text or "")
    return max(weight, key=lambda node: weight[node]) if weight else tree.body


def _edit_text(html: str, rng: random.Random, edit: Callable[[list[DOMNode], int], None]) -> str:
    """Apply ``edit`` to the text nodes of 20+ characters in the article's paragraphs (the whole
    article if it has none), with a budget of words."""
    tree = HTMLTree.parse(html)
    container = article(tree)
    if container is None:
        return html
    blocks = container.query_selector_all("p") or [container]
    nodes = [n for block in blocks for n in _text_nodes(block) if len((n.text or "").strip()) >= 20]
    if not nodes:
        return html
    words = len(UNIT.findall(container.text or ""))
    edit(nodes, max(1, int(MAX_EDIT_SHARE * words)))
    return str(tree)


def _text_nodes(node: DOMNode) -> list[DOMNode]:
    """Text nodes under ``node`` outside scripts and styles (sibling links: ``child_nodes`` is
    quadratic on wide elements)."""
    found, stack = [], [node.first_child] if node.first_child is not None else []
    while stack:
        current = stack.pop()
        if current.next_sibling is not None:
            stack.append(current.next_sibling)
        if current.type == NodeType.TEXT:
            found.append(current)
        elif (current.type == NodeType.ELEMENT and current.tag not in ("script", "style", "noscript")
              and current.first_child is not None):
            stack.append(current.first_child)
    return found


def _replace_units(nodes: list[DOMNode], rng: random.Random, count: int, pattern: re.Pattern[str],
                   replace: Callable[[str], str]) -> int:
    """Replace ``count`` random matches of ``pattern`` in ``nodes``; how many were replaced."""
    spots = [(node, match.span()) for node in nodes for match in pattern.finditer(node.text or "")]
    chosen = sorted(rng.sample(spots, min(count, len(spots))), key=lambda s: -s[1][0])
    for node, (start, end) in chosen:  # right to left, so earlier spans stay valid
        text = node.text or ""
        node.text = text[:start] + replace(text[start:end]) + text[end:]
    return len(chosen)
