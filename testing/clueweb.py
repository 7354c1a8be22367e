"""The judged ClueWeb pairs (``../shared/corpus/copycat-clueweb``) and how a near-duplicate decision
is scored on them: shared by ``bench/clueweb_bench.py`` (its tables, baselines and cross-validation)
and the tests (the acceptance figures of issue 19).

Each pair is seen as the page stage would see it (:class:`Measured`: page ``a`` stored, page ``b``
looked up), decided by a :class:`~streams.pages.sketch.NearDuplicateRule` as the probe decides it
(:func:`decide`), and scored: precision, recall and F1 of calling the label-3 pairs (same content)
duplicates and the label-0.5 pairs (different) not (:func:`scores`). :class:`Selection` chooses a
rule on some pairs, over a grid (:func:`rule_grid`) and several sketch seeds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.pages.analyze import PageAnalysis, PageSettings, analyze_page, design_for
from streams.pages.blocks import BlockDesign
from streams.pages.extract import normalise_text
from streams.pages.features import text_tokens, tokens_features
from streams.pages.simhash import simhash64
from streams.pages.sketch import (
    SEED,
    NearDuplicateRule,
    PageSignature,
    is_near_duplicate,
    length_ratio,
    resemblance,
    sketch_tokens,
)
from testing.neardup_set import CORPUS

PAIRS = CORPUS / "copycat-clueweb" / "pairs.jsonl"
SAME, DIFFERENT = "3", "0.5"
PARTIAL = ("2", "1")
LABELS = (SAME, DIFFERENT, *PARTIAL)
RADII = (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 64)
RATIOS = (0.0, *np.round(np.arange(0.80, 0.99, 0.02), 2).tolist())
RESEMBLANCES = tuple(np.round(np.arange(0.50, 0.99, 0.01), 2).tolist())
# The project's sketch seed and four more (the next 64-bit words of pi's fractional part).
SEEDS = (SEED, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89, 0x452821E638D01377)
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Pair:
    id: str
    label: str
    s3: float
    a: str
    b: str

    @property
    def wikipedia(self) -> bool:
        return self.id.startswith("clueweb09-enwp")


def load_pairs(path: Path = PAIRS) -> list[Pair]:
    """The judged pairs (labels 3, 0.5, 2, 1; unknown labels left out), in file order."""
    pairs = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row["label"] in LABELS:
                pairs.append(Pair(row["id"], row["label"], float(row["s3"]), row["a"], row["b"]))
    return pairs


def page_record(doc_id: str, text: str) -> dict[str, Any]:
    """A pair's page as a fetched-page record: its plain text, as the stage would receive it."""
    return {"url": f"https://clueweb.invalid/{doc_id}", "status": 200,
            "content_type": "text/plain; charset=utf-8", "body": text}


# --- what the stage sees of each pair --------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One pair as the stage would see it: page ``a`` stored, page ``b`` looked up."""

    label: str
    wikipedia: bool
    exact: bool            # equal text digests
    distance: int          # SimHash distance (features version 2)
    shares_key: bool       # b's SimHash shares a key of the default block design with a's
    shares_key_k4: bool    # ... of the k = 4 design for 10^7 pages (35 tables)
    resemblance: float
    length_ratio: float
    accepted: bool         # is_near_duplicate at the default rule
    distance_v1: int       # SimHash distance with features version 1 (numbers kept)
    resemblances: tuple[float, ...]  # with each of SEEDS (the first is ``resemblance``)


def measure_pairs(pairs: Sequence[Pair], settings: PageSettings) -> tuple[list[Measured], list[float]]:
    """Each pair through ``analyze_page``; also the sketch's µs per page (on the normalised text's tokens)."""
    design, design_k4 = design_for(settings), BlockDesign(7, 4)
    measured, sketch_us = [], []
    for pair in pairs:
        ids = pair.id.split("__to__")
        first, second = (_analysed(page_record(doc, text), settings)
                         for doc, text in zip(ids, (pair.a, pair.b), strict=True))
        assert first.sketch is not None and second.sketch is not None
        distance = (first.simhash ^ second.simhash).bit_count()
        old = [_simhash_v1(text, settings) for text in (pair.a, pair.b)]
        tokens = [text_tokens(normalise_text(text), cjk_ngram_chars=settings.cjk_ngram_chars)[0]
                  for text in (pair.a, pair.b)]
        seeded = tuple(resemblance(sketch_tokens(tokens[0], seed=seed), sketch_tokens(tokens[1], seed=seed))
                       for seed in SEEDS)
        measured.append(Measured(
            label=pair.label, wikipedia=pair.wikipedia, exact=first.text_digest == second.text_digest,
            distance=distance, shares_key=_share(design, first.simhash, second.simhash),
            shares_key_k4=_share(design_k4, first.simhash, second.simhash),
            resemblance=resemblance(first.sketch, second.sketch),
            length_ratio=length_ratio(first.sketch, second.sketch),
            accepted=is_near_duplicate(PageSignature(second.simhash, second.sketch),
                                       PageSignature(first.simhash, first.sketch), distance),
            distance_v1=(old[0] ^ old[1]).bit_count(), resemblances=seeded))
        for page_tokens in tokens:
            start = time.perf_counter()
            sketch_tokens(page_tokens)
            sketch_us.append((time.perf_counter() - start) * 1e6)
    return measured, sketch_us


