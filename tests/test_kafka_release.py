"""The local broker's release from a Maven repository into the cache: checked, atomic, clear failures.

The repository is a folder in Maven's layout read through ``file://`` (urllib reads it as it reads
HTTPS), so every failure is made here without a network: a corrupt jar, a missing one, a cache that
cannot be written, no Java or an old one. Each must end in one line naming the fix, with nothing
left behind that a retry would trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from streams.broker import kafka_release
from streams.broker.kafka_release import Artifact, Release
from streams.errors import BrokerError

ROOT = Path(__file__).resolve().parent.parent


def _release(tmp_path: Path, contents: dict[str, bytes]) -> tuple[Release, str]:
    """A release of small fake jars, published into a Maven-layout folder; its file:// address."""
    repository = tmp_path / "repository"
    artifacts = []
    for name, data in contents.items():
        artifact = Artifact("org.example.fake", name, "1.0", len(data), hashlib.sha256(data).hexdigest())
        path = Path(artifact.url(str(repository)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        artifacts.append(artifact)
    return Release("9.9.9", tuple(artifacts)), repository.as_uri()


def _leftovers(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")) if root.exists() else []


def test_a_release_is_fetched_checked_and_then_reused(tmp_path: Path) -> None:
    release, source = _release(tmp_path, {"one": b"first jar", "two": b"second jar" * 1000})
    progress = io.StringIO()
    lib = kafka_release.ensure(release, tmp_path / "cache", source, progress)
    assert sorted(path.name for path in lib.iterdir()) == [".complete", "one-1.0.jar", "two-1.0.jar"]
    assert (lib / "two-1.0.jar").read_bytes() == b"second jar" * 1000
    assert "fetching Apache Kafka 9.9.9 (2 jars" in progress.getvalue()
    again = io.StringIO()
    assert kafka_release.ensure(release, tmp_path / "cache", "file:///nowhere", again) == lib
    assert again.getvalue() == ""  # nothing fetched the second time


def test_a_corrupt_jar_installs_nothing_and_a_retry_succeeds(tmp_path: Path) -> None:
    release, source = _release(tmp_path, {"good": b"good", "bad": b"expected bytes"})
    Path(release.artifacts[1].url(str(tmp_path / "repository"))).write_bytes(b"tampered bytes")
    with pytest.raises(BrokerError, match="corrupt or the repository serves another file"):
        kafka_release.ensure(release, tmp_path / "cache", source)
    assert _leftovers(tmp_path / "cache") == ["kafka-9.9.9"]  # an empty parent, no jar, no marker
    assert not kafka_release.installed(release, tmp_path / "cache")
    Path(release.artifacts[1].url(str(tmp_path / "repository"))).write_bytes(b"expected bytes")
    assert kafka_release.ensure(release, tmp_path / "cache", source).is_dir()


def test_a_missing_jar_says_which_download_failed(tmp_path: Path) -> None:
    release, source = _release(tmp_path, {"present": b"x"})
    missing = Artifact("org.example.fake", "absent", "1.0", 1, "0" * 64)
    release = Release(release.kafka_version, (*release.artifacts, missing))
    with pytest.raises(BrokerError, match=r"downloading .*absent-1\.0\.jar failed: .*Maven mirror"):
        kafka_release.ensure(release, tmp_path / "cache", source)
    assert _leftovers(tmp_path / "cache") == ["kafka-9.9.9"]


def test_a_cache_that_cannot_be_written_names_the_setting(tmp_path: Path) -> None:
    release, source = _release(tmp_path, {"one": b"x"})
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(BrokerError, match=f"cannot write the Kafka cache .*{kafka_release.CACHE_ENV}"):
        kafka_release.ensure(release, blocker / "cache", source)


def test_a_partial_download_of_a_dead_process_is_removed(tmp_path: Path) -> None:
    release, source = _release(tmp_path, {"one": b"x"})
    stale = tmp_path / "cache" / "kafka-9.9.9" / ".lib.partial-999999999"
    stale.mkdir(parents=True)
    (stale / "one-1.0.jar").write_bytes(b"half")
    kafka_release.ensure(release, tmp_path / "cache", source)
    assert not stale.exists()


@pytest.mark.parametrize(("environment", "expected"), [
    ({kafka_release.CACHE_ENV: "/srv/cd", "XDG_CACHE_HOME": "/x"}, "/srv/cd"),
    ({"XDG_CACHE_HOME": "/var/cache/u"}, "/var/cache/u/crawl-dedup"),
    ({"XDG_CACHE_HOME": "relative/ignored", "HOME": "/home/u"}, "/home/u/.cache/crawl-dedup"),
    ({"HOME": "/home/u"}, "/home/u/.cache/crawl-dedup"),
])
def test_the_cache_directory_follows_the_xdg_rules(monkeypatch: pytest.MonkeyPatch,
                                                    environment: dict[str, str], expected: str) -> None:
    for name in (kafka_release.CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert kafka_release.cache_root() == Path(expected)


def _fake_java(directory: Path, version_line: str) -> Path:
    java = directory / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return directory


@pytest.mark.parametrize(("line", "major"), [
    ('openjdk version "17.0.15" 2025-04-15', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_412"', 8),
    ("something else", None),
])
def test_java_major_reads_what_java_version_prints(tmp_path: Path, line: str, major: int | None) -> None:
    assert kafka_release.java_major(str(_fake_java(tmp_path, line) / "bin" / "java")) == major


def test_an_old_java_is_refused_with_the_version_needed(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')))
    with pytest.raises(BrokerError, match="is Java 11: the local broker .* needs Java 17"):
        kafka_release.java()


def test_the_manifest_pins_the_poms_release_with_a_checksum_per_jar() -> None:
    pom = (ROOT / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    release = kafka_release.pinned()
    assert version is not None and release.kafka_version == version.group(1)
    names = {each.artifact for each in release.artifacts}
    assert {"kafka_2.13", "kafka-clients", "log4j-core", "log4j-slf4j2-impl"} <= names
    assert all(re.fullmatch("[0-9a-f]{64}", each.sha256) and each.size > 0 for each in release.artifacts)
    manifest = json.loads((ROOT / "streams" / "broker" / "kafka_release.json").read_text())
    assert manifest["kafka_version"] == version.group(1)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120, check=False)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def test_kafka_start_without_java_says_what_to_install(tmp_path: Path) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    result = _cli("kafka", "start", "--port", "19899",
                  env={"PATH": str(no_java), "JAVA_HOME": "", "KAFKA_BOOTSTRAP_SERVERS": "",
                       kafka_release.CACHE_ENV: str(tmp_path / "c")})
    assert "apt-get install openjdk-17-jre-headless" in _one_error_line(result)
    assert _leftovers(tmp_path / "c") == []  # nothing fetched without a Java to run it


def test_kafka_fetch_from_a_corrupt_mirror_fails_cleanly(tmp_path: Path) -> None:
    """The real manifest against a mirror whose first jar is corrupt: one line, nothing installed."""
    first = kafka_release.pinned().artifacts[0]
    corrupt = Path(first.url(str(tmp_path / "mirror")))
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"not the jar")
    result = _cli("kafka", "fetch", env={kafka_release.REPOSITORY_ENV: (tmp_path / "mirror").as_uri(),
                                         kafka_release.CACHE_ENV: str(tmp_path / "cache")})
    assert first.file_name in _one_error_line(result)
    assert not any(path.suffix == ".jar" for path in (tmp_path / "cache").rglob("*"))


def test_kafka_fetch_into_an_unwritable_cache_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = _cli("kafka", "fetch", env={kafka_release.CACHE_ENV: str(tmp_path / "file" / "cache")})
    assert kafka_release.CACHE_ENV in _one_error_line(result)
