"""Which modules run compiled (mypyc, see ``setup.py``), and the refusal of a stale compiled module.

An editable install (``make``, ``pip install -e .``) puts each compiled module's extension beside
its source, and Python imports an extension before a ``.py`` of the same name. After an edit, the
old compiled code would run and the edit be silently ignored: tests passing on code that is not the
code in the tree. So importing :mod:`streams` compares each compiled source's SHA-256 with the one
its extension was built from (``streams/_compiled.py``, written by ``setup.py``) and raises
:class:`~streams.errors.BuildError` on a difference, naming the fix. Hashing the dozen sources
costs well under a millisecond; modification times would be cheaper but wrong after a checkout.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from streams.errors import BuildError

PACKAGE_DIR = Path(__file__).resolve().parent
EXTENSION_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def built_sources() -> dict[str, str]:
    """Module name -> SHA-256 of the source it was compiled from; empty for a pure-Python build."""
    try:
        manifest = importlib.import_module("streams._compiled")
    except ImportError:
        return {}
    sources: dict[str, str] = manifest.SOURCES
    return sources


def stale_modules(sources: Mapping[str, str], root: Path = PACKAGE_DIR.parent) -> list[str]:
    """The modules of ``sources`` whose extension sits beside a source with another SHA-256."""
    stale = []
    for name, digest in sources.items():
        source = root / (name.replace(".", "/") + ".py")
        extension = source.with_name(source.stem + EXTENSION_SUFFIX)
        if extension.exists() and source.exists() and _sha256(source) != digest:
            stale.append(name)
    return stale


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refuse_stale_build() -> None:
    stale = stale_modules(built_sources())
    if stale:
        raise BuildError(
            f"{', '.join(stale)}: compiled from an older version of the source; rebuild with 'make' (or "
            "'pip install -e .'), or build without compiling: CRAWL_DEDUP_PURE_PYTHON=1 pip install -e .")


def compiled_modules() -> list[str]:
    """The modules that run compiled in this process (for the start-up log and the tests): those
    the import system finds as an extension. Found, not imported: importing every one made a
    worker import the other stages' modules, and numpy with the page stage's, at each start
    (docs/benchmarks.md has what it cost)."""
    found = []
    for name in built_sources():
        spec = importlib.util.find_spec(name)
        if spec is not None and (spec.origin or "").endswith(EXTENSION_SUFFIX):
            found.append(name)
    return found
