"""tools/import_cycles.py, which `make lint` runs: it finds circles however the imports are written."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str = "import_cycles") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize(("files", "expected"), [
    ({"a.py": "import pkg.b\n", "b.py": "x = 1\n"}, []),
    ({"a.py": "from pkg import b\n", "b.py": "from pkg.a import x\n"}, [["pkg.a", "pkg.b"]]),
    ({"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"}, [["pkg.a", "pkg.b"]]),
    ({"sub/__init__.py": "from pkg.sub import c\n", "sub/c.py": "import pkg.sub\n"}, []),
    ({"a.py": "from pkg.b import x\n", "b.py": "from pkg.c import y\n", "c.py": "import pkg.a\n"},
     [["pkg.a", "pkg.b", "pkg.c"]]),
], ids=["no-circle", "two", "relative-and-in-a-function", "parent-init-is-no-edge", "three"])
def test_circles_found(tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    tool = _tool()
    known = tool.modules(_package(tmp_path, files))
    assert tool.circles({name: tool.imported(name, path, known) for name, path in known.items()}) == expected


def test_the_package_has_no_circle() -> None:
    assert _tool().main(["import_cycles", str(ROOT / "streams")]) == 0


STAGE_CODE = ("streams.stages", "streams.urls", "streams.pages", "streams.url_dedup", "streams.content_seen",
              "streams.revisit", "streams.registry", "streams.spec", "streams.cli")


def test_the_runtime_imports_no_stage() -> None:
    """streams/runtime/ is the stages' runtime, not theirs: nothing in it imports stage code."""
    tool = _tool()
    known = tool.modules(ROOT / "streams")
    reached = {(name, target) for name, path in known.items() if name.startswith("streams.runtime")
               for target in tool.imported(name, path, known) if target.startswith(STAGE_CODE)}
    assert reached == set()


def test_the_modules_the_design_card_names_are_the_stages() -> None:
    from streams import content_seen, revisit, url_dedup
    from streams.stages.content_seen.stage import ContentSeenStage
    from streams.stages.revisit.stage import RevisitStage
    from streams.stages.url_dedup.stage import UrlDedupStage

    assert (url_dedup.UrlDedupStage, content_seen.ContentSeenStage, revisit.RevisitStage) == (
        UrlDedupStage, ContentSeenStage, RevisitStage)


@pytest.mark.parametrize(("files", "expected"), [
    ({"stages/a.py": "from streams.runtime.api import Emit\n"}, []),
    ({"stages/a.py": "from streams.runtime.batch import Emit\n"},
     [("streams.stages.a", "streams.runtime.batch")]),
    ({"stages/a.py": "from streams.runtime.admin import KafkaConfig\n"},
     [("streams.stages.a", "streams.runtime.admin")]),
    ({"integrations/h.py": "def f():\n    from streams.runtime import kafka_io\n"},
     [("streams.integrations.h", "streams.runtime.kafka_io")]),
    ({"ops/m.py": "from streams.runtime.engine import Engine\n"},
     [("streams.ops.m", "streams.runtime.engine")]),
    ({"ops/m.py": "from streams.runtime.snapshot import Published\n"}, []),
    ({"dev/d.py": "from streams.runtime.snapshot import Published\n"},
     [("streams.dev.d", "streams.runtime.snapshot")]),
    ({"cli.py": "from streams.runtime.admin import run_stage\n"}, []),
    ({"spec.py": "from streams.runtime.topology import Topology\n"},
     [("streams.spec", "streams.runtime.topology")]),
    ({"runtime/engine.py": "from streams.runtime.batch import Emit\n"}, []),  # the runtime's own
], ids=["through-the-api", "reaching-in", "admin-in-a-stage", "in-a-function", "ops-reaching-in",
        "ops-through-the-snapshot", "snapshot-outside-ops", "cli-through-admin", "top-level-module",
        "inside-the-runtime"])
def test_reaching_into_the_runtime_is_found(tmp_path: Path, files: dict[str, str],
                                            expected: list[tuple[str, str]]) -> None:
    package = tmp_path / "streams"
    for name, text in {"runtime/api.py": "", "runtime/admin.py": "", "runtime/snapshot.py": "",
                       "runtime/batch.py": "", "runtime/kafka_io.py": "", "runtime/engine.py": "",
                       "runtime/topology.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert _tool("import_rules").reaching_in(package) == expected


def test_the_package_uses_the_runtime_through_its_public_modules_only() -> None:
    """Stages through streams/runtime/api.py, the rest through api, admin and snapshot as
    tools/import_rules.py allows them (make lint)."""
    assert _tool("import_rules").reaching_in(ROOT / "streams") == []


def test_development_code_is_imported_by_the_demo_command_alone() -> None:
    """streams.dev (the demo, the simulated web) ships in the package but runs nowhere else."""
    assert _tool("import_rules").dev_users(ROOT / "streams") == []


@pytest.mark.parametrize(("files", "expected"), [
    ({"stages/a.py": "from streams.runtime.api import Emit, Stage\n"}, []),
    ({"stages/a.py": "def f():\n    from streams.runtime.api import Emit\n"}, ["Stage"]),
    ({"runtime/engine.py": "from streams.runtime.api import Emit, Stage\n"}, ["Emit", "Stage"]),
], ids=["all-used", "one-unused", "used-by-the-runtime-alone"])
def test_a_contract_name_nothing_imports_is_found(tmp_path: Path, files: dict[str, str],
                                                  expected: list[str]) -> None:
    package = tmp_path / "streams"
    for name, text in {"runtime/api.py": '__all__ = ["Emit", "Stage"]\n', **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert _tool("import_rules").unused_contract(package) == expected


def test_every_name_of_the_stage_contract_is_used() -> None:
    assert _tool("import_rules").unused_contract(ROOT / "streams") == []
