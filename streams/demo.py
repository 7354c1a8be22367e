"""``make demo`` / ``python -m streams demo``: the URL stage end to end on a real broker.

What it does, in order, and prints as it goes:

1. starts the local single-node KRaft broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` names a cluster);
2. writes a generated frontier to a fresh ``demo-<time>.frontier`` topic: URLs discovered on a few
   hosts, most of them discovered many times over, plus malformed records (broken JSON, a number
   where the URL should be, a record without ``url``, a URL without a host);
3. runs the url-dedup stage as its own worker process until the frontier is drained;
4. reads the outputs back with read_committed and prints a summary: records in, new URLs out
   (which must equal the distinct URLs planted), dead letters by reason;
5. stops the worker and the broker it started, and deletes its state directory.

The content_seen and revisit stages join the demo when their issues land.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # re-exported by confluent_kafka.admin, not declared there

from streams import config, kafka_local
from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics

HOSTS = ["news.example", "shop.example", "blog.example", "wiki.example", "forum.example"]
MALFORMED = [b'{"url": "http://news.example/broken', b'{"url": 42}',
             b'{"source_url": "http://x.example/"}', b'{"url": "not a url at all"}']


@dataclass(frozen=True)
class PlantedCrawl:
    records: list[bytes]
    distinct_urls: int
    malformed: int


def generate(distinct: int = 5_000, repeats: int = 15_000, seed: int = 1) -> PlantedCrawl:
    """A frontier where each URL is discovered once or more, with malformed records mixed in."""
    rng = random.Random(seed)
    urls = [f"http://{rng.choice(HOSTS)}/articles/{i}" for i in range(distinct)]
    found = urls + [rng.choice(urls) for _ in range(repeats)]
    rng.shuffle(found)
    records = [orjson.dumps({"url": url, "source_url": f"http://{url.split('/')[2]}/", "depth": 1})
               for url in found]
    malformed = MALFORMED * 5
    for bad in malformed:
        records.insert(rng.randrange(len(records)), bad)
    return PlantedCrawl(records, distinct, len(malformed))


def _produce(kafka: KafkaConfig, topic: str, values: list[bytes]) -> None:
    producer = Producer(kafka.producer(**{"linger.ms": 20}))
    for value in values:
        producer.produce(topic, value)
        producer.poll(0)
    producer.flush(30)


def _read(kafka: KafkaConfig, topic: str) -> list[bytes]:
    consumer = Consumer(kafka.consumer(f"demo-reader-{time.time_ns()}", **{"enable.partition.eof": True}))
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[bytes] = []
    at_end: set[int | None] = set()
    while len(at_end) < len(partitions):
        for message in consumer.consume(5000, timeout=0.5):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
            elif error is None:
                values.append(message.value() or b"")
    consumer.close()
    return values


def run() -> int:
    external = config.bootstrap_servers()
    broker = kafka_local.LocalBroker()
    started_here = external is None and kafka_local.running_pid(broker) is None
    address = external or kafka_local.start(broker)
    print("1. broker:", address, "(started by the demo)" if started_here else "")
    kafka = KafkaConfig(external or broker.bootstrap, config.kafka_client_settings())
    topics = Topics(f"demo-{time.strftime('%H%M%S')}.")
    crawl = generate()
    admin = AdminClient(kafka.admin())  # kept alive until the topic exists
    admin.create_topics([NewTopic(topics.frontier, 4, 1)])[topics.frontier].result()
    _produce(kafka, topics.frontier, crawl.records)
    print(f"2. frontier: {len(crawl.records):,} records -> {topics.frontier} "
          f"({crawl.distinct_urls:,} distinct URLs, {crawl.malformed} malformed)")
    with tempfile.TemporaryDirectory(prefix="demo-state-") as state:
        began = time.monotonic()
        worker = subprocess.run(
            [sys.executable, "-m", "streams", "url-dedup", "--topic-prefix", topics.prefix,
             "--app-id", "demo", "--worker-id", "demo-0", "--state-dir", state, "--shards", "4",
             "--idle-exit-s", "3"],
            env={**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers},
            cwd=Path(__file__).resolve().parent.parent, check=False)
        print(f"3. url-dedup worker drained the frontier in {time.monotonic() - began:.1f} s "
              f"(exit {worker.returncode})")
    new_urls = _read(kafka, topics.new_urls)
    reasons = Counter(orjson.loads(v)["reason"] for v in _read(kafka, topics.dead_letters))
    ok = len(new_urls) == crawl.distinct_urls and sum(reasons.values()) == crawl.malformed
    print("4. summary (read_committed):")
    print(f"   URLs in            {len(crawl.records) - crawl.malformed:>8,}")
    print(f"   new URLs out       {len(new_urls):>8,}   planted distinct: {crawl.distinct_urls:,}")
    by_reason = ", ".join(f"{reason}: {count}" for reason, count in sorted(reasons.items()))
    print(f"   dead letters       {sum(reasons.values()):>8,}   {by_reason}")
    print("   counts match what was planted" if ok else "   MISMATCH against what was planted")
    if started_here:
        kafka_local.stop(broker)
        print("5. stopped the broker the demo started")
    return 0 if ok and worker.returncode == 0 else 1
