"""Decision records are cited by number (README, docstrings, other records): each number once."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions"


def test_each_decision_number_is_used_once_and_its_title_says_it() -> None:
    names = sorted(path.name for path in DECISIONS.glob("*.md"))
    numbers = Counter(name[:4] for name in names)
    assert names and all(re.fullmatch(r"\d{4}-[a-z0-9-]+\.md", name) for name in names), names
    assert [number for number, count in numbers.items() if count > 1] == []
    for name in names:
        first_line = (DECISIONS / name).read_text(encoding="utf-8").splitlines()[0]
        assert first_line.startswith(f"# {name[:4]}:"), (name, first_line)
