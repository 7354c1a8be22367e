"""The command line as an operator meets it: --version, one-line help, global options anywhere,
usage errors in one line with exit 2."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

import streams.cli as cli
from streams.broker import kafka_release
from streams.version import TESTED_CONFLUENT_KAFKA, TESTED_LIBRDKAFKA, version_text
from testing.cli import PROJECT_ROOT


def _run(*args: str, env: dict[str, str] | None = None,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, input=stdin, timeout=60, check=False)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    actions = [action for action in cli._parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def test_version_names_the_build_and_the_tested_pins() -> None:
    text = version_text()
    assert text.startswith("crawl-dedup ")
    assert "hot path compiled" in text or "pure Python" in text
    assert f"Apache Kafka {kafka_release.pinned().kafka_version}" in text
    assert f"librdkafka {TESTED_LIBRDKAFKA} (confluent-kafka {TESTED_CONFLUENT_KAFKA})" in text
    result = _run("--version")
    assert result.returncode == 0 and result.stdout == text


def test_the_tested_pins_are_constraints_txts() -> None:
    pins = dict(line.split("#")[0].strip().split("==") for line in
                (PROJECT_ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["confluent-kafka"] == TESTED_CONFLUENT_KAFKA
    import confluent_kafka

    if confluent_kafka.version() == TESTED_CONFLUENT_KAFKA:  # the wheel CI installs bundles this one
        assert confluent_kafka.libversion()[0] == TESTED_LIBRDKAFKA


def test_every_command_has_a_one_line_description() -> None:
    """One line in ``--help`` at 80 columns: argparse puts the help at column 24 of 80."""
    actions = [action for action in cli._parser()._actions if isinstance(action, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in actions[0]._choices_actions}
    assert set(helps) == set(_subcommands())
    for name, description in helps.items():
        assert description and len(description) <= 54 and "\n" not in description, name


@pytest.mark.parametrize("argv", [
    ["--log-level", "info", "canonicalize"],
    ["canonicalize", "--log-level", "info"],
    ["--log-level", "INFO", "canonicalize"],
])
def test_log_level_goes_before_or_after_the_command(argv: list[str]) -> None:
    assert cli._parser().parse_args(argv).log_level == "info"


def test_config_goes_before_or_after_the_command() -> None:
    assert str(cli._parser().parse_args(["--config", "a.toml", "lag"]).config) == "a.toml"
    assert str(cli._parser().parse_args(["lag", "--config", "b.toml"]).config) == "b.toml"
    assert cli._parser().parse_args(["lag"]).config is None


def test_the_log_level_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.LOG_LEVEL_ENV, "ERROR")
    assert cli._parser().parse_args(["lag"]).log_level == "error"
    assert cli._parser().parse_args(["lag", "--log-level", "debug"]).log_level == "debug"


@pytest.mark.parametrize(("argv", "env", "says"), [
    (["no-such-command"], {}, "invalid choice: 'no-such-command'"),
    (["url-dedup", "--shards", "many"], {}, "invalid int value: 'many'"),
    (["tail", "--log-level", "loud"], {}, "invalid choice: 'loud'"),
    (["reshard"], {}, "the following arguments are required"),
    (["lag"], {cli.LOG_LEVEL_ENV: "verbose"}, "STREAMS_LOG_LEVEL='verbose' is not one of"),
    (["lag"], {cli.LOG_FORMAT_ENV: "yaml"}, "STREAMS_LOG_FORMAT='yaml' is not one of text, json"),
    (["lag", "--log-format", "xml"], {}, "invalid choice: 'xml'"),
])
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str], env: dict[str, str], says: str) -> None:
    result = _run(*argv, env=env)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_fatal_error_says_what_to_do(log_format: str) -> None:
    result = _run("url-dedup", "--offline", env={"STREAMS_RUNTIME_SHARDS": "many",
                                                 cli.LOG_FORMAT_ENV: log_format}, stdin="")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    if log_format == "text":
        assert result.stderr.startswith("error: setting STREAMS_RUNTIME_SHARDS: cannot read 'many' as int "
                                        "(what to do: correct the setting"), result.stderr
    else:
        line = json.loads(result.stderr)
        assert (line["level"], line["fields"]["error"], line["stage"]) == ("critical", "ConfigError", None)
        assert line["message"].startswith("setting STREAMS_RUNTIME_SHARDS") and line["fields"]["what_to_do"]


def test_a_spawned_child_imports_the_main_module_without_the_command_line() -> None:
    """A ``spawn`` child of ``python -m streams`` (the group describer, a restore process) imports
    ``streams.__main__`` as ``__mp_main__``: that must not cost it the whole command line."""
    probe = ("import runpy, sys; runpy.run_module('streams.__main__', run_name='__mp_main__'); "
             "print('streams.cli' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "False"
