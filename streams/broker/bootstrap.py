"""The Kafka cluster a command talks to: one answer for the stages and every operations command.

``KAFKA_BOOTSTRAP_SERVERS`` when it is set (an existing cluster), else the address of the
project's local broker (``python -m streams kafka start``). Client settings (SASL, TLS...) come
from ``STREAMS_KAFKA_*`` variables and the TOML file's ``[kafka]`` table and pass through
untouched (:func:`streams.config.kafka_client_settings`). Its own module, below the CLI, so the
commands the CLI dispatches to can ask it without importing the CLI back.
"""

from __future__ import annotations

from pathlib import Path

from streams import config
from streams.broker import kafka_local
from streams.runtime.admin import KafkaConfig


def kafka_config(toml_path: Path | None = None) -> KafkaConfig:
    """The bootstrap address and client settings, from the environment and ``toml_path``."""
    bootstrap = config.bootstrap_servers() or kafka_local.LocalBroker().bootstrap
    return KafkaConfig(bootstrap, config.kafka_client_settings(toml_path))
