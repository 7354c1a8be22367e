"""Real change histories for the revisit benchmark, built from public repositories' git history.

A documentation or content repository is a website's source: each file under its content folder is
a page, each commit that touched the file a new version of the page, published when the commit
reached the default branch. ``bench/revisit_histories.json`` (committed) names the repositories, the
commits at both ends of a two-year window, the path patterns of their pages and how many pages to
draw from each. This module reads the repositories from bare git mirrors, one per repository at
``<mirrors>/<owner>+<name>/repo`` (``/work/.mirror`` by default, ``--mirrors`` or
``REVISIT_MIRRORS`` elsewhere; ``git clone --mirror`` makes one) and writes the dataset to
``bench/work/revisit-histories/`` (git-ignored), so no page of those sites is committed here.

For each site: the files matching its patterns at both the start and the end commit (pages that
live the whole window; a page renamed or deleted in between is not drawn), a seeded sample of them,
and for each drawn page its text at the start commit (time 0) and after every first-parent commit
of the window that touched it (``git log --first-parent -m``: a merged pull request is one change,
at the time of its merge, as the site deploys it), at the commit's time relative to the window's
start. Nothing here renders or judges the pages: bench/revisit_site.py does.

``python -m bench.revisit_history`` builds (or reuses) the dataset and prints what it holds: pages,
changes, the share of gaps under a day and the per-page coefficients of variation of the gaps
(burstiness), and the largest one-commit batch.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).resolve().parent / "revisit_histories.json"
CACHE = Path(__file__).resolve().parent / "work" / "revisit-histories"
DEFAULT_MIRRORS = Path(os.environ.get("REVISIT_MIRRORS", "/work/.mirror"))
DAY = 86400.0


class MirrorsMissing(Exception):
    """A repository of the manifest is not mirrored here (or lacks a named commit)."""


@dataclass(frozen=True)
class Page:
    """One page's history: ``versions`` are ``(seconds since the window's start, file text)``."""

    site: str          # the repository, owner/name
    host: str
    path: str
    url: str
    versions: tuple[tuple[float, str], ...]


@dataclass(frozen=True)
class Dataset:
    window_s: float
    pages: tuple[Page, ...]
    manifest_digest: str


def load(mirrors: Path = DEFAULT_MIRRORS, manifest_path: Path = MANIFEST, cache: Path = CACHE) -> Dataset:
    """The dataset of ``manifest_path``, from the cache or built from the mirrors (MirrorsMissing)."""
    raw = manifest_path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()[:16]
    cached = cache / f"{digest}.json.gz"
    if not cached.exists():
        document = build(json.loads(raw), mirrors)
        cache.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            json.dump(document, out)
        partial.replace(cached)
    with gzip.open(cached, "rt", encoding="utf-8") as stream:
        document = json.load(stream)
    pages = tuple(Page(p["site"], p["host"], p["path"], p["url"], tuple(map(tuple, p["versions"])))
                  for p in document["pages"])
    return Dataset(document["window_s"], pages, digest)


def build(manifest: dict[str, Any], mirrors: Path) -> dict[str, Any]:
    """Read every site of ``manifest`` from its mirror (module docstring)."""
    window_s = manifest["window_days"] * DAY
    pages: list[dict[str, Any]] = []
    for site in manifest["sites"]:
        git = _Git(mirrors / site["repo"].replace("/", "+") / "repo", site["repo"])
        pages.extend(_site_pages(git, site, window_s, random.Random(f"{manifest['seed']}:{site['repo']}")))
    return {"window_s": window_s, "pages": pages}


def _site_pages(git: _Git, site: dict[str, Any], window_s: float, rng: random.Random) -> list[dict[str, Any]]:
    start, end = site["start_commit"], site["end_commit"]
    matches = _patterns(site["paths"])
    at_start, at_end = git.tree(start, matches), git.tree(end, matches)
    stable = sorted(set(at_start) & set(at_end))
    drawn = sorted(rng.sample(stable, min(site["pages"], len(stable))))
    start_s = datetime.fromisoformat(site["start"].replace("Z", "+00:00")).timestamp()
    changes = git.changes(start, end, drawn)
    blobs = git.blobs({at_start[p] for p in drawn} | {b for p in drawn for _, b in changes[p]})
    pages = []
    for path in drawn:
        versions = [(0.0, blobs[at_start[path]])]
        for time_s, blob in changes[path]:
            offset_s = min(max(time_s - start_s, versions[-1][0]), window_s)
            versions.append((offset_s, blobs[blob]))
        pages.append({"site": site["repo"], "host": site["host"], "path": path,
                      "url": f"https://{site['host']}/{_slug(path, site['paths'])}", "versions": versions})
    return pages


def _patterns(globs: list[str]) -> re.Pattern[str]:
    """``**`` any folders (none included), ``*`` within one path segment."""
    def one(glob: str) -> str:
        parts = re.split(r"(\*\*/|\*)", glob)
        return "".join({"**/": "(?:.*/)?", "*": "[^/]*"}.get(part, re.escape(part)) for part in parts)
    return re.compile("|".join(f"(?:{one(g)})" for g in globs) + r"\Z")


def _slug(path: str, globs: list[str]) -> str:
    root = min((g.split("*")[0] for g in globs), key=len)
    stem = path[len(root):] if path.startswith(root) else path
    return re.sub(r"(index)?\.(md|mdx)$", "", stem)


class _Git:
    """The few git plumbing reads the builder needs, on one bare mirror."""

    def __init__(self, directory: Path, repo: str) -> None:
        if not directory.is_dir():
            raise MirrorsMissing(f"{repo} is not mirrored at {directory}")
        self.directory, self.repo = directory, repo

    def _run(self, *args: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(["git", "-C", str(self.directory), *args], input=stdin, capture_output=True,
                              check=False)
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace")[:200]
            raise MirrorsMissing(f"{self.repo}: git {args[0]} failed: {error}")
        return done.stdout

    def tree(self, commit: str, matches: re.Pattern[str]) -> dict[str, str]:
        """path -> blob id of the matching files at ``commit``."""
        found = {}
        for line in self._run("ls-tree", "-r", "-z", commit).split(b"\0"):
            if not line:
                continue
            meta, _, path = line.decode("utf-8", "surrogateescape").partition("\t")
            mode, kind, blob = meta.split()
            if kind == "blob" and matches.match(path):
                found[path] = blob
        return found

    def changes(self, start: str, end: str, paths: list[str]) -> dict[str, list[tuple[float, str]]]:
        """path -> [(commit time, new blob id)], oldest first, over the first-parent commits of
        ``start..end``; merges are diffed against their first parent."""
        out = self._run("log", "--first-parent", "-m", "--raw", "--no-renames", "--no-abbrev", "--reverse",
                        "--format=@%ct", f"{start}..{end}", "--", *paths).decode("utf-8", "surrogateescape")
        wanted, changes = set(paths), defaultdict(list)
        time_s = 0.0
        for line in out.splitlines():
            if line.startswith("@"):
                time_s = float(line[1:])
            elif line.startswith(":"):
                meta, _, path = line.partition("\t")
                new_blob = meta.split()[3]
                if path in wanted and set(new_blob) != {"0"}:
                    changes[path].append((time_s, new_blob))
        return changes

    def blobs(self, ids: set[str]) -> dict[str, str]:
        """blob id -> text (UTF-8, undecodable bytes replaced)."""
        ordered = sorted(ids)
        out = self._run("cat-file", "--batch", stdin="".join(f"{b}\n" for b in ordered).encode())
        texts, offset = {}, 0
        for blob in ordered:
            header_end = out.index(b"\n", offset)
            size = int(out[offset:header_end].split()[2])
            texts[blob] = out[header_end + 1: header_end + 1 + size].decode("utf-8", "replace")
            offset = header_end + 1 + size + 1
        return texts


def burstiness(dataset: Dataset, seed: int = 35) -> dict[str, Any]:
    """How the histories' commits are spaced, beside a Poisson process of each page's own rate (the
    same number of changes, uniform over the window): gaps under a day, the median per-page
    coefficient of variation of the gaps (pages with four changes or more), the largest batch."""
    rng = random.Random(seed)
    real = [[t for t, _ in page.versions[1:]] for page in dataset.pages]
    poisson = [sorted(rng.uniform(0.0, dataset.window_s) for _ in times) for times in real]
    batch: dict[tuple[str, float], int] = defaultdict(int)
    for page, times in zip(dataset.pages, real, strict=True):
        for t in times:
            batch[(page.site, t)] += 1
    return {"pages": len(dataset.pages), "file_changes": sum(map(len, real)),
            **{f"{name}_{key}": value for name, histories in (("real", real), ("poisson", poisson))
               for key, value in _gaps(histories).items()},
            "largest_batch": max(batch.values(), default=0)}


def _gaps(histories: list[list[float]]) -> dict[str, float]:
    gaps, cvs = [], []
    for times in histories:
        page_gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        gaps.extend(page_gaps)
        if len(page_gaps) >= 3 and statistics.mean(page_gaps) > 0:
            cvs.append(statistics.pstdev(page_gaps) / statistics.mean(page_gaps))
    return {"gaps_under_a_day": sum(g < DAY for g in gaps) / max(len(gaps), 1),
            "median_cv_of_gaps": statistics.median(cvs) if cvs else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    args = parser.parse_args(argv)
    try:
        dataset = load(args.mirrors)
    except MirrorsMissing as missing:
        print(f"skipped: {missing}")
        return 0
    print(json.dumps(burstiness(dataset), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
