"""The package as an operator installs it, checked end to end (``make wheel-check``, part of make test).

    python tools/wheel_check.py [--keep] [--skip-scrapy]

1. A clean clone of this checkout's HEAD is built with ``python -m build`` (the sdist, then the
   wheel from the sdist, its hot path compiled).
2. The wheel goes into a new virtualenv outside the checkout (pinned by constraints.txt, as CI's).
3. From an empty directory, with no checkout on the path: ``crawl-dedup --version`` says compiled;
   each stage's ``--offline`` decides one record; ``canonicalize`` answers.
4. With an empty release cache: ``crawl-dedup kafka start`` fetches the pinned Kafka release and
   starts a broker; one URL written to ``crawl.frontier`` comes out of ``tail new-urls`` after
   ``url-dedup --idle-exit-s 8``; then ``kafka stop`` and ``kafka wipe``.
5. Scrapy at the lowest release the integration supports (constraints-scrapy-lowest.txt: Scrapy and
   dependencies of its time): a virtualenv that already has it gets ``<wheel>[scrapy]`` and keeps
   it; the Scrapy tests run there against the installed wheel.

Each step prints what it ran and how long it took; the first failure exits 1 with what was expected
and what came.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PORT = int(os.environ.get("WHEEL_CHECK_KAFKA_PORT", "19700"))  # and PORT + 10 for the Scrapy tests
SCRAPY_LOWEST = ROOT / "constraints-scrapy-lowest.txt"
PAGE = {"url": "http://a.example/p", "status": 200, "fetched_at": "2026-11-26T08:00:00Z",
        "headers": {"content-type": "text/html; charset=utf-8"},
        "body": "<html><body><article><p>One page of a crawl, long enough to be analysed by the stages."
                "</p></article></body></html>"}


class CheckFailed(Exception):
    pass


def run(command: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None, stdin: str = "",
        timeout_s: float = 900) -> str:
    began = time.monotonic()
    result = subprocess.run([str(part) for part in command], cwd=cwd, input=stdin, capture_output=True,
                            text=True, env=env, timeout=timeout_s, check=False)
    print(f"$ {' '.join(str(part) for part in command)}  ({time.monotonic() - began:.0f} s)", flush=True)
    if result.returncode != 0:
        raise CheckFailed(f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def expect(condition: bool, what: str, got: str) -> None:
    if not condition:
        raise CheckFailed(f"expected {what}, got:\n{got}")


def build(work: Path) -> Path:
    clone = work / "clone"
    run(["git", "clone", "-q", "--no-local", ROOT, clone], cwd=work)
    run([sys.executable, "-m", "build", "--outdir", work / "dist", clone], cwd=work)
    wheels = list((work / "dist").glob("crawl_dedup-*.whl"))
    expect(len(wheels) == 1 and len(list((work / "dist").glob("*.tar.gz"))) == 1,
           "one wheel and one sdist", str(sorted((work / "dist").iterdir())))
    return wheels[0]


def new_venv(path: Path) -> Path:
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return path / "bin"


def install(bin_dir: Path, *requirements: str | Path, constraints: Path = ROOT / "constraints.txt") -> None:
    run([bin_dir / "python", "-m", "pip", "install", "-q", "-c", constraints, *requirements], cwd=bin_dir)


def clean_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a shell with this virtualenv active and nothing of the checkout's."""
    env = {name: value for name, value in os.environ.items()
           if name not in {"PYTHONPATH", "KAFKA_BOOTSTRAP_SERVERS", "VIRTUAL_ENV"}}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", **extra}


