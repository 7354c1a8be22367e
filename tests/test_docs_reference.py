"""The site's generated reference pages are current: the command line as ``--help`` prints it, the
records as schemas/ describes them (docs/gen_reference.py writes both; regenerate with
``.venv/bin/python docs/gen_reference.py``). The option tables have tests/test_config_docs.py.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from streams.cli import _parser

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "docs" / "gen_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="argparse words --help differently in other releases; the page is 3.11's, CI's")
def test_the_command_line_page_is_what_help_prints() -> None:
    assert gen.CLI_PAGE.read_text() == gen.cli_page(), "stale: run .venv/bin/python docs/gen_reference.py"


def test_the_command_line_page_has_every_command() -> None:
    page = gen.CLI_PAGE.read_text()
    commands = gen._subcommands(_parser())
    assert commands and all(f"## `{name}`\n" in page for name in commands)


def test_the_records_page_is_what_the_schemas_say() -> None:
    assert gen.RECORDS_PAGE.read_text() == gen.records_page(), \
        "stale: run .venv/bin/python docs/gen_reference.py"


def test_the_records_page_has_every_schema_and_field() -> None:
    page = gen.RECORDS_PAGE.read_text()
    for path in sorted(gen.SCHEMAS.glob("*.schema.json")):
        name = path.name.removesuffix(".schema.json")
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for field in gen.json.loads(path.read_text())["properties"]:
            assert f"| `{field}` |" in section, (name, field)


def test_the_readme_is_short_and_its_links_exist() -> None:
    """The README is the first screen (install, a start, Scrapy, settings, where to read on); the
    depth is on the site, which mkdocs build --strict checks (make docs)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert local and [target for target in local if not (ROOT / target).exists()] == []


def test_user_documentation_names_no_issue_numbers() -> None:
    """Sections are named for what they cover; a reader has no issue tracker."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [(page.name, line) for page in pages for line in page.read_text().splitlines()
             if re.search(r"issues? [0-9]+", line, re.IGNORECASE)]
    assert found == []
