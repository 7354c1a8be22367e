"""Near-duplicate benchmark (issue 4): quality and speed on the labelled set, side by side.

    python -m bench.neardup_bench [--clusters N] [--scale 100000,1000000] [--no-grid]

1. The labelled set of testing/neardup_set.py, pages in its shuffled order, scored by its metric
   (precision, recall and F1 of the duplicate class; also per transformation, CJK and other
   scripts, and pairwise figures).
2. Systems, fed the same main text (``extract_text``) and, for the baselines, the same shingles
   (this project's tokens, two per shingle), so the comparison is about fingerprints and indexes:
   ours (features, SimHash, block tables, text digest; also end to end through ``analyze_page``,
   decoding and extraction included); 1e0ng/simhash's ``Simhash`` + ``SimhashIndex`` (k = 3);
   datasketch ``MinHash`` (128 permutations) + ``MinHashLSH`` at several thresholds.
3. Speed: fingerprints per second, lookup + insert µs per page, and our features + SimHash on the
   5-20 KB texts. Lookup time of :class:`BlockIndex` against stored-set size (random fingerprints).
4. Alternatives to our defaults (shingle size, weighting, CJK n-gram, thresholds), for
   docs/near-duplicates.md, with the distance margin between clusters.

Writes ``bench/results/neardup.json`` and ``.md``, prints the tables, and exits non-zero unless our
F1 at the default settings is at least 0.95.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import gc
import json
import platform
import random
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from streams.pages.analyze import PageSettings, design_for
from streams.pages.blocks import BlockIndex, expected_bucket_size
from streams.pages.decode import DecodedPage, decode_page
from streams.pages.extract import extract_text
from streams.pages.features import feature_hashes
from streams.pages.simhash import simhash64
from testing.neardup_ours import run_ours, run_ours_on_texts
from testing.neardup_set import CORPUS, LabelledPage, Run, Scores, build_set, score

RESULTS = Path(__file__).resolve().parent / "results"
MIN_F1 = 0.95
BASELINE_SHINGLE = 2
LSH_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)


# --- systems -------------------------------------------------------------------------------------


# --- inputs, speed, scale ------------------------------------------------------------------------


def main_texts(pages: Sequence[LabelledPage], settings: PageSettings) -> tuple[list[str | None], float]:
    """Each page's main text as ``analyze_page`` extracts it (None if skipped), and the seconds taken."""
    start, texts = time.perf_counter(), []
    for page in pages:
        record = page.record
        body = base64.b64decode(record["body_base64"])
        decoded = decode_page(body, record["content_type"], record["headers"])
        extracted = (extract_text(decoded, min_main_chars=settings.min_main_chars, full_text=False)
                     if isinstance(decoded, DecodedPage) else None)
        texts.append(extracted.main_text if extracted else None)
    return texts, time.perf_counter() - start


def feature_speed(texts: Sequence[str | None], settings: PageSettings) -> dict[str, Any]:
    """Features + SimHash per text of 5-20 KB (UTF-8), best of 5 runs each: median and p90 in µs."""
    chosen = [t for t in texts if t and 5_000 <= len(t.encode("utf-8")) <= 20_000]
    timings = []
    for text in chosen:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            simhash64(*feature_hashes(text, shingle_words=settings.shingle_words,
                                      cjk_ngram_chars=settings.cjk_ngram_chars))
            best = min(best, time.perf_counter() - start)
        timings.append(best * 1e6)
    timings.sort()
    kilobytes = statistics.median(len(t.encode()) for t in chosen) / 1e3
    return {"texts": len(chosen), "median_kb": round(kilobytes, 1),
            "median_us": round(statistics.median(timings)), "p90_us": round(timings[int(0.9 * len(timings))])}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def index_scale(sizes: Sequence[int], settings: PageSettings, lookups: int = 20_000) -> list[dict[str, Any]]:
    """BlockIndex with ``n`` random fingerprints: insert and lookup µs, candidates, RSS per fingerprint."""
    design, rows = design_for(settings), []
    for size in sizes:
        rng = random.Random(size)
        gc.collect()
        before = _rss_bytes()
        index: BlockIndex[int] = BlockIndex(design)
        stored = [rng.getrandbits(64) for _ in range(size)]
        start = time.perf_counter()
        for item, fingerprint in enumerate(stored):
            index.add(fingerprint, item)
        insert_us = (time.perf_counter() - start) / size * 1e6
        rss = (_rss_bytes() - before) / size
        misses = [rng.getrandbits(64) for _ in range(lookups)]
        flips = [sum(1 << bit for bit in rng.sample(range(64), settings.hamming_threshold))
                 for _ in range(lookups)]
        hits = [stored[rng.randrange(size)] ^ flip for flip in flips]
        miss_us, _ = _time_lookups(index, misses)
        hit_us, found = _time_lookups(index, hits)
        candidates = sum(len(index.candidates(fp)) for fp in misses) / lookups
        rows.append({"stored": size, "tables": len(design.tables), "insert_us": round(insert_us, 2),
                     "lookup_miss_us": round(miss_us, 2), "lookup_near_us": round(hit_us, 2),
                     "near_found": found / lookups, "candidates_per_miss": round(candidates, 3),
                     "expected_bucket": round(expected_bucket_size(design, size), 4),
                     "rss_bytes_per_fp": round(rss)})
        del index, stored
    return rows


