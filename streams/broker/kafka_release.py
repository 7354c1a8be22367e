"""The local broker's pinned Apache Kafka release, fetched from Maven Central into a per-user cache.

Why this way: nothing on PyPI, npm or Debian ships a Kafka broker, and the Apache download archive
is not reachable everywhere this runs, but Maven Central serves the broker's jars. ``kafka/pom.xml``
pins the release; ``tools/kafka_release.py`` resolves it with Maven once and writes the manifest
the package carries (``streams/broker/kafka_release.json``: each jar's coordinates, size and SHA-256).
So an installed package needs neither a checkout nor Maven: on first use each jar is downloaded
over HTTPS and checked against its SHA-256.

Nothing half-installed survives a failure: the jars go to a temporary directory beside the cache
entry, which is renamed into place only once every file has been checked, so a failed, interrupted
or corrupted download leaves nothing a retry would trust (a leftover temporary directory is removed
by the next attempt).

Where: ``$CRAWL_DEDUP_CACHE_DIR``, else ``$XDG_CACHE_HOME/crawl-dedup``, else
``~/.cache/crawl-dedup`` (the XDG Base Directory Specification's cache directory): the release in
``kafka-<version>/lib``. ``$CRAWL_DEDUP_MAVEN_REPOSITORY`` names a Maven mirror (an Artifactory or
Nexus proxy) instead of Maven Central; the checksums are the same either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

from streams.errors import BrokerError

CACHE_ENV = "CRAWL_DEDUP_CACHE_DIR"
REPOSITORY_ENV = "CRAWL_DEDUP_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
MINIMUM_JAVA = 17
_COMPLETE = ".complete"
_CHUNK_BYTES = 1 << 16


@dataclass(frozen=True)
class Artifact:
    """One jar of the release, as Maven names it, with the size and SHA-256 it must have."""

    group: str
    artifact: str
    version: str
    size: int
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        """Its address in a Maven repository (the layout every Maven repository shares)."""
        return "/".join([repository.rstrip("/"), *self.group.split("."), self.artifact, self.version,
                         self.file_name])


@dataclass(frozen=True)
class Release:
    """The pinned Kafka release: its version and every jar the broker runs on."""

    kafka_version: str
    artifacts: tuple[Artifact, ...]

    @property
    def size(self) -> int:
        return sum(each.size for each in self.artifacts)


def pinned() -> Release:
    """The release this package was built with (the manifest inside the package)."""
    text = resources.files("streams.broker").joinpath("kafka_release.json").read_text(encoding="utf-8")
    loaded = json.loads(text)
    return Release(loaded["kafka_version"], tuple(Artifact(**each) for each in loaded["artifacts"]))


def cache_root() -> Path:
    """The per-user cache directory (see the module docstring for the order of precedence)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "crawl-dedup"


def repository() -> str:
    return os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL


def lib_dir(release: Release, root: Path) -> Path:
    return root / f"kafka-{release.kafka_version}" / "lib"


def installed(release: Release, root: Path) -> bool:
    return (lib_dir(release, root) / _COMPLETE).exists()


def ensure(release: Release, root: Path, source: str, progress: IO[str] | None = None) -> Path:
    """The release's jar directory under ``root``, downloaded from ``source`` first if missing."""
    target = lib_dir(release, root)
    if installed(release, root):
        return target
    try:
        staging = _staging_dir(target)
    except OSError as error:
        raise _unwritable(root, error) from error
    try:
        report = _Progress(release, source, target, progress)
        for artifact in release.artifacts:
            _download(artifact, source, staging, report.advance)
        (staging / _COMPLETE).write_text(f"{release.kafka_version}\n")
        _move_into_place(staging, target)
        report.done()
    except OSError as error:
        raise _unwritable(root, error) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _unwritable(root: Path, error: OSError) -> BrokerError:
    return BrokerError(f"cannot write the Kafka cache {root}: {error.strerror or error}; set {CACHE_ENV} "
                       "to a writable directory")