def offline_commands(bin_dir: Path, here: Path) -> None:
    env = clean_env(bin_dir)
    version = run(["crawl-dedup", "--version"], here, env)
    expect("hot path compiled" in version, "a compiled build", version)
    new = run(["crawl-dedup", "url-dedup", "--offline", "--state-dir", "s"], here, env,
              stdin='{"url":"http://a.example/x"}\n')
    expect([json.loads(line)["canonical"] for line in new.splitlines()] == ["http://a.example/x"],
           "one new URL", new)
    verdict = run(["crawl-dedup", "content-seen", "--offline", "--state-dir", "s"], here, env,
                  stdin=json.dumps(PAGE) + "\n")
    expect([json.loads(line)["verdict"] for line in verdict.splitlines()] == ["unique"], "one verdict",
           verdict)
    update = run(["crawl-dedup", "revisit", "--offline", "--state-dir", "s"], here, env,
                 stdin=json.dumps(PAGE) + "\n")
    expect([json.loads(line)["signal"] for line in update.splitlines()] == ["first_fetch"],
           "one revisit update", update)
    canonical = run(["crawl-dedup", "canonicalize"], here, env, stdin="HTTP://A.example:80/a/../b#x\n")
    expect(json.loads(canonical)["canonical"] == "http://a.example/b", "the canonical URL", canonical)


def broker_round_trip(bin_dir: Path, here: Path) -> None:
    cache = here / "cache"  # empty: the release is fetched here, as on a new machine
    env = clean_env(bin_dir, CRAWL_DEDUP_CACHE_DIR=str(cache))
    stage_env = {**env, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{PORT}", "STREAMS_METRICS_ENABLED": "false"}
    run(["crawl-dedup", "kafka", "start", "--port", str(PORT)], here, env)
    try:
        (here / "frontier.jsonl").write_text('{"url":"HTTP://Wheel.Example/check"}\n')
        run(["crawl-dedup", "replay", "frontier.jsonl", "--topic", "frontier"], here, stage_env)
        run(["crawl-dedup", "url-dedup", "--idle-exit-s", "8", "--state-dir", "state"], here, stage_env)
        tail = run(["crawl-dedup", "tail", "new-urls"], here, stage_env)
        urls = [json.loads(line)["value"]["canonical"] for line in tail.splitlines()]
        expect(urls == ["http://wheel.example/check"], "the URL once on new-urls", tail)
    finally:
        run(["crawl-dedup", "kafka", "stop", "--port", str(PORT)], here, env)
        run(["crawl-dedup", "kafka", "wipe", "--port", str(PORT)], here, env)


def scrapy_at_lowest(wheel: Path, work: Path) -> None:
    """Scrapy's tests against the installed wheel, in a virtualenv that has the lowest Scrapy: the
    tests and the support code they use (testing/) are copied beside it, so no checkout code is
    importable."""
    release = next(line.split("==")[1] for line in SCRAPY_LOWEST.read_text().splitlines()
                   if line.startswith("scrapy=="))
    bin_dir = new_venv(work / "venv-scrapy")
    install(bin_dir, "scrapy", constraints=SCRAPY_LOWEST)
    install(bin_dir, f"{wheel}[scrapy,dev]", constraints=SCRAPY_LOWEST)
    found = run([bin_dir / "python", "-c", "import scrapy; print(scrapy.__version__)"], work)
    expect(found.strip() == release, f"Scrapy {release} kept", found)
    suite = work / "suite"
    for part in ("tests", "testing", "examples", "pyproject.toml"):
        source = ROOT / part
        copy = shutil.copytree if source.is_dir() else shutil.copy2
        copy(source, suite / part)
    env = clean_env(bin_dir, STREAMS_TEST_KAFKA_PORT=str(PORT + 10))
    files = sorted(str(path.relative_to(suite)) for path in (suite / "tests").rglob("test_scrapy*.py"))
    run([bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *files], suite, env,
        timeout_s=1800)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--skip-scrapy", action="store_true",
                        help="skip the Scrapy tests at the oldest Scrapy")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wheel-check-"))
    began = time.monotonic()
    try:
        wheel = build(work)
        bin_dir = new_venv(work / "venv")
        install(bin_dir, wheel)
        elsewhere = work / "elsewhere"
        elsewhere.mkdir()
        offline_commands(bin_dir, elsewhere)
        broker_round_trip(bin_dir, elsewhere)
        if not args.skip_scrapy:
            scrapy_at_lowest(wheel, work)
    except CheckFailed as failure:
        print(f"wheel check failed: {failure}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wheel check passed in {time.monotonic() - began:.0f} s ({wheel.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