def _time_lookups(index: BlockIndex[int], fingerprints: Sequence[int]) -> tuple[float, int]:
    start, found = time.perf_counter(), 0
    for fingerprint in fingerprints:
        found += bool(index.near(fingerprint))
    return (time.perf_counter() - start) / len(fingerprints) * 1e6, found


# --- scores, alternatives ------------------------------------------------------------------------


def summary(run: Run, pages: Sequence[LabelledPage]) -> dict[str, Any]:
    """Scores of a run overall, by script and by transformation, and its speed."""
    listed = list(pages)
    total = score(listed, run.matches)
    transforms = sorted({page.transform for page in listed})
    return {"system": run.name, **total.as_dict(),
            "cjk_recall": round(score(listed, run.matches, lambda p: p.cjk).recall, 4),
            "other_recall": round(score(listed, run.matches, lambda p: not p.cjk).recall, 4),
            "fingerprints_per_s": round(len(listed) / run.fingerprint_s) if run.fingerprint_s else None,
            "lookup_insert_us": round(run.index_s / len(listed) * 1e6, 1),
            "by_transform": {t: _by(listed, run.matches, lambda p, t=t: p.transform == t)
                             for t in transforms},
            "notes": run.notes}


def _by(pages: list[LabelledPage], matches: list[int | None],
        where: Callable[[LabelledPage], bool]) -> dict[str, Any]:
    scores: Scores = score(pages, matches, where)
    return {"recall": round(scores.recall, 4), "fp": scores.false_positives,
            "duplicates": scores.true_positives + scores.false_negatives}


def margins(fingerprints: Sequence[int | None], pages: Sequence[LabelledPage]) -> dict[str, Any]:
    """Hamming distances between pages of different clusters (nearest, how many within 7 and 11 bits)
    and within clusters (share within 3 and 4 bits): the room the threshold has on either side."""
    present = [i for i, fp in enumerate(fingerprints) if fp is not None]
    values = np.array([fingerprints[i] for i in present], dtype=np.uint64)
    clusters = np.array([pages[i].cluster for i in present])
    cross_counts, same = np.zeros(65, dtype=np.int64), np.zeros(65, dtype=np.int64)
    for row in range(len(present) - 1):
        distances = np.bitwise_count(values[row + 1:] ^ values[row])
        same_cluster = clusters[row + 1:] == clusters[row]
        cross_counts += np.bincount(distances[~same_cluster], minlength=65)
        same += np.bincount(distances[same_cluster], minlength=65)
    nearest = int(np.flatnonzero(cross_counts)[0]) if cross_counts.any() else None
    return {"cross_min": nearest, "cross_within_7": int(cross_counts[:8].sum()),
            "cross_within_11": int(cross_counts[:12].sum()),
            "cross_mean": round(float((cross_counts * np.arange(65)).sum() / cross_counts.sum()), 1),
            "same_within_3": round(float(same[:4].sum() / same.sum()), 4),
            "same_within_4": round(float(same[:5].sum() / same.sum()), 4)}


