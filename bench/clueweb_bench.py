"""Near-duplicate decisions on person-judged ClueWeb pairs (issue 19), beside S3, MinHash and SimHash.

    python -m bench.clueweb_bench [--pairs PATH] [--repeats 20] [--no-synthetic]

The pairs are ``../shared/corpus/copycat-clueweb/pairs.jsonl`` (chatnoir-eu/chatnoir-copycat's
human judgments of ClueWeb09/12 pages joined by a canonical link): label ``3`` is the same content
(44 pairs), ``0.5`` different content on the same site template (81), ``2`` and ``1`` partly the same
(24, 16), and unknown labels are left out. The texts are whole pages (navigation and all), already
lower-cased and Porter-stemmed. Without the file the benchmark says so and exits 0.

How a pair is judged. Page ``a`` is processed first, then page ``b``, each as the stage sees a
``text/plain`` page (``analyze_page``: decode, normalise, tokens, SimHash, sketch, digests); ``b``
is called a duplicate of ``a`` when the text digests are equal, or when ``b``'s SimHash shares a
block-table key with ``a``'s (the default design, 10 tables for 10^7 pages: only then does the
stage's probe see ``a``) and the decision accepts ``a``. Precision, recall and F1 are those of
calling label-3 pairs duplicates and label-0.5 pairs not; label-1 and label-2 pairs are reported as
how often they are called duplicates.

Systems, all on the same pairs in one run:

* ours at the default settings: :func:`streams.pages.sketch.is_near_duplicate` with
  :data:`~streams.pages.sketch.DEFAULT_RULE` on the tables' candidates;
* ours, the previous decision: features version 1 (numbers kept) and SimHash within k = 3 bits;
* ours, version 2 features and SimHash within 3 bits (what the features change alone does);
* S3 >= 0.82, the word 8-gram score the judges saw (the ``s3`` field), and recomputed from our
  tokens: ``|A ∩ B| / ((|A| + |B|) / 2)`` of the distinct 8-grams (Bernstein and Zobel 2005);
* datasketch MinHash, 128 permutations, word 5-shingles of our tokens: estimated Jaccard >= 0.8,
  and ``MinHashLSH(threshold=0.8)`` (page ``a`` inserted, ``b`` queried);
* 1e0ng/simhash on its own character 4-grams (its ``_tokenize``: lower-cased word characters run
  together), k = 3. ``Simhash(text)`` raises OverflowError on NumPy 2 for 7 of these texts (a
  4-gram seen 256 times or more: see docs/near-duplicates.md), so its feature list is passed
  instead, which gives the same fingerprint without that code path.

Cross-validation. The rule's three thresholds are chosen by maximising training F1 (precision,
then the middle of the tied rules, breaking ties) over a grid: radius 3-12, 14, 16, 64 bits;
length ratio off or 0.80-0.98 by 0.02; resemblance 0.50-0.98 by 0.01. A sketch's estimation error
on a pair is fixed by its hash seed, so a threshold fitted to one seed fits that seed's errors too:
the training F1 is averaged over :data:`SEEDS` (the project's :data:`~streams.pages.sketch.SEED`
and four others), and held-out figures are averaged over them as well (the project's seed alone is
reported beside). Repeated stratified 5-fold cross-validation (``--repeats`` times, seeded) scores
that whole procedure on held-out pairs; also leave-one-out, and a domain split (rules chosen on
the 101 Wikipedia pairs, tested on the 24 others, and the reverse). The defaults are not re-chosen
here: the benchmark reports what they score and what the procedure chooses on all pairs.

Second gate (unless ``--no-synthetic``): the labelled set of testing/neardup_set.py with the new
decision, end to end through ``analyze_page``.

Writes ``bench/results/clueweb.json`` and ``.md``; exits 1 unless, at the default settings, F1 and
precision on the pairs are at least 0.90, and on the labelled set F1 is at least 0.95 and CJK recall
at least 0.929 (its figure before issue 19).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from streams import registry
from streams.pages.analyze import PageSettings
from streams.pages.extract import normalise_text
from streams.pages.features import shingle_hashes, text_tokens
from streams.pages.sketch import (
    DEFAULT_RULE,
    SKETCH_BYTES,
    NearDuplicateRule,
)
from streams.runtime.offline import run_offline
from streams.runtime.store import MemoryStore
from streams.stages.content_seen.stage import ContentSeenStage
from streams.topics import Topics
from testing.clueweb import (
    DIFFERENT,
    PAIRS,
    RADII,
    RATIOS,
    RESEMBLANCES,
    SAME,
    SEEDS,
    BoolArray,
    Measured,
    Pair,
    Selection,
    call_matrix,
    decide,
    load_pairs,
    measure_pairs,
    page_record,
    rule_grid,
    scores,
)

RESULTS = Path(__file__).resolve().parent / "results"
MIN_F1 = MIN_PRECISION = 0.90
MIN_SYNTHETIC_F1 = 0.95
MIN_CJK_RECALL = 0.929  # bench/results/neardup.md before issue 19
S3_THRESHOLD = 0.82


def stage_offline(pairs: Sequence[Pair]) -> list[bool]:
    """Each pair through the page stage itself in offline mode (its probe, records and decision):
    page ``a`` then page ``b`` into a fresh store; whether ``b``'s verdict is a duplicate."""
    called = []
    for pair in pairs:
        ids = pair.id.split("__to__")
        lines = [orjson.dumps({**page_record(doc, text), "fetched_at": f"2009-01-0{day}T00:00:00Z"})
                 for day, doc, text in zip((1, 2), ids, (pair.a, pair.b), strict=True)]
        with tempfile.TemporaryFile() as sink:
            topology = registry.spec("content-seen").topology(Topics("clueweb."), "clueweb")
            run_offline(topology, ContentSeenStage(), MemoryStore(), lines, out=sink)
            sink.seek(0)
            verdicts = [orjson.loads(line) for line in sink.read().splitlines()]
        called.append(verdicts[-1]["verdict"] == "duplicate")
    return called


