"""``make lint``: fail when the package's modules import each other in a circle.

Every import counts, at module level or inside a function: an import moved into a function to
dodge a circle still ties the two modules together (the reader of either must read both, and
neither can be tested alone). Imports of a package's parent ``__init__`` are not edges (Python
runs it first anyway). The circles are the strongly connected components of the import graph
(Tarjan 1972, "Depth-first search and linear graph algorithms"), found without running any code.

    python tools/import_cycles.py streams
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module under ``package``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {target for target in targets if target in known and target != name and target not in parents}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def main(argv: list[str]) -> int:
    known = modules(Path(argv[1] if len(argv) > 1 else "streams"))
    found = circles({name: imported(name, path, known) for name, path in known.items()})
    for component in found:
        print("import circle: " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