def pairwise(fingerprints: Sequence[int | None], pages: Sequence[LabelledPage],
             settings: PageSettings) -> dict[str, Any]:
    """All pairs of pages: predicted when the tables bring them together within the threshold (an
    equal digest is distance 0), true when they share a cluster."""
    design = design_for(settings)
    present = [i for i, fp in enumerate(fingerprints) if fp is not None]
    values = np.array([fingerprints[i] for i in present], dtype=np.uint64)
    keys = {i: set(design.keys(fp)) for i, fp in enumerate(fingerprints) if fp is not None}
    predicted = both = 0
    for row in range(len(present) - 1):
        close = np.flatnonzero(np.bitwise_count(values[row + 1:] ^ values[row]) <= settings.hamming_threshold)
        for offset in close.tolist():
            i, j = present[row], present[row + 1 + offset]
            if keys[i] & keys[j]:
                predicted += 1
                both += pages[i].cluster == pages[j].cluster
    sizes = Counter(page.cluster for page in pages)
    true = sum(n * (n - 1) // 2 for n in sizes.values())
    return {"pairs": len(pages) * (len(pages) - 1) // 2, "true_pairs": true,
            **Scores(both, predicted - both, true - both).as_dict()}


ALTERNATIVES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("defaults", {}),
    ("1-word shingles, TF", {"weighting": "tf"}),
    ("2-word shingles, TF", {"shingle_words": 2, "weighting": "tf"}),
    ("2-word shingles, log-TF", {"shingle_words": 2}),
    ("3-word shingles, TF", {"shingle_words": 3, "weighting": "tf"}),
    ("binary weights", {"weighting": "binary"}),
    ("CJK unigrams", {"cjk_ngram_chars": 1}),
    ("CJK trigrams", {"cjk_ngram_chars": 3}),
    ("k = 4 (35 tables)", {"hamming_threshold": 4}),
    ("2-word shingles, TF, k = 4 (35 tables)",
     {"shingle_words": 2, "weighting": "tf", "hamming_threshold": 4}),
)


def alternatives(texts: Sequence[str | None], pages: Sequence[LabelledPage]) -> list[dict[str, Any]]:
    rows = []
    for label, overrides in ALTERNATIVES:
        settings = dataclasses.replace(PageSettings(), **overrides)
        run, fingerprints = run_ours_on_texts(texts, settings)
        result = summary(run, pages)
        rows.append({"variant": label, "tables": len(design_for(settings).tables),
                     **{k: result[k] for k in ("precision", "recall", "f1", "fp", "cjk_recall",
                                               "other_recall")},
                     **margins(fingerprints, pages)})
    return rows


# --- the report ----------------------------------------------------------------------------------


def measure(clusters: int | None, scale_sizes: Sequence[int], grid: bool) -> dict[str, Any]:
    settings = PageSettings()
    started = time.perf_counter()
    pages = build_set(clusters=clusters)
    built_s = time.perf_counter() - started
    texts, extract_s = main_texts(pages, settings)
    end_to_end = run_ours(pages, settings)
    ours, fingerprints = run_ours_on_texts(texts, settings)
    # the baselines need the bench extra (datasketch, simhash); the test imports this module without it
    from bench.neardup_baselines import minhashes, run_1e0ng, run_minhash, simhash_1e0ng_on_text

    before, _ = run_ours_on_texts(texts, settings, None)
    sketches, minhash_s = minhashes(texts)
    runs = [ours, before, run_1e0ng(texts), *(run_minhash(sketches, t, minhash_s) for t in LSH_THRESHOLDS)]
    runs[2].notes = simhash_1e0ng_on_text(texts)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "command": "python -m bench.neardup_bench" + (f" --clusters {clusters}" if clusters else ""),
        "settings": dataclasses.asdict(settings),
        "set": {"pages": len(pages), "clusters": len({p.cluster for p in pages}),
                "cjk_pages": sum(p.cjk for p in pages), "build_s": round(built_s, 1),
                "transforms": dict(sorted(Counter(page.transform for page in pages).items()))},
        "end_to_end": {**summary(end_to_end, pages),
                       "pages_per_s": round(len(pages) / end_to_end.fingerprint_s),
                       "extract_ms_per_page": round(extract_s / len(pages) * 1e3, 2)},
        "systems": [summary(run, pages) for run in runs],
        "pairwise_ours": pairwise(fingerprints, pages, settings),
        "features_5_20kb": feature_speed(texts, settings),
        "index_scale": index_scale(scale_sizes, settings),
        "alternatives": alternatives(texts, pages) if grid else [],
    }


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _table(header: Sequence[str], rows: list[str]) -> list[str]:
    return [_row(*header), "|---|" + "---:|" * (len(header) - 1), *rows, ""]