def words(text: str) -> list[str]:
    """Our tokens of a text, as strings (case-folded)."""
    normalised = normalise_text(text)
    from streams.pages.features import token_spans
    return [normalised[start:end].casefold() for start, end in token_spans(normalised)]


def s3_score(a: str, b: str, n: int = 8) -> float:
    """Bernstein and Zobel's S3 of the distinct word ``n``-grams: ``|A ∩ B| / ((|A| + |B|) / 2)``."""
    first = set(shingle_hashes(text_tokens(normalise_text(a))[0], n).tolist())
    second = set(shingle_hashes(text_tokens(normalise_text(b))[0], n).tolist())
    return 2 * len(first & second) / (len(first) + len(second))


def peer_predictions(pairs: Sequence[Pair]) -> tuple[dict[str, list[bool]], list[str]]:
    """The peers' calls on each pair; peers whose package is missing are left out, with a note."""
    calls: dict[str, list[bool]] = {
        f"S3 >= {S3_THRESHOLD} (the judges' `s3` field)": [p.s3 >= S3_THRESHOLD for p in pairs],
        f"S3 >= {S3_THRESHOLD}, recomputed from our tokens": [s3_score(p.a, p.b) >= S3_THRESHOLD
                                                              for p in pairs],
    }
    notes = []
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        notes.append("datasketch is not installed (the bench extra): its rows are missing")
    else:
        estimated, lsh_found = [], []
        for pair in pairs:
            sketches = []
            for text in (pair.a, pair.b):
                tokens = words(text)
                shingles = {" ".join(tokens[i:i + 5]) for i in range(max(1, len(tokens) - 4))}
                sketch = MinHash(num_perm=128)
                sketch.update_batch([s.encode("utf-8") for s in shingles])
                sketches.append(sketch)
            estimated.append(sketches[0].jaccard(sketches[1]) >= 0.8)
            lsh = MinHashLSH(threshold=0.8, num_perm=128)
            lsh.insert("a", sketches[0])
            lsh_found.append(bool(lsh.query(sketches[1])))
        calls["datasketch MinHash 128, word 5-shingles, estimated J >= 0.8"] = estimated
        calls["datasketch MinHashLSH t = 0.8, 128 perms, word 5-shingles"] = lsh_found
    try:
        from simhash import Simhash
    except ImportError:
        notes.append("1e0ng/simhash is not installed (the bench extra): its row is missing")
    else:
        tokenize = Simhash(0)._tokenize  # its own text features: character 4-grams
        calls["1e0ng/simhash, character 4-grams, k = 3"] = [
            Simhash(tokenize(p.a)).distance(Simhash(tokenize(p.b))) <= 3 for p in pairs]
    return calls, notes


# --- scores and cross-validation -------------------------------------------------------------------


