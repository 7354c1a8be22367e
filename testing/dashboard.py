"""The Grafana dashboard's queries (ops/grafana/dashboards/crawl-dedup.json), as the dashboard test
checks them against the metrics and the Prometheus test runs them against real workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parent.parent / "ops" / "grafana" / "dashboards" / "crawl-dedup.json"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(found: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows too."""
    for panel in found:
        yield panel
        yield from panels(panel.get("panels", []))


def queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    loaded = dashboard()
    for panel in panels(loaded["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in loaded.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            yield f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query
