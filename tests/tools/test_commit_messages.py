"""tools/commit_messages.py, which `make lint` runs on the commits a branch adds."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("commit_messages", ROOT / "tools" / "commit_messages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("message", "expected"), [
    ("runtime: typed records on internal topics\n\nSo no stage tells kinds apart.\n", []),
    ("x" * 72 + "\n\nwhy\n", []),
    ("x" * 73 + "\n\nwhy\n", ["subject of 73 characters (at most 72)"]),
    ("runtime: typed records\n", ["no body: say why below the subject"]),
    ("runtime: typed records\nwhy, on the next line\n", ["no blank line after the subject"]),
    ("wip: lint\n\nmore to come\n", ["a wip commit: squash it"]),
    ("# a comment git strips\nsubject\n\nbody\n", []),
    ("", ["no subject", "no body: say why below the subject"]),
], ids=["fine", "72", "73", "no-body", "no-blank-line", "wip", "comment", "empty"])
def test_messages_are_judged(message: str, expected: list[str]) -> None:
    assert _tool().problems(message) == expected


def test_as_a_commit_msg_hook(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("tools: a commit-msg check\n\nSubjects stay readable in git log --oneline.\n")
    bad.write_text("x" * 80 + "\n")
    assert (_tool().main(["--hook", str(good)]), _tool().main(["--hook", str(bad)])) == (0, 1)
