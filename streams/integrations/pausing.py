"""Pausing a consumer's intake while its process has no room, across rebalances.

librdkafka keeps a partition's pause when the partition is revoked and assigned to the same
consumer again, and a resume between a revocation and the next assignment resumes nothing (the
assignment is empty then). A flag "paused or not" kept beside the consumer therefore goes wrong
after a rebalance that falls while the intake is paused: the process believes it reads, and its
partitions stay paused for good. So the state is laid on the whole assignment again after every
change (``tests/kafka/test_scrapy_pausing.py`` plays that rebalance on the broker).
"""

from __future__ import annotations

from confluent_kafka import Consumer


class Pausing:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.paused = False
        self._changed = False  # the assignment changed since the state was last laid on it

    def assignment_changed(self) -> None:
        """From the rebalance callbacks (assigned, revoked, lost)."""
        self._changed = True

    def hold(self, paused: bool) -> None:
        """Paused (no room) or reading; a call that changes nothing costs nothing."""
        if paused != self.paused or self._changed:
            assignment = self.consumer.assignment()
            (self.consumer.pause if paused else self.consumer.resume)(assignment)
            self.paused, self._changed = paused, False
