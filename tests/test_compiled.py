"""The compiled hot path (setup.py, streams/compiled.py): what runs is what is in the tree.

- A compiled module whose source changed since its build is refused, naming the fix.
- In a compiled build, every module setup.py lists runs compiled (the tests test that code), and
  the Makefile's rebuild trigger covers exactly those sources.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from pathlib import Path

import pytest

from streams import compiled
from streams.errors import BuildError

ROOT = Path(__file__).resolve().parent.parent


def _setup_list() -> list[str]:
    """setup.py's COMPILED tuple, read without running setup.py."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED":
            return [element.value for element in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("setup.py has no COMPILED")


def _fake_build(root: Path, source_text: str, built_from: str) -> dict[str, str]:
    package = root / "pkg"
    package.mkdir()
    (package / "hot.py").write_text(source_text)
    (package / f"hot{compiled.EXTENSION_SUFFIX}").write_bytes(b"")
    return {"pkg.hot": hashlib.sha256(built_from.encode()).hexdigest()}


@pytest.mark.parametrize(("source", "built_from", "stale"), [
    ("x = 1\n", "x = 1\n", []),              # built from this very source
    ("x = 2\n", "x = 1\n", ["pkg.hot"]),     # edited after the build
])
def test_a_module_compiled_from_another_source_is_stale(tmp_path: Path, source: str, built_from: str,
                                                         stale: list[str]) -> None:
    assert compiled.stale_modules(_fake_build(tmp_path, source, built_from), root=tmp_path) == stale


def test_without_its_extension_a_module_is_never_stale(tmp_path: Path) -> None:
    sources = _fake_build(tmp_path, "x = 2\n", "x = 1\n")
    (tmp_path / "pkg" / f"hot{compiled.EXTENSION_SUFFIX}").unlink()  # a pure-Python build removed it
    assert compiled.stale_modules(sources, root=tmp_path) == []


def test_a_stale_build_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled, "stale_modules", lambda sources: ["streams.urls.canonical"])
    with pytest.raises(BuildError, match=r"streams\.urls\.canonical.*make"):
        compiled.refuse_stale_build()


def test_a_compiled_build_compiles_every_listed_module() -> None:
    built = compiled.built_sources()
    if not built:
        pytest.skip("a pure-Python build (CRAWL_DEDUP_PURE_PYTHON=1)")
    listed = [path.removesuffix(".py").replace("/", ".") for path in _setup_list()]
    assert sorted(built) == sorted(listed)
    assert compiled.compiled_modules() == list(built)


def test_the_makefile_rebuilds_when_any_compiled_source_changes() -> None:
    """The Makefile greps setup.py for the sources its install depends on: the same list."""
    printed = subprocess.run(["make", "-s", "--eval", "print-compiled: ; @echo $(COMPILED_SOURCES)",
                              "print-compiled"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert printed.stdout.split() == _setup_list()
