"""``make lint``: who may import what, beyond "no circles" (tools/import_cycles.py).

1. Everything outside ``streams/runtime/`` uses the runtime through its public modules only; the
   rest of ``streams/runtime/`` is the runtime's own, free to change shape (Kafka Streams keeps 14
   public files in ``processor/api/`` against 139 in ``processor/internals/`` for the same reason):

   - ``streams/runtime/api.py``, the stage contract, and ``streams/runtime/extras.py``, what a
     stage may use beyond it (a store of its own kind, child processes, the cluster for its own
     commands): all a stage (``streams/stages/``) may import;
   - ``streams/runtime/admin.py``, cluster administration (Kafka settings and reading, topics,
     running a stage, reshard): for the command line and everything else outside the stages;
   - ``streams/runtime/snapshot.py``, what a running worker publishes (its facts, totals,
     lifecycle, stores): for ``ops/`` (metrics, probes, ``/status``) and the command line that
     installs them.

2. Development code stays development code: nothing in the package imports ``streams.dev`` (the
   demo and its simulated web) but the command line, for its ``demo`` command.

3. The stage contract holds what stages use: every name ``streams/runtime/api.py`` (and
   ``extras.py``) exports is imported from it by a module of the package outside the runtime (a
   name nothing uses is a promise nobody asked for, kept up in every later change of the runtime).

Every import counts, at module level or inside a function, found as tools/import_cycles.py finds
them.

    python tools/import_rules.py streams
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

RUNTIME = "streams.runtime"
API, EXTRAS, ADMIN, SNAPSHOT = (f"{RUNTIME}.{name}" for name in ("api", "extras", "admin", "snapshot"))
# The runtime modules an importer outside the runtime may use: the first prefix it starts with
# decides; a module no prefix names (integrations, spec, broker, pages, top-level modules...) gets
# OTHERS.
SURFACES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("streams.stages", (API, EXTRAS)),
    ("streams.ops", (API, EXTRAS, ADMIN, SNAPSHOT)),
    ("streams.cli", (API, EXTRAS, ADMIN, SNAPSHOT)),
)
OTHERS = (API, EXTRAS, ADMIN)
DEV = "streams.dev"
DEV_USERS = ("streams.dev", "streams.cli")


def surface(name: str) -> tuple[str, ...]:
    """The runtime modules ``name`` (a module outside the runtime) may import."""
    return next((allowed for prefix, allowed in SURFACES if _within(name, prefix)), OTHERS)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _cycles_tool() -> ModuleType:
    path = Path(__file__).with_name("import_cycles.py")
    spec = importlib.util.spec_from_file_location("import_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _imports(package: Path) -> list[tuple[str, str]]:
    """(module, module it imports) for every import between modules of ``package``."""
    tool = _cycles_tool()
    known = tool.modules(package)
    return [(name, target) for name, path in known.items()
            for target in sorted(tool.imported(name, path, known))]


def reaching_in(package: Path) -> list[tuple[str, str]]:
    """(module, runtime module) for every import of the runtime's insides from outside it: a module
    the importer's surface (:func:`surface`) does not list."""
    return [(name, target) for name, target in _imports(package)
            if not _within(name, RUNTIME) and _within(target, RUNTIME) and target not in surface(name)]


def dev_users(package: Path) -> list[tuple[str, str]]:
    """(module, dev module) for every import of development code by the rest of the package."""
    return [(name, target) for name, target in _imports(package)
            if (target == DEV or target.startswith(DEV + ".")) and not name.startswith(DEV_USERS)]


def unused_contract(package: Path, module: str = "api") -> list[str]:
    """The names ``runtime/<module>.py`` exports (its ``__all__``) that no module outside the runtime
    imports from it (``from streams.runtime.<module> import X``, anywhere in the module)."""
    api_path = package / "runtime" / f"{module}.py"
    exported: list[str] = []
    for node in ast.parse(api_path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            exported = list(ast.literal_eval(node.value))
    imported: set[str] = set()
    for path in package.rglob("*.py"):
        if (package / "runtime") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == f"{RUNTIME}.{module}":
                imported.update(alias.name for alias in node.names)
    return [name for name in exported if name not in imported]


def main(argv: list[str]) -> int:
    package = Path(argv[1] if len(argv) > 1 else "streams")
    found = [f"{name} imports {target}: the runtime's own; import it from {' or '.join(surface(name))}"
             for name, target in reaching_in(package)]
    found += [f"{name} imports {target}: development code, for the demo and the tests only"
              for name, target in dev_users(package)]
    found += [f"{RUNTIME}.{module} exports {name}, which nothing outside the runtime imports: drop it"
              for module in ("api", "extras") for name in unused_contract(package, module)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