def cross_validate(measured: Sequence[Measured], repeats: int, folds: int = 5,
                   seed: int = 19) -> dict[str, Any]:
    """Repeated stratified k-fold, leave-one-out and the Wikipedia/other split of the rule selection.

    Held-out calls are scored per sketch seed; figures are means over seeds (and repeats), with the
    project's seed alone beside them."""
    rules = rule_grid()
    labels = [m.label for m in measured]
    selection = Selection([call_matrix(measured, rules, s) for s in range(len(SEEDS))], labels)
    judged = np.array([label in (SAME, DIFFERENT) for label in labels])
    rng = np.random.default_rng(seed)
    runs: list[list[dict[str, Any]]] = []  # per repeat, per seed
    chosen = []
    for _ in range(repeats):
        fold = np.full(len(labels), -1)
        for label in (SAME, DIFFERENT):
            members = np.flatnonzero(np.array(labels) == label)
            rng.shuffle(members)
            fold[members] = np.arange(members.size) % folds
        called = np.zeros((len(SEEDS), len(labels)), dtype=np.bool_)
        for held in range(folds):
            index = selection.choose(np.flatnonzero(judged & (fold != held)))
            chosen.append(rules[index])
            test = np.flatnonzero(fold == held)
            for s, matrix in enumerate(selection.calls):
                called[s, test] = matrix[index, test]
        runs.append([scores(labels, row.tolist()) for row in called])
    loo = np.zeros((len(SEEDS), len(labels)), dtype=np.bool_)
    for pair in np.flatnonzero(judged):
        index = selection.choose(np.flatnonzero(judged & (np.arange(len(labels)) != pair)))
        loo[:, pair] = [matrix[index, pair] for matrix in selection.calls]
    wiki = np.array([m.wikipedia for m in measured])
    split = np.zeros((len(SEEDS), len(labels)), dtype=np.bool_)
    for test_group in (wiki, ~wiki):
        index = selection.choose(np.flatnonzero(judged & ~test_group))
        for s, matrix in enumerate(selection.calls):
            split[s, test_group] = matrix[index, test_group]
    everything = np.flatnonzero(judged)
    ties = [rules[i] for i in selection.ties(everything)]

    def mean(key: str, which: list[dict[str, Any]]) -> float:
        return round(statistics.fmean(run[key] for run in which), 3)

    flat = [run for per_seed in runs for run in per_seed]
    per_repeat_f1 = [statistics.fmean(run["f1"] for run in per_seed) for per_seed in runs]
    project = [per_seed[0] for per_seed in runs]

    def summed(calls: BoolArray) -> dict[str, Any]:
        per_seed = [scores(labels, row.tolist()) for row in calls]
        return {"f1": mean("f1", per_seed), "precision": mean("precision", per_seed),
                "recall": mean("recall", per_seed), "project_seed": per_seed[0]}

    return {
        "method": f"{repeats} x stratified {folds}-fold (seed {seed}); the rule with the best training F1 "
                  f"averaged over {len(SEEDS)} sketch seeds",
        "grid": {"radius": list(RADII), "min_length_ratio": list(RATIOS),
                 "min_resemblance": [RESEMBLANCES[0], RESEMBLANCES[-1], 0.01], "rules": len(rules)},
        "kfold": {"f1": mean("f1", flat), "f1_sd": round(statistics.pstdev(per_repeat_f1), 3),
                  "precision": mean("precision", flat), "recall": mean("recall", flat),
                  "f1_range": [round(min(per_repeat_f1), 3), round(max(per_repeat_f1), 3)],
                  "project_seed": {"f1": mean("f1", project), "precision": mean("precision", project),
                                   "recall": mean("recall", project)}},
        "leave_one_out": summed(loo),
        "wikipedia_vs_other": summed(split),
        "chosen_radius_ratio": [[f"{r} bits, ratio {q}", n] for (r, q), n in Counter(
            (rule.radius, rule.min_length_ratio) for rule in chosen).most_common(5)],
        "chosen_resemblance_median": statistics.median(rule.min_resemblance for rule in chosen),
        "all_pairs_choice": asdict(rules[selection.choose(everything)]),
        "all_pairs_ties": {"rules": len(ties),
                           "radius": sorted({r.radius for r in ties}),
                           "min_length_ratio": sorted({r.min_length_ratio for r in ties}),
                           "min_resemblance": [min(r.min_resemblance for r in ties),
                                               max(r.min_resemblance for r in ties)]},
    }


def retrieval(measured: Sequence[Measured]) -> list[dict[str, Any]]:
    """Per SimHash distance, how many pairs of each label share a key (default design, and k = 4)."""
    rows = []
    for distance in sorted({m.distance for m in measured if m.label in (SAME, DIFFERENT)}):
        row: dict[str, Any] = {"distance": distance}
        for label, name in ((SAME, "same"), (DIFFERENT, "different")):
            group = [m for m in measured if m.label == label and m.distance == distance]
            row[name] = f"{sum(m.shares_key for m in group)}/{len(group)}" if group else ""
            row[name + "_k4"] = f"{sum(m.shares_key_k4 for m in group)}/{len(group)}" if group else ""
        rows.append(row)
    return rows


