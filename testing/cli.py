"""The command line run against the test broker, as an operator runs it (``python -m streams ...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streams import config
from streams.runtime.kafka_io import KafkaConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def run_cli(kafka: KafkaConfig, *args: str, timeout_s: float = 120,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m streams`` against the test broker."""
    env = {**os.environ, config.BOOTSTRAP_ENV: kafka.bootstrap_servers}
    return subprocess.run([sys.executable, "-m", "streams", *args], input=stdin, capture_output=True,
                          timeout=timeout_s, env=env, cwd=PROJECT_ROOT, check=False)
