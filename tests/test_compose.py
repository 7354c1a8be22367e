"""docker-compose.yml cannot run here (no Docker engine): check that what it runs exists.

Every stage service's command must parse with the real CLI parser, and every ``STREAMS_*`` variable
it sets must name a real setting.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams import config
from streams.cli import _parser

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
SECTIONS = {"RUNTIME": config.RuntimeSettings, "TOPICS": config.TopicSettings}


def _stage_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return {name: spec for name, spec in services.items() if spec.get("build")}


def test_compose_has_stage_services() -> None:
    assert _stage_services()


@pytest.mark.parametrize("name", sorted(_stage_services()))
def test_stage_command_parses(name: str) -> None:
    command = _stage_services()[name]["command"]
    args = _parser().parse_args(command)
    assert args.handler is not None


@pytest.mark.parametrize("name", sorted(_stage_services()))
def test_stage_settings_exist(name: str) -> None:
    for variable in _stage_services()[name].get("environment", {}):
        if not variable.startswith("STREAMS_") or variable.startswith("STREAMS_KAFKA_"):
            continue
        section, _, field = variable.removeprefix("STREAMS_").partition("_")
        fields = {f.name.upper() for f in dataclasses.fields(SECTIONS[section])}
        assert field in fields, variable
