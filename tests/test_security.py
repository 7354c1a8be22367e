"""Security rules that can be checked on the source and the file system (issue 7, item 5).

- Nothing that can run code from data: no pickle, marshal, shelve, dill or cloudpickle import, no
  ``eval``/``exec``/``compile`` call, no ``numpy.load(allow_pickle=True)``, anywhere in the package.
  (``streams.runtime.parallel`` hands bytes to its child processes over pipes; multiprocessing
  pickles only the child's start-up arguments, which are ours, never a topic's; fastjsonschema
  compiles validators from the project's own schema files, never from a record.)
- Endpoints bind loopback unless configured.
- State directories are created owner-only, parents included.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from streams import config
from streams.runtime.store import RocksStore, private_dir

PACKAGE = Path(__file__).resolve().parent.parent / "streams"
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append(str(node.module))
        elif isinstance(node, ast.Call):
            if _builtin_called(node.func) in FORBIDDEN_CALLS:
                name = _builtin_called(node.func)
                found.append(f"{name}() at line {node.lineno}")
            found += [f"allow_pickle at line {node.lineno}" for keyword in node.keywords
                      if keyword.arg == "allow_pickle"]
    return [f"{path.relative_to(PACKAGE.parent)}: {item}" for item in found]


def _builtin_called(func: ast.expr) -> str:
    """``eval(...)`` or ``builtins.eval(...)``; ``re.compile`` and other methods are not builtins."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "builtins":
        return func.attr
    return ""


def test_the_scan_sees_the_whole_package() -> None:
    assert len(_sources()) > 40


@pytest.mark.parametrize("source", [
    "import pickle", "from marshal import loads", "eval(data)", "builtins.exec(code)",
    "compile(s, f, 'exec')", "numpy.load(f, allow_pickle=True)", "import dill.settings",
])
def test_the_scan_finds_what_it_forbids(tmp_path: Path, source: str) -> None:
    sample = PACKAGE / "__scan_probe__.py"
    sample.write_text(source + "\n")
    try:
        assert _violations(sample)
    finally:
        sample.unlink()


def test_no_pickle_marshal_or_eval_in_the_package() -> None:
    assert [v for path in _sources() for v in _violations(path)] == []


def test_endpoints_bind_loopback_by_default() -> None:
    assert config.MetricsSettings().host == "127.0.0.1"


def test_state_directories_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = RocksStore(tmp_path / "state" / "app" / "stage" / "worker" / "shard-0000")
        store.close()
        private_dir(tmp_path / "other" / "deeper")
    finally:
        os.umask(old)
    created = [p for p in (tmp_path / "state").rglob("*") if p.is_dir()] + [tmp_path / "state",
                                                                             tmp_path / "other"]
    assert created
    for directory in created:
        assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0, directory
