"""docs/configuration.md lists every option the code reads, with its real name and default.

The expected rows are built here from the dataclasses, the way :func:`streams.config.load` reads
them (``dataclasses.fields``, so inherited fields count), independently of the generator,
docs/gen_config_table.py, whose output must also equal the file (regenerate with
``.venv/bin/python docs/gen_config_table.py``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import tomllib
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from streams import config, registry
from streams.cli import _parser

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
TABLES = DOC  # the generated option tables are in it too
GENERATOR = ROOT / "docs" / "gen_config_table.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_table", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen = _generator()


def _sections() -> dict[str, type]:
    return {section.name: section.cls for section in gen.SECTIONS}


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def expected_rows() -> list[tuple[str, str, str, dataclasses.Field[Any]]]:
    """(section, env var, default as the environment spells it, field) for every option."""
    rows = []
    for section, cls in _sections().items():
        for spec in dataclasses.fields(cls):
            env = f"STREAMS_{section.upper()}_{spec.name.upper()}"
            default = "" if spec.default is dataclasses.MISSING else _env_text(spec.default)
            rows.append((section, env, default, spec))
    return rows


def _generated() -> str:
    """The option tables: the part of the page between the generator's markers."""
    text = TABLES.read_text()
    return text[text.index(gen.BEGIN):text.index(gen.END)]


def _row_of(env: str) -> str:
    lines = [line for line in _generated().splitlines() if line.startswith(f"| `{env}` |")]
    assert len(lines) == 1, f"{env}: {len(lines)} rows in {TABLES.name}"
    return lines[0]


def test_doc_is_generated_from_the_dataclasses() -> None:
    current = TABLES.read_text()
    assert gen.render(current) == current, "stale: run .venv/bin/python docs/gen_config_table.py"
    assert "python docs/gen_config_table.py" in "\n".join(DOC.read_text().splitlines()[:10])


def test_sections_are_the_ones_the_code_loads() -> None:
    """Every ``config.load(Class, "section")`` in streams/ and every registered stage's settings are
    documented, and nothing else."""
    loaded = set()
    for path in (ROOT / "streams").rglob("*.py"):
        for cls, section in re.findall(r'\bload\(\s*(?:[\w]+\.)*(\w+),\s*"(\w+)"', path.read_text()):
            loaded.add((section, cls))
    for spec in registry.STAGES:
        if spec.settings is not None:
            loaded.add((spec.settings.section, spec.settings.type().__name__))
    assert loaded == {(name, cls.__name__) for name, cls in _sections().items()}


@pytest.mark.parametrize(("section", "env", "default", "spec"), expected_rows(),
                         ids=[row[1] for row in expected_rows()])
def test_option_row(section: str, env: str, default: str, spec: dataclasses.Field[Any]) -> None:
    row = _row_of(env)
    assert f"`[{section}] {spec.name}`" in row
    if (section, spec.name) in gen.COMPUTED_DEFAULTS:
        assert f" | {gen.COMPUTED_DEFAULTS[(section, spec.name)]} | " in row
    elif spec.default is not dataclasses.MISSING:
        assert (f"`{default}`" if default else "(empty)") in row, f"{env}: default {default!r}"
    meaning = row.rstrip(" |").rsplit(" | ", 1)[1]
    assert len(meaning) > 10, f"{env}: no meaning"


def test_only_real_options_are_documented() -> None:
    documented = set(re.findall(r"^\| `(STREAMS_[A-Z0-9_]+)` \|", _generated(), re.MULTILINE))
    documented -= {"STREAMS_CONFIG"}
    assert documented == {env for _, env, _, _ in expected_rows()}
    assert set(gen.MEANINGS) == {(section, spec.name) for section, _, _, spec in expected_rows()}


def test_variables_outside_the_dataclasses_are_documented() -> None:
    text = DOC.read_text()
    for name in (config.BOOTSTRAP_ENV, config.KAFKA_ENV_PREFIX, "STREAMS_CONFIG", "--config"):
        assert name in text


def test_flags_exist() -> None:
    subcommands = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    options = {option for command in subcommands.values() for option in command._option_string_actions}
    for (section, field), flag in gen.FLAGS.items():
        assert flag in options, f"[{section}] {field}: no command has {flag}"
        assert field in {spec.name for spec in dataclasses.fields(_sections()[section])}


def _literal(spec: dataclasses.Field[Any], cls: type) -> bool:
    return typing.get_origin(typing.get_type_hints(cls)[spec.name]) is typing.Literal


def _round_trip_cases() -> list[Any]:
    cases = []
    for section, env, default, spec in expected_rows():
        if spec.default is dataclasses.MISSING or (section, spec.name) in gen.COMPUTED_DEFAULTS:
            continue  # computed at start-up (worker_id: the host name; metrics port: the stage's)
        cases.append(pytest.param(section, env, default, spec, id=env))
    return cases


@pytest.mark.parametrize(("section", "env", "default", "spec"), _round_trip_cases())
def test_documented_default_reads_back(section: str, env: str, default: str,
                                       spec: dataclasses.Field[Any]) -> None:
    """The default as documented, set in the environment, reads back as the default."""
    settings = config.load(_sections()[section], section, environ={env: default})
    assert getattr(settings, spec.name) == spec.default


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_toml_examples_are_valid(tmp_path: Path) -> None:
    blocks = _blocks("toml")
    assert blocks
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.toml"
        path.write_text(block)
        document = tomllib.loads(block)
        for section in set(document) - {"kafka"}:
            config.load(_sections()[section], section, path, environ={})  # unknown keys raise
        kafka = config.kafka_client_settings(path, environ={})
        assert all("." in name and not value.startswith("{") for name, value in kafka.items()), kafka


def test_shell_examples_set_real_settings() -> None:
    for block in _blocks("sh"):
        for variable in re.findall(r"^export (STREAMS_\w+)=", block, re.MULTILINE):
            if variable.startswith(config.KAFKA_ENV_PREFIX):
                continue
            assert variable in {env for _, env, _, _ in expected_rows()}, variable
