"""The comparison point of the URL benchmark: dedup the way scrapy-redis does it.

scrapy-redis's RFPDupeFilter fingerprints a request with SHA1 over the w3lib-canonicalized URL (and
method and body) and asks Redis ``SADD`` per request, one round trip each, whether it is new
(field notes; scrapy-redis ``dupefilter.py``). Here: the same frontier records from Kafka, w3lib's
``canonicalize_url``, SHA1, one ``SADD`` per URL into a local redis-server, and each new URL
produced to the output topic. No transactions: this is its best case.

    python -m bench.runtimes.scrapy_redis_style --input IN --output OUT --group G --redis-port P
"""

from __future__ import annotations

import argparse
import hashlib
from urllib.parse import urljoin

import orjson
import redis
from confluent_kafka import Message, Producer
from w3lib.url import canonicalize_url

from bench.runtimes.passthrough import consume_loop
from streams.runtime.kafka_io import KafkaConfig


def run(kafka: KafkaConfig, source: str, sink: str, group: str, redis_port: int, key: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_port)

    def dedup(message: Message, producer: Producer) -> None:
        record = orjson.loads(message.value() or b"{}")
        url = canonicalize_url(urljoin(record.get("source_url") or "", record["url"]))
        fingerprint = hashlib.sha1(b"GET" + url.encode()).hexdigest()
        if client.sadd(key, fingerprint):  # one round trip per URL, as scrapy-redis does
            producer.produce(sink, orjson.dumps({"url": record["url"], "canonical": url}))

    consume_loop(kafka, [source], group, dedup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--redis-port", type=int, required=True)
    args = parser.parse_args()
    run(KafkaConfig(args.bootstrap), args.input, args.output, args.group, args.redis_port,
        f"{args.group}:dupefilter")


if __name__ == "__main__":
    main()
