"""The runtime benchmark's workers (bench/runtime_bench.py): what each runtime runs, which group's
committed input offsets measure its progress, which internal topics it must have drained when its
input is all committed, and where its output goes.

Two jobs, each on its own input:

- ``first-seen`` (a keyed stream): emit each key once. ``passthrough`` (confluent-kafka, Python),
  ``jvm-passthrough`` (KafkaConsumer -> KafkaProducer), ``confluent`` (this project's runtime,
  ``testing/first_seen.py``), ``quix`` (quixstreams, ``.venv-quix``).
- ``url`` (the frontier, bench/frontier_gen.py): emit each new URL once. ``url-passthrough`` and
  ``url-jvm-passthrough`` (the same passthroughs on the frontier), ``url-dedup`` (this project's URL
  stage), ``kstreams`` (Kafka Streams, bench/runtimes/jvm), ``flink`` (PyFlink, ``.venv-flink``).

``make bench-runtime`` builds the JVM workers (``mvn -q package`` in bench/runtimes/jvm) and the
virtualenvs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h

PYTHON = sys.executable
QUIX_PYTHON = h.PROJECT_ROOT / ".venv-quix" / "bin" / "python"
FLINK_PYTHON = h.PROJECT_ROOT / ".venv-flink" / "bin" / "python"
JVM = h.PROJECT_ROOT / "bench" / "runtimes" / "jvm" / "target"
FIRST_SEEN = ("passthrough", "jvm-passthrough", "confluent", "quix")
URL = ("url-passthrough", "url-jvm-passthrough", "url-dedup", "kstreams", "flink")
PASSTHROUGHS = ("passthrough", "jvm-passthrough", "url-passthrough", "url-jvm-passthrough")
PARTITIONS = 4  # of every input, output and internal topic
LABELS = {"url-passthrough": "passthrough", "url-jvm-passthrough": "jvm-passthrough"}


def job_of(runtime: str) -> str:
    if runtime in FIRST_SEEN:
        return "first-seen"
    if runtime in URL:
        return "url"
    raise SystemExit(f"unknown runtime {runtime!r}: one of {', '.join(FIRST_SEEN + URL)}")


@dataclass(frozen=True)
class Worker:
    command: list[str]
    group: str  # whose committed offsets on the input are the worker's progress
    sink: str  # where its output goes
    via: tuple[str, ...] = ()  # internal topics it must have drained too when its input is committed


def _java(main: str, *args: str) -> list[str]:
    if not (JVM / "runtime-bench.jar").exists():
        raise SystemExit(f"{JVM}/runtime-bench.jar is missing: run 'make bench-runtime' "
                         "(mvn -q package in bench/runtimes/jvm)")
    return ["java", "-cp", f"{JVM / 'runtime-bench.jar'}:{JVM / 'lib'}/*", main, *args]


def _venv(python: Path) -> str:
    if not python.exists():
        raise SystemExit(f"{python} is missing: run 'make bench-runtime'")
    return str(python)


def worker(runtime: str, kafka: KafkaConfig, source: str, state_dir: Path, prefix: str = "") -> Worker:
    """``runtime``'s worker on ``source``, a fresh group and a fresh output topic (created here);
    the URL stage's output is ``prefix``'s new-URLs topic (``source`` is ``prefix``'s frontier)."""
    group = h.fresh_name(f"g-{runtime}")
    bootstrap = kafka.bootstrap_servers
    if runtime == "url-dedup":
        topics = Topics(prefix)
        assert source == topics.frontier, "the URL stage reads its prefix's frontier"
        command = ["env", f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}", PYTHON, "-m", "streams", "url-dedup",
                   "--topic-prefix", prefix, "--app-id", group, "--worker-id", "w0",
                   "--state-dir", str(state_dir), "--shards", str(PARTITIONS)]
        return Worker(command, topics.group(group, "url-dedup"), topics.new_urls,
                      (topics.shards(group, "url-dedup"),))
    sink = h.fresh_name(f"out-{runtime}")
    h.create_topics(kafka, [sink], PARTITIONS)
    io = ["--bootstrap", bootstrap, "--input", source, "--output", sink]
    if runtime in ("passthrough", "url-passthrough"):
        return Worker([PYTHON, "-m", "bench.runtimes.passthrough", *io, "--group", group], group, sink)
    if runtime in ("jvm-passthrough", "url-jvm-passthrough"):
        return Worker(_java("bench.jvm.Passthrough", *io, "--group", group), group, sink)
    if runtime == "confluent":
        command = [PYTHON, "-m", "testing.first_seen", "--input", source, "--output", sink,
                   "--app-id", group, "--worker-id", "w0", "--state-dir", str(state_dir),
                   "--topic-prefix", f"{group}."]
        return Worker(command, f"{group}.{group}.first-seen", sink)
    if runtime == "quix":
        command = [_venv(QUIX_PYTHON), "bench/runtimes/quix_first_seen.py", *io, "--group", group,
                   "--state-dir", str(state_dir)]
        return Worker(command, group, sink)
    if runtime == "kstreams":
        command = _java("bench.jvm.KafkaStreamsUrlDedup", *io, "--app-id", group,
                        "--state-dir", str(state_dir))
        return Worker(command, group, sink, (f"{group}-by-host-repartition",))
    if runtime == "flink":
        command = [_venv(FLINK_PYTHON), "bench/runtimes/flink_url_dedup.py", *io, "--group", group,
                   "--state-dir", str(state_dir)]
        return Worker(command, group, sink)
    raise ValueError(runtime)