# --- the second gate -------------------------------------------------------------------------------


def synthetic_gate(settings: PageSettings, rule: NearDuplicateRule) -> dict[str, Any]:
    """The labelled set of testing/neardup_set.py with the sketch decision, end to end."""
    from testing.neardup_ours import run_ours
    from testing.neardup_set import build_set, score

    pages = build_set()
    run = run_ours(pages, settings, rule)
    total = score(pages, run.matches)
    cjk = score(pages, run.matches, lambda page: page.cjk)
    other = score(pages, run.matches, lambda page: not page.cjk)
    return {"pages": len(pages), **total.as_dict(), "cjk_recall": round(cjk.recall, 4),
            "other_recall": round(other.recall, 4), "pages_per_s": round(len(pages) / run.fingerprint_s)}


# --- the report ------------------------------------------------------------------------------------


def measure(path: Path, repeats: int, synthetic: bool) -> dict[str, Any]:
    settings, rule = PageSettings(), DEFAULT_RULE
    pairs = load_pairs(path)
    labels = [pair.label for pair in pairs]
    started = time.perf_counter()
    measured, sketch_us = measure_pairs(pairs, settings)
    measure_s = time.perf_counter() - started
    systems: dict[str, list[bool]] = {
        "**ours, default settings** (tables' candidates, sketch decision)": [decide(m, rule)
                                                                             for m in measured],
        "ours, previous decision (features v1, SimHash within 3 bits)": [m.exact or m.distance_v1 <= 3
                                                                         for m in measured],
        "ours, features v2, SimHash within 3 bits": [m.exact or m.distance <= 3 for m in measured],
    }
    systems["ours, the page stage itself (offline mode, a then b)"] = stage_offline(pairs)
    peers, notes = peer_predictions(pairs)
    systems.update(peers)
    sketch_us.sort()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "command": "python -m bench.clueweb_bench" + (f" --repeats {repeats}" if repeats != 20 else ""),
        "pairs": dict(sorted(Counter(labels).items())),
        "rule": asdict(rule),
        "systems": [{"system": name, **scores(labels, called)} for name, called in systems.items()],
        "notes": notes,
        "retrieval": retrieval(measured),
        "cross_validation": cross_validate(measured, repeats) if repeats else None,
        "synthetic": synthetic_gate(settings, rule) if synthetic else None,
        "cost": {"sketch_bytes": SKETCH_BYTES, "sketch_us_median": round(statistics.median(sketch_us)),
                 "sketch_us_p90": round(sketch_us[int(0.9 * len(sketch_us))]),
                 "analysis_s_per_pair": round(measure_s / len(pairs), 4)},
        "pairs_detail": [asdict(m) for m in measured],
    }


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _table(header: Sequence[str], rows: list[str]) -> list[str]:
    return [_row(*header), "|---|" + "---:|" * (len(header) - 1), *rows, ""]


