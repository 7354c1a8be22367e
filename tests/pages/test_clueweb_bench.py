"""The judged ClueWeb pairs (testing/clueweb.py, which bench/clueweb_bench.py reports on): the
acceptance figures of issue 19 at the default settings, and the scoring and rule selection on small
made-up cases.

The pairs are read from ``../shared/corpus/copycat-clueweb``; the test that needs them is skipped when
they are absent. Analysing the 165 judged pairs takes a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streams.pages.analyze import PageSettings
from streams.pages.sketch import DEFAULT_RULE, NearDuplicateRule
from testing.cli import PROJECT_ROOT
from testing.clueweb import PAIRS, Measured, Selection, call_matrix, decide, load_pairs, measure_pairs, scores


def test_default_settings_on_the_judged_pairs() -> None:
    if not PAIRS.is_file():
        pytest.skip(f"the judged pairs are absent ({PAIRS})")
    pairs = load_pairs()
    assert sorted({pair.label for pair in pairs}) == ["0.5", "1", "2", "3"]
    measured, _ = measure_pairs(pairs, PageSettings())
    result = scores([m.label for m in measured], [decide(m, DEFAULT_RULE) for m in measured])
    assert (result["tp"] + result["fn"], len(measured)) == (44, 165)
    assert result["f1"] >= 0.90 and result["precision"] >= 0.90, result
    # the benchmark's decision is the module's is_near_duplicate on what the tables bring up
    assert all(decide(m, DEFAULT_RULE) == (m.exact or (m.shares_key and m.accepted)) for m in measured)


def test_the_benchmark_skips_cleanly_without_the_pairs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    command = [sys.executable, "-m", "bench.clueweb_bench", "--pairs", str(tmp_path / "none.jsonl"),
               "--results", str(results)]
    ran = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120, check=False)
    assert ran.returncode == 0 and ran.stdout.startswith("skipped") and not list(results.iterdir())


def _measured(label: str, distance: int, ratio: float, resemblance: float, key: bool = True) -> Measured:
    return Measured(label=label, wikipedia=False, exact=False, distance=distance, shares_key=key,
                    shares_key_k4=key, resemblance=resemblance, length_ratio=ratio, accepted=False,
                    distance_v1=distance, resemblances=(resemblance,))


def test_scores_count_the_same_content_class_and_partial_calls() -> None:
    labels = ["3", "3", "0.5", "0.5", "2", "1"]
    result = scores(labels, [True, False, True, False, True, False])
    assert (result["tp"], result["fp"], result["fn"]) == (1, 1, 1)
    assert result["precision"] == result["recall"] == result["f1"] == 0.5
    assert (result["label_2"], result["label_1"]) == ("1/1", "0/1")


def test_a_pair_is_decided_as_the_probe_sees_it() -> None:
    rule = NearDuplicateRule(radius=8, min_resemblance=0.7, min_length_ratio=0.9)
    assert decide(_measured("3", 8, 0.9, 0.7), rule)
    assert not decide(_measured("3", 9, 1.0, 1.0), rule)
    assert not decide(_measured("3", 0, 1.0, 1.0, key=False), rule)  # the tables never bring it up
    assert not decide(_measured("3", 0, 0.89, 1.0), rule) and not decide(_measured("3", 0, 1.0, 0.69), rule)


def test_selection_takes_the_best_f1_then_precision_then_the_middle() -> None:
    measured = [_measured("3", 2, 0.99, 0.95), _measured("3", 4, 0.97, 0.9),
                _measured("0.5", 1, 0.99, 0.85), _measured("0.5", 9, 0.7, 0.9)]
    rules = [NearDuplicateRule(10, t, 0.0) for t in (0.8, 0.86, 0.88, 0.9, 0.95)]
    selection = Selection([call_matrix(measured, rules)], [m.label for m in measured])
    everything = np.arange(4)
    assert selection.ties(everything) == [1, 2, 3]  # 0.86-0.9: both same pairs, one other (F1 0.8)
    assert rules[selection.choose(everything)].min_resemblance == 0.88
