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

from streams import config, kafka_local
from streams.runtime.kafka_io import KafkaConfig, TopicSpec, ensure_topics, produce_all, read_to_end
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


def run() -> int:
    external = config.bootstrap_servers()
    broker = kafka_local.LocalBroker()
    started_here = external is None and kafka_local.running_pid(broker) is None
    address = external or kafka_local.start(broker)
    print("1. broker:", address, "(started by the demo)" if started_here else "")
    kafka = KafkaConfig(external or broker.bootstrap, config.kafka_client_settings())
    topics = Topics(f"demo-{time.strftime('%H%M%S')}.")
    crawl = generate()
    ensure_topics(kafka, [TopicSpec(topics.frontier, 4)])
    produce_all(kafka, topics.frontier, ((None, value) for value in crawl.records))
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
    new_urls = list(read_to_end(kafka, topics.new_urls))
    letters = read_to_end(kafka, topics.dead_letters)
    reasons = Counter(orjson.loads(m.value() or b"{}")["reason"] for m in letters)
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
