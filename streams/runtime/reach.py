"""The first contact with the cluster: said at once, and re-said while the cluster does not answer.

A worker's first Kafka call is a metadata request (which topics exist, how many partitions). Against
a cluster that is down, or a wrong ``KAFKA_BOOTSTRAP_SERVERS``, librdkafka keeps retrying it until
its timeout (30 s) and the worker said nothing meanwhile: an operator watching a fresh worker saw
half a minute of silence before the one line that named the problem, and could not tell a worker
waiting for its cluster from one that hangs. So the worker says where it connects before it asks,
and, while no answer comes, says every ``say_every_s`` how long it has waited and for how much
longer; the last failure still ends the command with the client's own reason (``Failed to get
metadata: ... Broker transport failure``) and what to do (:func:`streams.ops.logs.last_words`).
The total wait is unchanged: a worker that starts before its cluster (compose, a rolling restart)
still gets the same 30 s for the cluster to come up.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.runtime.client_log import error_text
from streams.runtime.kafka_io import KafkaConfig

log: Final = logging.getLogger(__name__)

REACH_TIMEOUT_S: Final = 30.0  # librdkafka's metadata wait the worker had before; unchanged
SAY_EVERY_S: Final = 5.0


def reach_cluster(kafka: KafkaConfig, timeout_s: float = REACH_TIMEOUT_S,
                  say_every_s: float = SAY_EVERY_S) -> int:
    """Wait until the cluster answers a metadata request; return how many brokers it lists.

    Raises the client's :class:`KafkaException` once ``timeout_s`` passed without an answer."""
    log.info("connecting to Kafka at %s", kafka.bootstrap_servers)
    admin = AdminClient(kafka.admin())
    began = time.monotonic()
    while True:
        left_s = timeout_s - (time.monotonic() - began)
        try:
            return len(admin.list_topics(timeout=max(0.1, min(say_every_s, left_s))).brokers)
        except KafkaException as error:
            if left_s <= say_every_s:  # this attempt had the time that was left
                raise
            waited_s = time.monotonic() - began
            log.warning("no answer from Kafka at %s after %.0f s (%s); waiting up to %.0f s more",
                        kafka.bootstrap_servers, waited_s, error_text(error), timeout_s - waited_s)
