"""Build step: compile the per-record hot path with mypyc; everything else stays interpreted.

Why: the URL stage spends most of its time in Python between Kafka calls (decoding, canonicalizing,
fingerprinting, routing, the Bloom filter, the engine's batch loop), a few microseconds a record.
mypyc (mypy's compiler, as used by black and mypy itself) turns these modules, unchanged and
already type-checked with ``mypy --strict``, into C extensions: one source, no second
implementation to keep in step. docs/decisions/0002-compiled-hot-path.md has the measurements.
Two habits keep compiled code fast: module constants are declared ``Final`` (read from C statics
instead of the module's dict), and integer arithmetic stays within machine words (mypyc multiplies
without allocating only factors under 2^30: see streams/runtime/partitioner.py and the Bloom
filter's probes).

``CRAWL_DEDUP_PURE_PYTHON=1`` builds without compiling (no C compiler needed; slower), and removes
the extensions an earlier compiled build left in the source tree, so an editable install never
mixes the two. A compiled build records the SHA-256 of each compiled source in
``streams/_compiled.py``; importing ``streams`` refuses an extension built from another version
of its source (:mod:`streams.compiled`), so an edited module never runs as its stale compiled copy.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent
# The modules every record passes through, and what they call per record. Not here: modules whose
# classes are read for their declared types (settings, streams.config), those with runtime_checkable
# protocols (streams.runtime.stage, streams.runtime.store), and code that runs once per batch or
# less, where compiling would save nothing. The page stage's modules are those a page's shard records
# go through (routing, probes, replies, the gather queue, the decision); its analysis is numpy's.
COMPILED = (
    "streams/plain.py",
    "streams/records.py",
    "streams/stages/url_dedup/stage.py",
    "streams/runtime/batch.py",
    "streams/runtime/commit.py",
    "streams/runtime/counters.py",
    "streams/runtime/engine.py",
    "streams/runtime/local_path.py",
    "streams/runtime/outputs.py",
    "streams/runtime/partitioner.py",
    "streams/stages/url_dedup/routing_memory.py",
    "streams/stages/url_dedup/bloom.py",
    "streams/stages/url_dedup/bloom_store.py",
    "streams/urls/canonical.py",
    "streams/urls/host.py",
    "streams/stages/content_seen/buckets.py",
    "streams/stages/content_seen/probe.py",
    "streams/stages/content_seen/gather.py",
    "streams/stages/content_seen/waiting.py",
    "streams/stages/content_seen/horizon.py",
    "streams/stages/content_seen/route.py",
    "streams/stages/content_seen/shard_records.py",
    "streams/stages/content_seen/payloads.py",
    "streams/stages/content_seen/last_verdicts.py",
    "streams/stages/content_seen/decide.py",
    "streams/stages/content_seen/relay.py",
    "streams/stages/content_seen/local.py",
)
MANIFEST = ROOT / "streams" / "_compiled.py"
GROUP = "streams_native"


def _pure_python() -> bool:
    return os.environ.get("CRAWL_DEDUP_PURE_PYTHON", "") not in ("", "0")


def _extension_path(source: str) -> Path:
    return ROOT / (source.removesuffix(".py") + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def _write_manifest() -> None:
    lines = "".join(f"    {path.removesuffix('.py').replace('/', '.')!r}: "
                    f"{hashlib.sha256((ROOT / path).read_bytes()).hexdigest()!r},\n" for path in COMPILED)
    MANIFEST.write_text('"""Written by setup.py: each module compiled with mypyc, and the SHA-256 of the '
                        'source it was\nbuilt from (see streams/compiled.py). Not in git."""\n\n'
                        f"SOURCES = {{\n{lines}}}\n")


def _remove_compiled() -> None:
    shared = ROOT.glob(f"{GROUP}__mypyc.*")  # the mypyc runtime and every module's code, one library
    for path in [MANIFEST, *shared, *(_extension_path(source) for source in COMPILED)]:
        path.unlink(missing_ok=True)


# The setup commands that only describe the package: a PEP 517 front end runs this file once for
# each hook (the build's requirements, the metadata, the sdist, then the build), and compiling for
# the descriptive ones ran mypyc's type check and C generation, about 13 s of CPU, for nothing:
# twice in every editable install, three times in every sdist-then-wheel build.
DESCRIBING = frozenset({"egg_info", "dist_info", "sdist"})


def _describing_only() -> bool:
    commands = [argument for argument in sys.argv[1:] if not argument.startswith("-")]
    return bool(commands) and commands[0] in DESCRIBING and not set(commands) & {"build_ext", "build"}


def _extensions() -> list[object]:
    if _pure_python():
        _remove_compiled()
        return []
    if _describing_only():
        return []
    from mypyc.build import mypycify

    _write_manifest()
    # Compiled before the package's dependencies are installed (pip builds first): mypyc's own type
    # check must not need them, so it reads no mypy configuration and takes the missing ones as Any.
    # The strict check of these sources is `make lint`'s, with everything installed.
    options = ["--config-file=", "--ignore-missing-imports"]
    return list(mypycify([*options, *COMPILED], opt_level="3", debug_level="0", group_name=GROUP))


# What the package reads at run time travels inside it, read with importlib.resources: the record
# schemas, whose one source is the top-level schemas/ the design card names (streams/schemas is a
# symbolic link to it, so a build copies the files in and an editable install reads them in place),
# and the pinned Kafka release's manifest (written from kafka/pom.xml by tools/kafka_release.py).
PACKAGE_DATA = {"streams": ["schemas/*.schema.json", "py.typed"], "streams.broker": ["kafka_release.json"]}

setup(packages=find_namespace_packages(include=["streams", "streams.*"], exclude=["*__pycache__"]),
      package_data=PACKAGE_DATA,
      ext_modules=_extensions())
