"""The URL stage's declaration: its topics, settings, options and extra commands (:mod:`streams.spec`).

Its extra commands work on what its settings shape: ``url-dedup-migrate`` moves the seen-set to new
canonicalization settings (:mod:`streams.stages.url_dedup.migrate`), ``canonicalize`` shows what
those settings make of URLs.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from typing import Any

from streams import config
from streams.config import RuntimeSettings
from streams.runtime.api import Stage
from streams.spec import Command, CommandLine, Counts, EventCounter, OwnSettings, StageSpec
from streams.topics import Topics

NAME = "url-dedup"
EVENTS = (  # the stage's counts beside its decisions, exported as crawl_dedup_<series>_total
    EventCounter("forgotten", "urls_forgotten",
                 "url-dedup: URLs forget let go (new again at their next sighting)"),
    EventCounter("expired", "urls_expired",
                 "url-dedup: URLs new again because their mark was older than forget_after_days"),
)


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


def _migrate_command_options(command: argparse.ArgumentParser) -> None:
    _migrate_options(command)
    command.add_argument("--wait-s", type=float, default=60.0,
                         help="how long to wait for the stage's group to empty (default 60)")
    command.add_argument("--keep-old", action="store_true",
                         help="keep the old generation's shard topic and changelog (default: deleted)")


def _migrate(spec: StageSpec, args: argparse.Namespace) -> int:
    """A reshard to the shard count the state has, which the store's rewrite re-fingerprints
    (:mod:`streams.stages.url_dedup.migrate`)."""
    from streams.ops import reshard_command

    return reshard_command.run(spec, args)


def _forget_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("urls", nargs="*", metavar="URL",
                         help="URLs to forget, as a crawler wrote them (canonicalized as the stage does); "
                              "- reads them from stdin, one per line")
    command.add_argument("--host", default=None, help="every URL of this host (exactly: not its subdomains)")
    command.add_argument("--prefix", default=None, metavar="URL_PREFIX",
                         help="every URL whose canonical form starts with this (see canonicalize)")
    command.add_argument("--seen-before", default=None, metavar="DATE",
                         help="every URL marked seen before DATE (YYYY-MM-DD, UTC, or an RFC 3339 "
                              "date-time); with --host or --prefix: those of them")
    command.add_argument("--crawl", default="", metavar="NAME",
                         help="the crawl the URLs belong to (a frontier record's crawl; default: the "
                              "unnamed crawl)")
    command.add_argument("--recrawl", action="store_true",
                         help="also write every URL let go back to the frontier, in the same transaction: "
                              "each comes out of new-urls again now, without a crawler finding it")
    command.add_argument("--wait-s", type=float, default=600.0,
                         help="how long to wait for every shard's owner to apply it (default 600)")
    _migrate_options(command)


def _forget(spec: StageSpec, args: argparse.Namespace) -> int:
    from streams.stages.url_dedup.forget_command import run

    settings = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id)
    topics = Topics(config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix)
    return run(args, spec.load_settings(args), topics, settings.app_id)


def _canonicalize(spec: StageSpec, args: argparse.Namespace) -> int:
    from streams.urls.canonical import canonicalize_lines

    canonicalize_lines(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape"),
                       sys.stdout, spec.load_settings(args).canonical())
    return 0


def _status_key(settings: Callable[[], Any], url: str, crawl: str) -> tuple[bytes, str]:
    """A URL's mark is kept under the fingerprint of its crawl's name and its canonical form."""
    from streams.urls.canonical import canonicalize, fingerprint

    found = canonicalize(url, settings().canonical())
    return fingerprint(found, crawl), found


SPEC = StageSpec(
    NAME, inputs=("frontier",), outputs=("new-urls", "url-dedup-replies"), build=_build,
    settings=OwnSettings("streams.stages.url_dedup.settings:UrlDedupSettings", "url_dedup"),
    counts=Counts(decisions=("new", "seen"), events=EVENTS),
    cli=CommandLine(
        "emit each new frontier URL once", metrics_port=9410, status_key=_status_key,
        options=_options, overrides=_overrides, state_options=canonicalization_options,
        commands=(
            Command("url-dedup-migrate", "re-fingerprint the URL seen-set",
                    "Re-fingerprint the URL stage's seen-set for new canonicalization settings.",
                    _migrate_command_options, _migrate, "state"),
            Command("forget", "make URLs new again: by URL, host, prefix or age",
                    "Make URLs new again: every running owner of the URL stage's shards lets them go in "
                    "its own transaction, and the next sighting of each is emitted to new-urls once "
                    "more. Prints how many were forgotten once every shard has applied it "
                    "(docs/url-status-and-forget.md).", _forget_options, _forget, "state"),
            Command("canonicalize", "canonical URLs and fingerprints of stdin's URLs",
                    "URLs on stdin, one per line -> {url, canonical, fingerprint} JSON lines.",
                    canonicalization_options, _canonicalize, "tool"),
        )))
