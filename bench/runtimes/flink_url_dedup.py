"""The runtime benchmark's URL dedup on Flink, as a Flink shop would write it with PyFlink: the
DataStream API, a ``KafkaSource`` on the frontier, each record canonicalized and keyed by its host,
a ``KeyedProcessFunction`` with keyed state per URL fingerprint, a ``KafkaSink``; the RocksDB state
backend, checkpoints every ``--checkpoint-ms`` (2 s) with exactly-once delivery (the sink's Kafka
transactions commit when a checkpoint completes; the source commits its offsets to the group then
too, which is what the benchmark reads as progress), checkpoints retained on cancellation.

A restart, after a SIGKILL or not, resumes from the latest retained checkpoint under
``--state-dir`` (``execution.state-recovery.path``), as an operator would with ``flink run -s``;
without one it reads the frontier from the earliest offset (nothing was committed before the first
checkpoint). One task slot, parallelism 1, as every other runtime of the benchmark runs one worker.

State: Flink's keyed state is scoped to the stream's key, here the host (the repartition by host
of the Kafka Streams version); the state per URL fingerprint under it is a ``MapState`` entry (a
``ValueState`` per fingerprint would need the fingerprint as the stream key, which no longer
groups a host's URLs). RocksDB keeps each entry as a key of its own (key group, host, fingerprint).

Canonicalization: the same plain RFC 3986 normalization as the Kafka Streams version
(``bench/runtimes/jvm/.../UrlCanon.java``), not the project's canonicalizer; see :func:`canonical`.

Standalone on purpose: it runs in the virtualenv ``.venv-flink`` (``make bench-runtime``, pinned in
``bench/runtimes/flink-requirements.txt``) and imports nothing of ``streams``. The Kafka connector
jar (``flink-sql-connector-kafka``, from Maven Central) is copied by the JVM runtimes' Maven build
into ``bench/runtimes/jvm/target/flink``.

    .venv-flink/bin/python bench/runtimes/flink_url_dedup.py --input FRONTIER --output NEW_URLS \
        --group G --state-dir DIR [--bootstrap B] [--checkpoint-ms 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
CONNECTOR = HERE / "jvm" / "target" / "flink"
UNRESERVED = re.compile(r"%([0-9A-Fa-f]{2})")
DEFAULT_PORTS = {"http": 80, "https": 443}


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4."""
    output: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if len(output) > 1:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if path.endswith(("/.", "/..")):
        output.append("")
    return "/".join(output) or "/"


