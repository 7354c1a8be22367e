"""The comparison systems of bench/neardup_bench.py: 1e0ng/simhash and datasketch MinHash LSH.

Both are fed this project's tokens (case-folded), two to a shingle, from the same main text as ours,
so the comparison is about the fingerprints and indexes, not the tokenizer. 1e0ng/simhash's own
text path (character 4-grams) breaks on NumPy 2 for some texts (:func:`simhash_1e0ng_on_text`
says how often); it is used unchanged, given a feature list, never patched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from datasketch import MinHash, MinHashLSH
from simhash import Simhash, SimhashIndex

from streams.pages.features import token_spans
from testing.neardup_set import Run

BASELINE_SHINGLE = 2


def shingle_strings(text: str, width: int = BASELINE_SHINGLE) -> list[str]:
    """This project's tokens (case-folded), ``width`` to a shingle, as strings for the baselines."""
    tokens = [text[start:end].casefold() for start, end in token_spans(text)]
    if len(tokens) <= width:
        return [" ".join(tokens)] if tokens else []
    return [" ".join(tokens[i:i + width]) for i in range(len(tokens) - width + 1)]


def run_1e0ng(texts: Sequence[str | None]) -> Run:
    """1e0ng/simhash fed our shingles as a list (weight = occurrences), SimhashIndex with k = 3."""
    index = SimhashIndex([], k=3)
    run = Run("1e0ng/simhash (features) + SimhashIndex k=3", [])
    stored: dict[int, Simhash] = {}
    for page, text in enumerate(texts):
        start = time.perf_counter()
        features = shingle_strings(text) if text else []
        fingerprint = Simhash(features) if features else None
        middle = time.perf_counter()
        run.fingerprint_s += middle - start
        if fingerprint is None:
            run.matches.append(None)
            continue
        found = [int(key) for key in index.get_near_dups(fingerprint)]
        run.matches.append(min(found, key=lambda c: (fingerprint.distance(stored[c]), c)) if found else None)
        index.add(str(page), fingerprint)
        stored[page] = fingerprint
        run.index_s += time.perf_counter() - middle
    return run


def simhash_1e0ng_on_text(texts: Sequence[str | None]) -> str:
    """How 1e0ng/simhash's own text path fares on numpy 2: the first failure, and how many texts fail."""
    failures, first = 0, ""
    for text in texts:
        if not text:
            continue
        try:
            Simhash(text)
        except (OverflowError, ValueError) as error:
            failures += 1
            first = first or f"{type(error).__name__}: {error}"
    return f"Simhash(text) failed on {failures} of {sum(1 for t in texts if t)} texts ({first})"


def minhashes(texts: Sequence[str | None], num_perm: int = 128) -> tuple[list[MinHash | None], float]:
    """datasketch MinHash of each text's shingles (UTF-8), and the seconds it took."""
    start, result = time.perf_counter(), []
    for text in texts:
        features = shingle_strings(text) if text else []
        if not features:
            result.append(None)
            continue
        sketch = MinHash(num_perm=num_perm)
        sketch.update_batch([feature.encode("utf-8") for feature in features])
        result.append(sketch)
    return result, time.perf_counter() - start


def run_minhash(sketches: Sequence[MinHash | None], threshold: float, fingerprint_s: float) -> Run:
    """MinHashLSH at ``threshold``; the candidate with the highest estimated Jaccard is the match."""
    lsh = MinHashLSH(threshold=threshold, num_perm=128)
    run = Run(f"datasketch MinHash 128 + MinHashLSH t={threshold}", [], fingerprint_s=fingerprint_s)
    for page, sketch in enumerate(sketches):
        if sketch is None:
            run.matches.append(None)
            continue
        start = time.perf_counter()
        candidates = [int(key) for key in lsh.query(sketch)]
        best = max(candidates, key=lambda c: (sketch.jaccard(sketches[c]), -c)) if candidates else None
        run.matches.append(best)
        lsh.insert(str(page), sketch)
        run.index_s += time.perf_counter() - start
    return run
