"""The URL stage's declaration: its topics, settings, options and extra commands (:mod:`streams.spec`).

Its extra commands work on what its settings shape: ``url-dedup-migrate`` moves the seen-set to new
canonicalization settings (:mod:`streams.stages.url_dedup.migrate`), ``canonicalize`` shows what
those settings make of URLs.
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

from streams import config
from streams.config import RuntimeSettings
from streams.runtime.api import Stage
from streams.spec import Command, StageSpec
from streams.topics import Topics

NAME = "url-dedup"


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    from streams.stages.url_dedup.stage import UrlDedupStage

    return UrlDedupStage(settings, runtime.max_record_bytes)


def canonicalization_options(command: argparse.ArgumentParser) -> None:
    """The options the URL stage's state depends on (its fingerprints are of canonical URLs)."""
    command.add_argument("--profile", choices=["safe", "aggressive"], default=None,
                         help="canonicalization profile (default safe; rules in docs/canonicalization.md)")


def _options(command: argparse.ArgumentParser) -> None:
    canonicalization_options(command)
    command.add_argument("--seen-set", choices=["exact", "bloom"], default=None,
                         help="exact: RocksDB set behind a Bloom filter (default); "
                              "bloom: a Bloom filter only")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"profile": getattr(args, "profile", None), "seen_set": getattr(args, "seen_set", None)}


def _migrate_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--app-id", default=None)
    command.add_argument("--topic-prefix", default=None)
    canonicalization_options(command)


def _migrate(spec: StageSpec, args: argparse.Namespace) -> int:
    from streams.cluster import kafka_config
    from streams.stages.url_dedup.migrate import migrate

    settings = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id)
    topics = Topics(config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix)
    topology = spec.topology(topics, settings.app_id)
    report = migrate(kafka_config(args.config), topology.group, topology.shard_topics[0], topology.changelog,
                     spec.load_settings(args))
    print(f"re-fingerprinted {report.urls} URLs: {report.moved} moved, {report.merged} merged, "
          f"{report.rejected} refused by the new rules (kept)")
    return 0


def _canonicalize(spec: StageSpec, args: argparse.Namespace) -> int:
    from streams.urls.canonical import canonicalize_lines

    canonicalize_lines(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape"),
                       sys.stdout, spec.load_settings(args).canonical())
    return 0


SPEC = StageSpec(
    NAME, "emit each new frontier URL once", inputs=("frontier",), outputs=("new-urls",), build=_build,
    metrics_port=9410, decisions=("new", "seen"),
    settings_class="streams.stages.url_dedup.settings:UrlDedupSettings", settings_section="url_dedup",
    options=_options, overrides=_overrides, state_options=canonicalization_options,
    commands=(
        Command("url-dedup-migrate", "re-fingerprint the URL seen-set",
                "Re-fingerprint the URL stage's seen-set for new canonicalization settings.",
                _migrate_options, _migrate, "state"),
        Command("canonicalize", "canonical URLs and fingerprints of stdin's URLs",
                "URLs on stdin, one per line -> {url, canonical, fingerprint} JSON lines.",
                canonicalization_options, _canonicalize, "tool"),
    ))