def _escapes(text: str) -> str:
    """%XX of an unreserved character decoded, any other upper-cased (RFC 3986 6.2.2.1-2)."""
    def one(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char.isascii() and (char.isalnum() or char in "-._~") else "%" + match.group(1).upper()
    return UNRESERVED.sub(one, text)


def _resolve(url: str, base: str) -> str:
    """A relative reference against its page (RFC 3986 section 5.2.2, the common cases)."""
    parts = urlsplit(base)
    if url.startswith("//"):
        return f"{parts.scheme}:{url}"
    if url.startswith("/"):
        return f"{parts.scheme}://{parts.netloc}{url}"
    if url.startswith("?"):
        return f"{parts.scheme}://{parts.netloc}{parts.path}{url}"
    directory = parts.path[: parts.path.rfind("/") + 1] or "/"
    return f"{parts.scheme}://{parts.netloc}{directory}{url}"


def canonical(url: str, base: str | None) -> tuple[str, str] | None:
    """(canonical URL, host), or None: scheme and host lower-cased, the default port and the
    fragment dropped, dot segments removed, escapes of unreserved characters decoded (RFC 3986
    sections 5.2 and 6.2.2-6.2.3), relative links resolved against ``source_url``. Only http(s)."""
    url = url.strip()
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", url):
        if not base:
            return None
        url = _resolve(url, base.strip())
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host:
        return None
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _escapes(_remove_dot_segments(parts.path or "/"))
    query = f"?{_escapes(parts.query)}" if parts.query or url.split("#", 1)[0].endswith("?") else ""
    return f"{scheme}://{netloc}{path}{query}", host


def discovered(value: str) -> Iterator[tuple[str, str, str]]:
    """(host, url, canonical) of a frontier record; nothing for one that does not parse."""
    try:
        record = json.loads(value)
        found = canonical(record["url"], record.get("source_url"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return
    if found is not None:
        yield found[1], record["url"], found[0]


def latest_checkpoint(directory: Path) -> Path | None:
    """The newest complete retained checkpoint (``<job>/chk-<n>/_metadata``) of any earlier run."""
    found = sorted(directory.glob("*/chk-*/_metadata"), key=lambda path: path.stat().st_mtime)
    return found[-1].parent if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--checkpoint-ms", type=int, default=2000)
    args = parser.parse_args()

    # The job runs in a local cluster in a JVM this process starts, with Python workers beside it:
    # SIGTERM (the benchmark's stop, after its output was read) ends them all with this process.
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(os.getpgid(0), signal.SIGKILL))

    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
    from pyflink.datastream.connectors.kafka import (
        DeliveryGuarantee,
        KafkaOffsetsInitializer,
        KafkaRecordSerializationSchema,
        KafkaSink,
        KafkaSource,
    )
    from pyflink.datastream.state import MapStateDescriptor

    class FirstSighting(KeyedProcessFunction):
        """Per host, the fingerprints seen (first-seen time); a URL passes the first time."""

        def open(self, runtime_context: RuntimeContext) -> None:
            self.seen = runtime_context.get_map_state(
                MapStateDescriptor("seen-urls", Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.LONG()))

        def process_element(self, value, ctx):  # noqa: ANN001, ANN201 (PyFlink's signature)
            _host, url, canonical_url = value
            fingerprint = hashlib.sha256(canonical_url.encode()).digest()[:16]
            if not self.seen.contains(fingerprint):
                self.seen.put(fingerprint, int(time.time() * 1000))
                yield json.dumps({"url": url, "canonical": canonical_url})

    state_dir = Path(args.state_dir).resolve()
    checkpoints = state_dir / "checkpoints"
    (state_dir / "tmp").mkdir(parents=True, exist_ok=True)
    settings = {
        "state.backend.type": "rocksdb",
        "state.backend.incremental": "true",
        "execution.checkpointing.dir": checkpoints.as_uri(),
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.num-retained": "1",
        "io.tmp.dirs": str(state_dir / "tmp"),
        "pipeline.jars": ";".join(jar.as_uri() for jar in sorted(CONNECTOR.glob("flink-*.jar"))),
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "parallelism.default": "1",
    }
    restore = latest_checkpoint(checkpoints) if checkpoints.exists() else None
    if restore is not None:
        settings["execution.state-recovery.path"] = str(restore)
    print(f"flink url dedup: {f'restoring from {restore}' if restore else 'fresh start'}", flush=True)
    config = Configuration()
    for key, value in settings.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)

    source = (KafkaSource.builder()
              .set_bootstrap_servers(args.bootstrap)
              .set_topics(args.input)
              .set_group_id(args.group)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema())
              .set_property("commit.offsets.on.checkpoint", "true")
              .build())
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(args.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                   .set_topic(args.output)
                                   .set_value_serialization_schema(SimpleStringSchema())
                                   .build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(args.group)
            # The sink's default (1 h) is above the broker's transaction.max.timeout.ms (15 min).
            .set_property("transaction.timeout.ms", "60000")
            .build())
    frontier = env.from_source(source, WatermarkStrategy.no_watermarks(), "frontier")
    found = frontier.flat_map(discovered, output_type=Types.TUPLE([Types.STRING()] * 3))
    new_urls = found.key_by(lambda record: record[0], key_type=Types.STRING()).process(
        FirstSighting(), output_type=Types.STRING())
    new_urls.sink_to(sink)
    env.execute("url-dedup")


if __name__ == "__main__":
    main()
