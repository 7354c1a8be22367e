"""Whether two checkouts behave the same: every command's ``--help`` and each stage's ``--offline``
output, byte for byte, on the reliability workload.

A refactor that claims "behaviour unchanged" proves it with this: capture what the tree before the
change prints, capture what the changed tree prints, compare.

    python tools/same_behaviour.py inputs DIR --tree BEFORE     # the workload, written once
    python tools/same_behaviour.py capture OUT --tree TREE --inputs DIR
    python tools/same_behaviour.py compare OUT_BEFORE OUT_AFTER

``inputs`` writes the offline input lines of the reliability workload (frontier records and fetched
pages, bad records included) with the test helpers of ``--tree`` (``testing/workload.py``, or
``tests/reliability.py`` before issue 38), so both captures read the same bytes however the helpers
move. ``capture`` runs ``TREE/.venv/bin/python -m streams`` and
``TREE/.venv/bin/crawl-dedup`` (a tree built with ``make``) from ``TREE``, with a fixed terminal
width, and writes one file per command's help and two per stage (stdout and stderr of
``--offline``). ``compare`` lists every file that differs or is missing, and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

COMMANDS = ("", "kafka", "url-dedup", "content-seen", "revisit", "url-dedup-migrate",
            "reshard", "canonicalize", "lag", "replay", "tail", "demo")
STAGES = {"url-dedup": "frontier", "content-seen": "fetched-pages", "revisit": "fetched-pages"}
# The larger of tests/kafka/test_reliability_kafka.py's workloads, and the default one.
WORKLOADS = {"large": "seed=12, articles=120, urls=3000, repeats=3, phases_per_half=2", "default": ""}
ENV = {"COLUMNS": "100", "LINES": "40", "STREAMS_LOG_LEVEL": "warning", "PYTHONHASHSEED": "0"}


def _env() -> dict[str, str]:
    keep = {name: value for name, value in os.environ.items()
            if not name.startswith(("STREAMS_", "KAFKA_", "CRAWL_DEDUP_"))}
    return {**keep, **ENV}


def inputs(directory: Path, tree: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, arguments in WORKLOADS.items():
        for kind in sorted(set(STAGES.values())):
            code = ("import sys\ntry:\n    from testing import workload as r\nexcept ImportError:\n"
                    "    from tests import reliability as r  # before issue 38\n"
                    f"sys.stdout.buffer.write(r.workload({arguments}).lines({kind!r}))")
            found = subprocess.run([str(tree / ".venv/bin/python"), "-c", code], cwd=tree, env=_env(),
                                   capture_output=True, check=True)
            (directory / f"{name}.{kind}.jsonl").write_bytes(found.stdout)


def capture(out: Path, tree: Path, lines: Path, python: str | None = None) -> None:
    """``python``: another interpreter than the tree's own (its console script is then imitated)."""
    out.mkdir(parents=True, exist_ok=True)
    script = [str(tree / ".venv/bin/crawl-dedup")]
    if python is not None:
        script = [python, "-c", "import sys; sys.argv[0] = 'crawl-dedup'; from streams.cli import main; "
                                "sys.exit(main())"]
    python = python or str(tree / ".venv/bin/python")
    for command in COMMANDS:
        words = [command] if command else []
        for label, argv in (("python-m", [python, "-m", "streams"]), ("script", script)):
            found = subprocess.run([*argv, *words, "--help"], cwd=tree, env=_env(), capture_output=True)
            name = f"help.{label}.{command or 'top'}"
            (out / f"{name}.out").write_bytes(found.stdout + f"exit {found.returncode}\n".encode())
            (out / f"{name}.err").write_bytes(found.stderr)
    for stage, kind in STAGES.items():
        for workload in WORKLOADS:
            data = (lines / f"{workload}.{kind}.jsonl").read_bytes()
            found = subprocess.run([python, "-m", "streams", stage, "--offline"], input=data, cwd=tree,
                                   env=_env(), capture_output=True)
            (out / f"offline.{stage}.{workload}.out").write_bytes(found.stdout)
            (out / f"offline.{stage}.{workload}.err").write_bytes(
                found.stderr + f"exit {found.returncode}\n".encode())


def compare(before: Path, after: Path) -> int:
    names = sorted({path.name for path in before.iterdir()} | {path.name for path in after.iterdir()})
    differing = 0
    for name in names:
        old, new = before / name, after / name
        if not old.exists() or not new.exists():
            print(f"MISSING {name}: {'before' if not old.exists() else 'after'}")
            differing += 1
            continue
        a, b = old.read_bytes(), new.read_bytes()
        digest = hashlib.sha256(a).hexdigest()[:16]
        same = a == b
        differing += not same
        lines = a.count(b"\n")
        print(f"{'same' if same else 'DIFFERENT'} {name} ({len(a)} bytes, {lines} lines, sha256 {digest})")
    print(f"{len(names) - differing} of {len(names)} files identical")
    return 1 if differing else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    made = commands.add_parser("inputs")
    made.add_argument("directory", type=Path)
    made.add_argument("--tree", type=Path, required=True)
    taken = commands.add_parser("capture")
    taken.add_argument("out", type=Path)
    taken.add_argument("--tree", type=Path, required=True)
    taken.add_argument("--inputs", type=Path, required=True)
    taken.add_argument("--python", default=None, help="an interpreter other than TREE/.venv/bin/python")
    compared = commands.add_parser("compare")
    compared.add_argument("before", type=Path)
    compared.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.action == "inputs":
        inputs(args.directory, args.tree.resolve())
        return 0
    if args.action == "capture":
        capture(args.out, args.tree.resolve(), args.inputs.resolve(), args.python)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
