"""The web-platform-tests URL suite (tests/data/wpt/urltestdata.json): the cases browsers run.

Every case a browser resolves to an http(s) URL: the canonical form of the input, resolved against
its base, is the canonical form of the browser's ``href``. Every case a browser refuses: an
``invalid_url`` rejection (a dead letter in the stage). The exceptions are listed, with the rule
of docs/canonicalization.md that makes them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from streams.errors import RecordRejected
from streams.urls.canonical import DEFAULT, CanonicalSettings, canonicalize

DATA = Path(__file__).resolve().parents[1] / "data" / "wpt"
CASES: list[dict[str, Any]] = [case for case in json.loads((DATA / "urltestdata.json").read_text("utf-8"))
                               if isinstance(case, dict)]  # strings in the list are comments
RESOLVED = [case for case in CASES
            if not case.get("failure") and case["href"].startswith(("http:", "https:"))]
REFUSED = [case for case in CASES if case.get("failure")]
# Hosts of dots only: empty once trailing dots are removed (rule 5), so no resolver can look them up.
EXCEPTIONS = {"http://./", "http://../"}
AGGRESSIVE = CanonicalSettings(profile="aggressive")


def _canonical(url: str, base: str | None, settings: CanonicalSettings) -> str:
    try:
        return canonicalize(url, settings, base=base)
    except RecordRejected as rejected:
        return f"rejected: {rejected.reason}"


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['input']!r} on {case['base']!r}"


def test_the_vendored_file_is_the_one_named_in_its_readme() -> None:
    digest = hashlib.sha256((DATA / "urltestdata.json").read_bytes()).hexdigest()
    assert digest in (DATA / "README.md").read_text("utf-8")
    assert len(RESOLVED) == 247 and len(REFUSED) == 267


@pytest.mark.parametrize("settings", [DEFAULT, AGGRESSIVE], ids=["safe", "aggressive"])
@pytest.mark.parametrize("case", RESOLVED, ids=_case_id)
def test_a_url_browsers_resolve_gets_the_canonical_form_of_their_href(
        case: dict[str, Any], settings: CanonicalSettings) -> None:
    expected = _canonical(case["href"], None, settings)
    if case["input"] in EXCEPTIONS:
        assert expected == "rejected: invalid_url"
        return
    assert not expected.startswith("rejected")
    assert _canonical(case["input"], case["base"], settings) == expected


@pytest.mark.parametrize("case", REFUSED, ids=_case_id)
def test_a_url_browsers_refuse_is_invalid(case: dict[str, Any]) -> None:
    assert _canonical(case["input"], case["base"], DEFAULT) == "rejected: invalid_url"


def test_agreement_figure_in_the_docs() -> None:
    agreeing = sum(1 for case in RESOLVED if case["input"] not in EXCEPTIONS)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "canonicalization.md").read_text("utf-8")
    assert f"**{agreeing} of {len(RESOLVED)} ({agreeing / len(RESOLVED):.3f})**" in doc
    assert f"{len(REFUSED)} of {len(REFUSED)}" in doc