def _staging_dir(target: Path) -> Path:
    """A fresh temporary directory beside ``target`` (earlier attempts' leftovers removed)."""
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    for leftover in parent.glob(".lib.partial-*"):
        if not _pid_alive(leftover.name.rsplit("-", 1)[-1]):
            shutil.rmtree(leftover, ignore_errors=True)
    staging = parent / f".lib.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def _pid_alive(text: str) -> bool:
    try:
        os.kill(int(text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename the checked release into place; another process may have finished first (keep its)."""
    try:
        staging.rename(target)
    except OSError:
        if not (target / _COMPLETE).exists():
            raise


def _download(artifact: Artifact, source: str, directory: Path, advance: Callable[[int], None]) -> None:
    # Imported here: every worker imports this module (the broker's address when none is set), and
    # only a download needs the HTTP client, a large part of that import at each start.
    import http.client
    import urllib.error
    import urllib.request

    url = artifact.url(source)
    digest = hashlib.sha256()
    received = 0
    with open(directory / artifact.file_name, "wb") as out:
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                while chunk := answer.read(_CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    advance(len(chunk))
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", None) or error
            raise BrokerError(f"downloading {url} failed: {reason}; check the network, or set "
                              f"{REPOSITORY_ENV} to a Maven mirror (nothing was installed)") from error
    if digest.hexdigest() != artifact.sha256 or received != artifact.size:
        raise BrokerError(f"{url}: {received} bytes with SHA-256 {digest.hexdigest()[:16]}..., not the "
                          f"pinned {artifact.size} bytes {artifact.sha256[:16]}...: the download is corrupt "
                          "or the repository serves another file (nothing was installed)")


class _Progress:
    """One line while the release downloads: rewritten in place on a terminal, every 10% otherwise."""

    def __init__(self, release: Release, source: str, target: Path, out: IO[str] | None) -> None:
        self.total, self.done_bytes, self.out = release.size, 0, out
        self.tty = out is not None and out.isatty()
        self.next_step, self.started = 0.1, time.monotonic()
        self._say(f"fetching Apache Kafka {release.kafka_version} ({len(release.artifacts)} jars, "
                  f"{self.total / 1e6:.0f} MB) from {source} into {target.parent}\n")

    def advance(self, count: int) -> None:
        self.done_bytes += count
        share = self.done_bytes / self.total
        if self.tty:
            self._say(f"\r  {self.done_bytes / 1e6:5.1f} of {self.total / 1e6:.1f} MB ({share:4.0%})")
        elif share >= self.next_step:
            self._say(f"  {share:.0%} of {self.total / 1e6:.1f} MB\n")
            self.next_step += 0.1

    def done(self) -> None:
        self._say(f"{chr(10) if self.tty else ''}  checked and installed in "
                  f"{time.monotonic() - self.started:.1f} s\n")

    def _say(self, text: str) -> None:
        if self.out is not None:
            self.out.write(text)
            self.out.flush()


def java() -> str:
    """The ``java`` to run the broker with (``JAVA_HOME`` first, then ``PATH``), at least Java 17."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else None
    found = candidate or shutil.which("java")
    if found is None:
        raise BrokerError(f"no Java found (JAVA_HOME unset, no java on PATH): the local broker needs Java "
                          f"{MINIMUM_JAVA} or later (Debian/Ubuntu: apt-get install "
                          "openjdk-17-jre-headless), or set KAFKA_BOOTSTRAP_SERVERS to use a cluster")
    major = java_major(found)
    if major is not None and major < MINIMUM_JAVA:
        raise BrokerError(f"{found} is Java {major}: the local broker (Kafka 4) needs Java {MINIMUM_JAVA} "
                          "or later; set JAVA_HOME to a newer one")
    return found


def java_major(executable: str) -> int | None:
    """The major version ``java -version`` reports (``None`` when it says nothing readable)."""
    try:
        answer = subprocess.run([executable, "-version"], capture_output=True, text=True, timeout=30,
                                check=False)
    except OSError as error:
        raise BrokerError(f"{executable} does not run: {error}") from error
    found = re.search(r'version "(\d+)(?:\.(\d+))?', answer.stderr + answer.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def release_jars(progress: IO[str] | None = sys.stderr) -> Path:
    """The pinned release's jar directory in the user's cache, fetched on first use."""
    return ensure(pinned(), cache_root(), repository(), progress)