def markdown(result: dict[str, Any]) -> str:
    rule = result["rule"]
    lines = [
        "# Near-duplicate decisions on person-judged ClueWeb pairs", "",
        f"`{result['command']}`, {result['date']}, {result['machine']}. Pairs: {result['pairs']}. "
        f"Default rule: radius {rule['radius']} bits, length ratio >= {rule['min_length_ratio']}, "
        f"resemblance >= {rule['min_resemblance']} (of word 2-shingles, 32-byte sketch). Page a first, "
        "then page b as text/plain; b is a duplicate when the digests are equal or when it shares a "
        "block-table key with a and the system accepts it. bench/clueweb_bench.py says how each peer "
        "is computed.",
        "",
        *_table(("system", "precision", "recall", "F1", "TP", "FP", "FN", "label 2 called",
                 "label 1 called"),
                [_row(s["system"], s["precision"], s["recall"], s["f1"], s["tp"], s["fp"], s["fn"],
                      s["label_2"], s["label_1"]) for s in result["systems"]]),
        *[f"Note: {note}" for note in result["notes"]],
        "## Which pairs the block tables bring up", "",
        "Pairs sharing a key with the default design (10 tables of 2 of 5 blocks) and with the k = 4 "
        "design for 10^7 pages (35 tables), by SimHash distance (features version 2):", "",
        *_table(("bits", "same content", "same content, k = 4", "different content", "different, k = 4"),
                [_row(r["distance"], r["same"], r["same_k4"], r["different"], r["different_k4"])
                 for r in result["retrieval"]]),
    ]
    cv = result["cross_validation"]
    if cv:
        kfold, loo, split = cv["kfold"], cv["leave_one_out"], cv["wikipedia_vs_other"]
        ties = cv["all_pairs_ties"]
        lines += [
            "## Cross-validation of the rule selection", "",
            f"{cv['method']}; grid {cv['grid']['rules']} rules. Held-out F1 {kfold['f1']} "
            f"(sd {kfold['f1_sd']} over repeats, range {kfold['f1_range'][0]}-{kfold['f1_range'][1]}), "
            f"precision {kfold['precision']}, recall {kfold['recall']} (the project's sketch seed alone: "
            f"F1 {kfold['project_seed']['f1']}, precision {kfold['project_seed']['precision']}, recall "
            f"{kfold['project_seed']['recall']}). Leave-one-out: F1 {loo['f1']}, "
            f"precision {loo['precision']}, recall {loo['recall']}. Chosen on Wikipedia pairs and tested "
            f"on the others and the reverse: F1 {split['f1']}, precision {split['precision']}, recall "
            f"{split['recall']}.", "",
            f"Most chosen (radius, length ratio): {cv['chosen_radius_ratio']}; median resemblance "
            f"threshold chosen {cv['chosen_resemblance_median']}. On all pairs the procedure picks "
            f"{cv['all_pairs_choice']}, tied with {ties['rules']} rules: radius {ties['radius']}, "
            f"ratio {ties['min_length_ratio']}, resemblance {ties['min_resemblance'][0]}-"
            f"{ties['min_resemblance'][1]}.", ""]
    synthetic = result["synthetic"]
    if synthetic:
        lines += ["## Second gate: the labelled set (testing/neardup_set.py), sketch decision", "",
                  f"{synthetic['pages']} pages: precision {synthetic['precision']}, "
                  f"recall {synthetic['recall']}, "
                  f"F1 {synthetic['f1']}, CJK recall {synthetic['cjk_recall']}, other recall "
                  f"{synthetic['other_recall']} ({synthetic['fp']} false positives; "
                  f"{synthetic['pages_per_s']} pages/s through analyze_page).", ""]
    cost = result["cost"]
    lines += ["## Cost", "",
              f"Sketch: {cost['sketch_bytes']} bytes a page (32 of bins, 4 of shingle count); computing it "
              f"took a median {cost['sketch_us_median']} µs (p90 {cost['sketch_us_p90']} µs) on these "
              "texts.", ""]
    return "\n".join(lines)


def check(result: dict[str, Any]) -> list[str]:
    """The acceptance figures that fail (none: all pass)."""
    ours = result["systems"][0]
    failures = []
    stage = next(row for row in result["systems"] if row["system"].startswith("ours, the page stage itself"))
    if (stage["tp"], stage["fp"], stage["fn"]) != (ours["tp"], ours["fp"], ours["fn"]):
        failures.append(f"the stage's offline verdicts differ from the decision measured: {stage}, {ours}")
    if ours["f1"] < MIN_F1 or ours["precision"] < MIN_PRECISION:
        failures.append(f"ClueWeb pairs at the default settings: F1 {ours['f1']}, precision "
                        f"{ours['precision']} (need {MIN_F1} and {MIN_PRECISION})")
    synthetic = result["synthetic"]
    if synthetic and (synthetic["f1"] < MIN_SYNTHETIC_F1 or synthetic["cjk_recall"] < MIN_CJK_RECALL):
        failures.append(f"labelled set: F1 {synthetic['f1']}, CJK recall {synthetic['cjk_recall']} "
                        f"(need {MIN_SYNTHETIC_F1} and {MIN_CJK_RECALL})")
    return failures


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="the judged pairs (JSON lines)")
    parser.add_argument("--repeats", type=int, default=20,
                        help="repeats of the 5-fold cross-validation (0: none)")
    parser.add_argument("--no-synthetic", action="store_true", help="skip the labelled set (about a minute)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where clueweb.json and .md go")
    args = parser.parse_args(argv)
    if not args.pairs.is_file():
        out(f"skipped: no judged pairs at {args.pairs} (the shared corpus is absent)")
        return 0
    result = measure(args.pairs, args.repeats, not args.no_synthetic)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "clueweb.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    report = markdown(result)
    (args.results / "clueweb.md").write_text(report + "\n", encoding="utf-8")
    out(report)
    failures = check(result)
    for failure in failures:
        out(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
