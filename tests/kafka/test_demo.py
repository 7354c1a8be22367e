"""``make demo`` end to end against the test broker: its summary must match what it planted."""

from __future__ import annotations

from streams.runtime.kafka_io import KafkaConfig
from testing.cli import run_cli


def test_demo_summary_matches_the_planted_crawl(kafka: KafkaConfig) -> None:
    result = run_cli(kafka, "demo", timeout_s=300)
    out = " ".join(result.stdout.decode().split())  # the summary's column spacing is not the point
    assert result.returncode == 0, out + result.stderr.decode()[-2000:]
    assert "new URLs out 5,000 planted distinct: 5,000" in out
    assert "mirrors found 60 of 60" in out
    assert "dead letters 26" in out
    assert "counts match what was planted" in out  # streams.dev.demo.mismatches found none
    assert "6. stopped the workers" in out
