"""Settings: defaults, TOML, environment (which wins), Kafka pass-through, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import config
from streams.errors import ConfigError
from streams.topics import Topics


def test_defaults() -> None:
    settings = config.load(config.RuntimeSettings, "runtime", environ={})
    assert settings.shards == 8
    assert settings.state_dir == Path("state")


@pytest.mark.parametrize(
    ("toml", "environ", "expected_shards"),
    [
        ("", {}, 8),
        ("[runtime]\nshards = 16\n", {}, 16),
        ("[runtime]\nshards = 16\n", {"STREAMS_RUNTIME_SHARDS": "4"}, 4),
        ("", {"STREAMS_RUNTIME_SHARDS": "32"}, 32),
    ],
)
def test_environment_wins_over_toml(tmp_path: Path, toml: str, environ: dict[str, str],
                                    expected_shards: int) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    assert config.load(config.RuntimeSettings, "runtime", path, environ=environ).shards == expected_shards


def test_overrides_win_and_none_means_unset() -> None:
    settings = config.load(config.RuntimeSettings, "runtime", environ={"STREAMS_RUNTIME_SHARDS": "4"},
                           shards=None, app_id="x")
    assert (settings.shards, settings.app_id) == (4, "x")


@pytest.mark.parametrize(
    ("toml", "environ", "message"),
    [
        ("", {"STREAMS_RUNTIME_SHARDS": "many"}, "STREAMS_RUNTIME_SHARDS"),
        ("[runtime]\nshardz = 3\n", {}, "unknown settings"),
        ("[runtime\n", {}, "cannot read config"),
        ("runtime = 3\n", {}, "not a table"),
    ],
)
def test_bad_settings_are_config_errors(tmp_path: Path, toml: str, environ: dict[str, str],
                                        message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message):
        config.load(config.RuntimeSettings, "runtime", path, environ=environ)


def test_kafka_security_settings_pass_through(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\n"ssl.ca.location" = "/etc/ca.pem"\n')
    environ = {"STREAMS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "STREAMS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}
    assert config.kafka_client_settings(path, environ) == {
        "ssl.ca.location": "/etc/ca.pem", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
    }


@pytest.mark.parametrize(("environ", "expected"), [({}, None), ({"KAFKA_BOOTSTRAP_SERVERS": " h:9 "}, "h:9")])
def test_bootstrap_servers(environ: dict[str, str], expected: str | None) -> None:
    assert config.bootstrap_servers(environ) == expected


def test_topic_names_live_in_one_place() -> None:
    topics = Topics("p.")
    assert topics.frontier == "p.frontier"
    assert topics.shards("app", "url-dedup") == "p.app.url-dedup.shards"
    assert topics.changelog("app", "url-dedup") == "p.app.url-dedup.changelog"
    assert len(set(topics.shared())) == 7


def test_a_misspelt_variable_is_refused() -> None:
    with pytest.raises(ConfigError, match="STREAMS_RUNTIME_SHARD"):
        config.load(config.RuntimeSettings, "runtime", environ={"STREAMS_RUNTIME_SHARD": "4"})


@pytest.mark.parametrize(("raw", "ok"), [("tf", True), ("binary", True), ("log_tf", True), ("TF", False)])
def test_literal_settings_are_read_and_checked(raw: str, ok: bool) -> None:
    from streams.stages.content_seen.stage import ContentSeenSettings

    environ = {"STREAMS_CONTENT_SEEN_WEIGHTING": raw}
    if ok:
        assert config.load(ContentSeenSettings, "content_seen", environ=environ).weighting == raw
    else:
        with pytest.raises(ConfigError, match="not one of"):
            config.load(ContentSeenSettings, "content_seen", environ=environ)


def test_kafka_table_keys_quoted_or_dotted(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text('[kafka]\nsecurity.protocol = "SASL_SSL"\n"sasl.mechanism" = "SCRAM-SHA-512"\n'
                    'enable.ssl.certificate.verification = false\n')
    assert config.kafka_client_settings(path, environ={}) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "enable.ssl.certificate.verification": "false"}
