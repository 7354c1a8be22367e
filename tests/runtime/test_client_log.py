"""librdkafka's lines through Python's logging: the first of a kind at its level, repeats at DEBUG."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.runtime.client_log import CLIENT_LOG, RepeatsDemoted, error_text
from streams.runtime.kafka_io import KafkaConfig

REFUSED = ("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused "
           "(after {}ms in state CONNECT)")


def _line(text: str, facility: str = "FAIL", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("streams.kafka.librdkafka", level, __file__, 1, "%s [%s] %s",
                             (facility, "rdkafka#producer-1", text), None)


@pytest.mark.parametrize(("lines", "shown_levels"), [
    ([_line(REFUSED.format(0))], [logging.ERROR]),
    ([_line(REFUSED.format(0)), _line(REFUSED.format(51)), _line(REFUSED.format(7))], [logging.ERROR]),
    ([_line(REFUSED.format(0)), _line("another failure"), _line(REFUSED.format(3), facility="CONNECT")],
     [logging.ERROR, logging.ERROR, logging.ERROR]),
    ([_line("debug chatter", level=logging.DEBUG)], []),
])
def test_a_repeat_is_demoted_and_hidden_at_info(lines: list[logging.LogRecord],
                                                shown_levels: list[int]) -> None:
    demote = RepeatsDemoted(repeat_s=60.0)
    logging.getLogger("streams.kafka.librdkafka").setLevel(logging.INFO)
    try:
        shown = [line.levelno for line in lines if demote.filter(line) and line.levelno > logging.DEBUG]
    finally:
        logging.getLogger("streams.kafka.librdkafka").setLevel(logging.NOTSET)
    assert shown == shown_levels


def test_repeats_are_kept_at_debug_where_debug_is_on() -> None:
    demote = RepeatsDemoted(repeat_s=60.0)
    CLIENT_LOG.setLevel(logging.DEBUG)
    try:
        first, again = _line(REFUSED.format(0)), _line(REFUSED.format(9))
        assert demote.filter(first) and first.levelno == logging.ERROR
        assert demote.filter(again) and again.levelno == logging.DEBUG
    finally:
        CLIENT_LOG.setLevel(logging.NOTSET)


def test_a_line_comes_back_at_its_level_after_the_window() -> None:
    demote = RepeatsDemoted(repeat_s=0.0)
    assert demote.filter(_line(REFUSED.format(0)))
    again = _line(REFUSED.format(1))
    assert demote.filter(again) and again.levelno == logging.ERROR


def test_every_client_configuration_names_the_logger() -> None:
    kafka = KafkaConfig("127.0.0.1:9092")
    for config in (kafka.producer(), kafka.consumer("group"), kafka.admin()):
        assert config["logger"] is CLIENT_LOG


METADATA_FAILED = "Failed to get metadata: Local: Broker transport failure"


@pytest.mark.parametrize(("error", "said"), [
    (KafkaException(KafkaError(KafkaError._TRANSPORT, METADATA_FAILED)), METADATA_FAILED),
    (KafkaException("plain words"), "plain words"),
    (KafkaException(), ""),
])
def test_error_text_is_the_clients_own_words(error: KafkaException, said: str) -> None:
    assert error_text(error) == said
