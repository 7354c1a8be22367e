"""``make lint``: stages and integrations use the runtime through its public surface only.

``streams/runtime/api.py`` is what a stage or an integration may import of ``streams/runtime/``;
the rest is the runtime's own, free to change shape (Kafka Streams keeps 14 public files in
``processor/api/`` against 139 in ``processor/internals/`` for the same reason). Every import
counts, at module level or inside a function, found as tools/import_cycles.py finds them.

    python tools/runtime_api.py streams
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PUBLIC = "streams.runtime.api"
CLIENTS = ("streams.stages", "streams.integrations")  # who must keep to it


def _cycles_tool() -> ModuleType:
    path = Path(__file__).with_name("import_cycles.py")
    spec = importlib.util.spec_from_file_location("import_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reaching_in(package: Path) -> list[tuple[str, str]]:
    """(module, runtime module) for every import of the runtime's insides by a stage or integration."""
    tool = _cycles_tool()
    known = tool.modules(package)
    found = []
    for name, path in known.items():
        if not name.startswith(CLIENTS):
            continue
        for target in sorted(tool.imported(name, path, known)):
            if target.startswith("streams.runtime.") and target != PUBLIC:
                found.append((name, target))
    return found


def main(argv: list[str]) -> int:
    found = reaching_in(Path(argv[1] if len(argv) > 1 else "streams"))
    for name, target in found:
        print(f"{name} imports {target}: import it from {PUBLIC}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
