"""The article-extraction benchmark's metric, shared by ``bench/extract_bench.py`` and the tests.

Written from the description in the benchmark's ``evaluate.py``
(https://github.com/scrapinghub/article-extraction-benchmark, commit
4a3bc979f76c0df73cb95fe272e2fc1b96f9f010):

* tokens are the ``\\w+`` runs of the text; shingles are the 4-grams of tokens (a text of fewer
  than 4 tokens is one shorter shingle), counted as a multiset;
* per page, TP = shared shingles (minimum count), FP = predicted extra, FN = true missing, then the
  three divided by their sum, so every page weighs the same;
* precision = mean of per-page TP/(TP+FP) over pages with TP+FP > 0, recall likewise with TP+FN;
  a page with FP = FN = 0 scores 1 on both, a page with TP = FP = 0 scores 0 (resp. TP = FN = 0);
  F1 = harmonic mean of the two means; accuracy = share of pages whose token lists are equal;
* each figure's standard deviation is taken over bootstrap resamples of the pages.
"""

from __future__ import annotations

import random
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

_TOKEN = re.compile(r"\w+")
SHINGLE_TOKENS = 4


class Scores(NamedTuple):
    tp: float
    fp: float
    fn: float


def shingles(text: str, size: int = SHINGLE_TOKENS) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN.findall(text)
    return Counter(tuple(tokens[i:i + size]) for i in range(max(1, len(tokens) - size + 1))
                   if tokens[i:i + size])


def shingle_scores(true: str, predicted: str) -> Scores:
    """Per-page TP, FP, FN over shingle multisets, normalised to sum to 1 (or all 0)."""
    truth, guess = shingles(true), shingles(predicted)
    tp = sum((truth & guess).values())
    fp = sum((guess - truth).values())
    fn = sum((truth - guess).values())
    total = tp + fp + fn
    return Scores(tp / total, fp / total, fn / total) if total else Scores(0.0, 0.0, 0.0)


def precision(s: Scores) -> float:
    if s.fp == s.fn == 0:
        return 1.0
    return 0.0 if s.tp == s.fp == 0 else s.tp / (s.tp + s.fp)


def recall(s: Scores) -> float:
    if s.fp == s.fn == 0:
        return 1.0
    return 0.0 if s.tp == s.fn == 0 else s.tp / (s.tp + s.fn)


def summary(scores: Sequence[Scores], exact: Sequence[float]) -> dict[str, float]:
    """The benchmark's figures; 0 where it would divide by zero (a resample with no prediction)."""
    p = _mean([precision(s) for s in scores if s.tp + s.fp > 0])
    r = _mean([recall(s) for s in scores if s.tp + s.fn > 0])
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"f1": f1, "precision": p, "recall": r, "accuracy": _mean(exact)}


def _mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else 0.0


def evaluate(truths: Sequence[str], texts: Sequence[str], bootstrap: int, seed: int) -> dict[str, float]:
    """The benchmark's figures for ``texts`` and the bootstrap standard deviation of each."""
    scores = [shingle_scores(t, p) for t, p in zip(truths, texts, strict=True)]
    exact = [float(_TOKEN.findall(t) == _TOKEN.findall(p)) for t, p in zip(truths, texts, strict=True)]
    result = summary(scores, exact)
    rng, samples = random.Random(seed), []
    for _ in range(bootstrap):
        picks = [rng.randrange(len(scores)) for _ in scores]
        samples.append(summary([scores[i] for i in picks], [exact[i] for i in picks]))
    for name in list(result):
        result[f"{name}_std"] = statistics.stdev(s[name] for s in samples) if bootstrap > 1 else 0.0
    return result
