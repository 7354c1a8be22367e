"""Our near-duplicate decisions on a labelled set, in one process, as the page stage makes them:
shared by ``bench/neardup_bench.py`` and ``bench/clueweb_bench.py`` (their tables) and the tests (the
acceptance figure on the labelled set built from the shared corpus, :mod:`testing.neardup_set`).

A page is a copy of the best earlier page that has the same text digest or, among those the block
tables bring up, that the near-duplicate rule accepts by their sketches
(:func:`streams.pages.sketch.is_near_duplicate`, ranked by :func:`streams.pages.sketch.match_rank`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from streams.pages.analyze import PageSettings, analyze_page, design_for, digest
from streams.pages.blocks import BlockIndex, near_matches
from streams.pages.decode import Skipped
from streams.pages.features import text_tokens, tokens_features
from streams.pages.simhash import simhash64
from streams.pages.sketch import (
    DEFAULT_RULE,
    NearDuplicateRule,
    PageSignature,
    is_near_duplicate,
    match_rank,
    sketch_tokens,
)
from testing.neardup_set import LabelledPage, Run


def run_ours(pages: Sequence[LabelledPage], settings: PageSettings,
             rule: NearDuplicateRule | None = DEFAULT_RULE) -> Run:
    """End to end, as the stage does it: ``analyze_page``, then the text digest, then block tables,
    whose candidates ``rule`` decides by the page sketches (:func:`streams.pages.sketch.is_near_duplicate`);
    ``rule=None``: SimHash within ``hamming_threshold`` bits, the decision before issue 19."""
    finder = _Finder(settings) if rule is None else _SketchFinder(settings, rule)
    run = Run("ours (analyze_page end to end)" + ("" if rule is not None else ", SimHash within k"), [])
    for page in pages:
        start = time.perf_counter()
        analysis = analyze_page(page.record, settings, sketch=rule is not None)
        middle = time.perf_counter()
        if isinstance(analysis, Skipped):
            match = None
        elif isinstance(finder, _SketchFinder):
            assert analysis.sketch is not None
            match = finder.find_and_add(len(run.matches), PageSignature(analysis.simhash, analysis.sketch),
                                        analysis.text_digest)
        else:
            match = finder.find_and_add(len(run.matches), analysis.simhash, analysis.text_digest)
        run.fingerprint_s += middle - start
        run.index_s += time.perf_counter() - middle
        run.matches.append(match)
    return run


class _Finder:
    """Our matching: an equal text digest first, else the nearest earlier page the tables bring up."""

    def __init__(self, settings: PageSettings) -> None:
        self.index: BlockIndex[int] = BlockIndex(design_for(settings))
        self.threshold = settings.hamming_threshold
        self.digests: dict[bytes, int] = {}

    def find_and_add(self, page: int, fingerprint: int, text_digest: bytes) -> int | None:
        match = self.digests.get(text_digest)
        if match is None:
            near = near_matches(fingerprint, self.index.candidates(fingerprint), self.threshold)
            match = min(near, key=lambda pair: (pair[1], pair[0]))[0] if near else None
        self.digests.setdefault(text_digest, page)
        self.index.add(fingerprint, page)
        return match


class _SketchFinder:
    """The decision of issue 19: an equal text digest first, else the best earlier page the tables bring
    up that :func:`is_near_duplicate` accepts (ranked by :func:`match_rank`, then the earliest)."""

    def __init__(self, settings: PageSettings, rule: NearDuplicateRule) -> None:
        self.index: BlockIndex[int] = BlockIndex(design_for(settings))
        self.rule = rule
        self.digests: dict[bytes, int] = {}
        self.signatures: dict[int, PageSignature] = {}

    def find_and_add(self, page: int, signature: PageSignature, text_digest: bytes) -> int | None:
        match = self.digests.get(text_digest)
        if match is None:
            best: tuple[tuple[int, int], int] | None = None
            for fingerprint, item in self.index.candidates(signature.simhash):
                stored, distance = self.signatures[item], (fingerprint ^ signature.simhash).bit_count()
                if is_near_duplicate(signature, stored, distance, self.rule):
                    ranked = (match_rank(signature, stored, distance), item)
                    best = ranked if best is None or ranked < best else best
            match = None if best is None else best[1]
        self.digests.setdefault(text_digest, page)
        self.signatures[page] = signature
        self.index.add(signature.simhash, page)
        return match


def run_ours_on_texts(texts: Sequence[str | None], settings: PageSettings,
                      rule: NearDuplicateRule | None = DEFAULT_RULE) -> tuple[Run, list[int | None]]:
    """Ours from the main texts (features, SimHash, sketch, index); also returns the fingerprints.
    ``rule=None``: SimHash within ``hamming_threshold`` bits, the decision before issue 19."""
    k = settings.hamming_threshold
    name = "ours" if rule is not None else f"ours, SimHash within {k} bits (the decision before)"
    finder = _Finder(settings) if rule is None else _SketchFinder(settings, rule)
    run, fingerprints = Run(name, []), []
    for text in texts:
        start = time.perf_counter()
        tokens, numbers = (text_tokens(text, cjk_ngram_chars=settings.cjk_ngram_chars) if text
                           else (np.zeros(0, np.uint64), np.zeros(0, np.bool_)))
        hashes, weights = (tokens_features(tokens, numbers, shingle_words=settings.shingle_words,
                                           weighting=settings.weighting)
                           if tokens.size else (np.zeros(0, np.uint64), np.zeros(0)))
        fingerprint = simhash64(hashes, weights) if hashes.size else None
        text_digest = digest(text.encode("utf-8")) if text else b""
        signature = None if fingerprint is None or rule is None else PageSignature(fingerprint,
                                                                                   sketch_tokens(tokens))
        middle = time.perf_counter()
        fingerprints.append(fingerprint)
        run.fingerprint_s += middle - start
        if fingerprint is None:
            run.matches.append(None)
            continue
        if isinstance(finder, _SketchFinder):
            assert signature is not None
            run.matches.append(finder.find_and_add(len(run.matches), signature, text_digest))
        else:
            run.matches.append(finder.find_and_add(len(run.matches), fingerprint, text_digest))
        run.index_s += time.perf_counter() - middle
    return run, fingerprints