def markdown(result: dict[str, Any]) -> str:
    set_, e2e, speed = result["set"], result["end_to_end"], result["features_5_20kb"]
    transforms = ", ".join(f"{k} {v}" for k, v in set_["transforms"].items())
    lines = [f"Near-duplicate benchmark, {result['date']} ({result['machine']}, one core): "
             f"`{result['command']}`", "",
             f"Labelled set (testing/neardup_set.py): {set_['pages']} pages, {set_['clusters']} clusters, "
             f"{set_['cjk_pages']} CJK pages; {transforms}. Pages in the set's shuffled order; a page is "
             "a duplicate iff an earlier page has its cluster; a match in another cluster is a false "
             "positive.", ""]
    lines += _table(("system", "precision", "recall", "F1", "CJK recall", "other recall", "fingerprints/s",
                     "lookup+insert µs/page"),
                    [_row(r["system"], f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['f1']:.4f}",
                          f"{r['cjk_recall']:.4f}", f"{r['other_recall']:.4f}",
                          f"{r['fingerprints_per_s']:,}", r["lookup_insert_us"])
                     for r in [e2e, *result["systems"]]])
    lines += [f"End to end (`analyze_page`: decode, extract, features, SimHash): {e2e['pages_per_s']:,} "
              f"pages/s; decode + extract alone {e2e['extract_ms_per_page']} ms/page. Features + SimHash on "
              f"the {speed['texts']} main texts of 5-20 KB (median {speed['median_kb']} KB): median "
              f"{speed['median_us']} µs, p90 {speed['p90_us']} µs.", ""]
    lines += _transform_table(result)
    pair = result["pairwise_ours"]
    lines += [f"Pairwise (ours, {pair['pairs']:,} pairs, {pair['true_pairs']:,} in one cluster): precision "
              f"{pair['precision']}, recall {pair['recall']}, F1 {pair['f1']} ({pair['fp']} false pairs).",
              "", "Notes: " + "; ".join(f"{r['system']}: {r['notes']}"
                                         for r in result["systems"] if r["notes"]), "",
              "BlockIndex (in memory, the default 10-table design) holding random fingerprints:", ""]
    lines += _table(("stored", "tables", "insert µs", "lookup µs (miss)", "lookup µs (3 bits off)", "found",
                     "candidates/miss", "expected per bucket", "RSS bytes/fp"),
                    [_row(f"{r['stored']:,}", r["tables"], r["insert_us"], r["lookup_miss_us"],
                          r["lookup_near_us"], f"{r['near_found']:.3f}", r["candidates_per_miss"],
                          r["expected_bucket"], r["rss_bytes_per_fp"]) for r in result["index_scale"]])
    if result["alternatives"]:
        lines += ["Alternatives (main texts as above). Margins: Hamming distance from each page to pages of "
                  "other clusters (nearest, pairs within 7 and 11 bits, mean), and the share of same-cluster "
                  "pairs within 3 and 4 bits:", ""]
        lines += _table(("variant", "tables", "precision", "recall", "F1", "CJK recall", "other recall",
                         "nearest other", "others ≤7 / ≤11", "mean", "same ≤3 / ≤4"),
                        [_row(r["variant"], r["tables"], f"{r['precision']:.4f}", f"{r['recall']:.4f}",
                              f"{r['f1']:.4f}", f"{r['cjk_recall']:.4f}", f"{r['other_recall']:.4f}",
                              r["cross_min"], f"{r['cross_within_7']} / {r['cross_within_11']}",
                              r["cross_mean"], f"{r['same_within_3']} / {r['same_within_4']}")
                         for r in result["alternatives"]])
    return "\n".join(lines)


def _transform_table(result: dict[str, Any]) -> list[str]:
    systems = [result["end_to_end"], *result["systems"]]
    names = ["ours e2e", "ours", "ours, k = 3 only", "1e0ng", *(f"LSH {t}" for t in LSH_THRESHOLDS)]
    rows = [_row(f"{transform} ({first['duplicates']})",
                 *(f"{s['by_transform'][transform]['recall']:.3f}" for s in systems))
            for transform, first in systems[0]["by_transform"].items()]
    return ["Recall by transformation (of the later page; duplicates in brackets):", "",
            *_table(("transformation", *names), rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, help="a seeded sample of this many originals")
    parser.add_argument("--scale", default="100000,1000000", help="stored-set sizes for the index timing")
    parser.add_argument("--no-grid", action="store_true", help="skip the alternatives")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    result = measure(args.clusters, [int(n) for n in args.scale.split(",") if n], not args.no_grid)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "neardup.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    report = markdown(result)
    (RESULTS / "neardup.md").write_text(report)
    print(report)
    f1 = result["end_to_end"]["f1"]
    if f1 < MIN_F1:
        print(f"FAIL: our F1 {f1} is under {MIN_F1}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