def _analysed(record: dict[str, Any], settings: PageSettings) -> PageAnalysis:
    found = analyze_page(record, settings)
    if not isinstance(found, PageAnalysis):
        raise ValueError(f"{record['url']} was not analysed: {found}")
    return found


def _share(design: BlockDesign, a: int, b: int) -> bool:
    return bool(set(design.keys(a)) & set(design.keys(b)))


def _simhash_v1(text: str, settings: PageSettings) -> int:
    """The SimHash of features version 1: the same tokens, numbers kept."""
    tokens, numbers = text_tokens(normalise_text(text), cjk_ngram_chars=settings.cjk_ngram_chars)
    return simhash64(*tokens_features(tokens, np.zeros_like(numbers), shingle_words=settings.shingle_words,
                                      weighting=settings.weighting))


def decide(pair: Measured, rule: NearDuplicateRule) -> bool:
    """Whether ``b`` is called a duplicate of ``a`` under ``rule`` (the probe's view of the pair)."""
    return pair.exact or (pair.shares_key and pair.distance <= rule.radius
                          and pair.length_ratio >= rule.min_length_ratio
                          and pair.resemblance >= rule.min_resemblance)


# --- peers -----------------------------------------------------------------------------------------


def scores(labels: Sequence[str], called: Sequence[bool]) -> dict[str, Any]:
    """P/R/F1 of calling label-3 pairs duplicates and label-0.5 pairs not; label-1/2 call rates."""
    tp = sum(c for label, c in zip(labels, called, strict=True) if label == SAME)
    fp = sum(c for label, c in zip(labels, called, strict=True) if label == DIFFERENT)
    fn = sum(not c for label, c in zip(labels, called, strict=True) if label == SAME)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    partial = {f"label_{p}": f"{sum(c for label, c in zip(labels, called, strict=True) if label == p)}"
                             f"/{sum(1 for label in labels if label == p)}" for p in PARTIAL}
    return {"tp": tp, "fp": fp, "fn": fn, "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(f1, 3), **partial}


def rule_grid() -> list[NearDuplicateRule]:
    return [NearDuplicateRule(radius, resemblance_, ratio)
            for radius in RADII for ratio in RATIOS for resemblance_ in RESEMBLANCES]


def call_matrix(measured: Sequence[Measured], rules: Sequence[NearDuplicateRule], seed: int = 0) -> BoolArray:
    """``calls[r, p]``: rule ``r`` calls pair ``p`` a duplicate (vectorised :func:`decide`), with the
    sketches of ``SEEDS[seed]``."""
    def column(name: str) -> npt.NDArray[Any]:
        if name == "resemblance":
            return np.array([m.resemblances[seed] for m in measured])[None, :]
        return np.array([getattr(m, name) for m in measured])[None, :]

    def row(values: list[float]) -> npt.NDArray[np.float64]:
        return np.array(values, dtype=np.float64)[:, None]

    near = ((column("distance") <= row([r.radius for r in rules]))
            & (column("length_ratio") >= row([r.min_length_ratio for r in rules]))
            & (column("resemblance") >= row([r.min_resemblance for r in rules])))
    return np.asarray(column("exact") | (column("shares_key") & near))


class Selection:
    """Choosing a rule on some pairs: the best F1 averaged over the sketch seeds, then the best
    precision, then the middle of the ties."""

    def __init__(self, calls: Sequence[BoolArray], labels: Sequence[str]) -> None:
        self.calls = calls  # one matrix per seed
        self.same = np.array([label == SAME for label in labels])
        self.different = np.array([label == DIFFERENT for label in labels])

    def f1(self, pairs: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        f1s, precisions = [], []
        for matrix in self.calls:
            calls = matrix[:, pairs]
            tp = (calls & self.same[pairs]).sum(axis=1)
            fp = (calls & self.different[pairs]).sum(axis=1)
            fn = (~calls & self.same[pairs]).sum(axis=1)
            precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 1.0)
            recall = tp / np.maximum(tp + fn, 1)
            f1s.append(np.where(precision + recall > 0,
                                2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0))
            precisions.append(precision)
        return np.mean(f1s, axis=0), np.mean(precisions, axis=0)

    def choose(self, pairs: npt.NDArray[np.intp]) -> int:
        best = self.ties(pairs)
        return best[len(best) // 2]

    def ties(self, pairs: npt.NDArray[np.intp]) -> list[int]:
        """The rules with the best F1 on ``pairs`` and, among them, the best precision (grid order)."""
        f1, precision = self.f1(pairs)
        best = np.flatnonzero(np.isclose(f1, f1.max()))
        return [int(i) for i in best[np.isclose(precision[best], precision[best].max())]]
