"""The baseline: a raw confluent-kafka consume -> produce loop, no state, no transactions.

Batched ``consume`` and ``produce``, offsets committed asynchronously after each batch (at least
once). It is the ceiling a stateful runtime is measured against on the same broker and input.
With ``--via TOPIC`` it makes the same two hops as a stage (input -> internal topic -> output).

    python -m bench.runtimes.passthrough --input IN --output OUT --group G [--via T] [--bootstrap B]
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer

from streams.runtime.kafka_io import KafkaConfig

Handle = Callable[[Message, Producer], None]


def consume_loop(kafka: KafkaConfig, topics: list[str], group: str, handle: Handle,
                 batch: int = 5000) -> None:
    """At-least-once consume -> ``handle`` -> produce, offsets committed asynchronously per batch,
    until SIGTERM. Shared by the baselines so they differ only in what they do per record."""
    consumer = Consumer(kafka.consumer(group, **{"isolation.level": "read_uncommitted",
                                                "enable.auto.offset.store": True}))
    producer = Producer(kafka.producer(**{"batch.size": 1_000_000}))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer.subscribe(topics)
    while not stopping:
        messages = consumer.consume(batch, timeout=0.25)
        for message in messages:
            if message.error() is None:
                handle(message, producer)
        producer.poll(0)
        if messages:
            consumer.commit(asynchronous=True)
    producer.flush(30)
    consumer.close()


def run(kafka: KafkaConfig, source: str, sink: str, group: str, via: str | None = None) -> None:
    def forward(message: Message, producer: Producer) -> None:
        target = via if via is not None and message.topic() == source else sink
        producer.produce(target, message.value(), message.key())

    consume_loop(kafka, [source] if via is None else [source, via], group, forward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--via", default=None, help="an internal topic to pass through first")
    args = parser.parse_args()
    run(KafkaConfig(args.bootstrap), args.input, args.output, args.group, args.via)


if __name__ == "__main__":
    main()
