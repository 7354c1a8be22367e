"""Write streams/broker/kafka_release.json, the package's pin of the local broker's Kafka release.

    python tools/kafka_release.py          # after changing kafka/pom.xml (needs Maven)
    python tools/kafka_release.py --check  # the manifest matches the pom's version and jars

kafka/pom.xml names the release (``kafka.version``) and the log4j binding; Maven resolves their
runtime dependencies. This tool runs that resolution once and records every jar's coordinates,
size and SHA-256 in the manifest the package carries, so an installed package fetches exactly
these files from Maven Central without Maven (streams/broker/kafka_release.py). The pom stays the one
place a person edits; the manifest is its lock file, written here and checked by the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "kafka" / "pom.xml"
MANIFEST = ROOT / "streams" / "broker" / "kafka_release.json"
# "group:artifact:jar:version:scope:/path/to/file.jar", as dependency:list writes each resolved jar.
_RESOLVED = re.compile(r"^\s*([^:\s]+):([^:]+):jar:([^:]+):(?:compile|runtime):(/.+\.jar)\s*$")


def pom_kafka_version(pom: Path = POM) -> str:
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if found is None:
        raise SystemExit(f"{pom}: no <kafka.version>")
    return found.group(1)


def resolve(pom: Path = POM) -> list[dict[str, object]]:
    """Every runtime jar Maven resolves for ``pom``, sorted by coordinates."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as listing:
        subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:list",
                        "-DincludeScope=runtime", f"-DoutputFile={listing.name}",
                        "-DoutputAbsoluteArtifactFilename=true"], check=True, stdout=subprocess.DEVNULL)
        lines = Path(listing.name).read_text().splitlines()
    artifacts = []
    for line in lines:
        found = _RESOLVED.match(line)
        if found is None:
            continue
        group, artifact, version, path = found.groups()
        data = Path(path).read_bytes()
        artifacts.append({"group": group, "artifact": artifact, "version": version,
                          "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return sorted(artifacts, key=lambda each: (str(each["group"]), str(each["artifact"])))


def manifest_text(version: str, artifacts: list[dict[str, object]]) -> str:
    return json.dumps({"kafka_version": version, "artifacts": artifacts}, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that the manifest names the pom's Kafka version (no Maven)")
    args = parser.parse_args()
    version = pom_kafka_version()
    if args.check:
        pinned = json.loads(MANIFEST.read_text())["kafka_version"]
        if pinned != version:
            print(f"{MANIFEST} pins Kafka {pinned}, kafka/pom.xml {version}: run tools/kafka_release.py",
                  file=sys.stderr)
            return 1
        return 0
    MANIFEST.write_text(manifest_text(version, resolve()))
    print(f"wrote {MANIFEST.relative_to(ROOT)}: Kafka {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
