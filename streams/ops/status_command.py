"""``crawl-dedup status URL...``: what the running stages say of each URL, from their owners' state.

For each URL and each stage that keeps state by URL (``CommandLine.status_key``: the URL stage, the
revisit stage, the page stage), the command computes the URL's state key as the stage does, the
shard of that key, finds the worker owning that shard in the stage's consumer group
(:mod:`streams.ops.owners`) and asks it over HTTP (``/status``, :mod:`streams.ops.status`). Every
stage's group is described in one request, which names the shard topic its members are assigned
(the current generation's) and, every partition being assigned, the shard count: a question costs
that request and one HTTP request per stage that runs, nothing else (a client asking several URLs
describes the groups once, and again only when an owner moved). The URL
stage answers whether the URL is seen and since when; the revisit stage its last fetch, its next and
its last change; the page stage its last verdict. A worker that no longer owns the shard (a
rebalance) or is still recovering it answers so, and the group is asked again until ``timeout_s``.

The URL stage must answer: a URL whose shard no worker owns is an error, one line saying why. The
other stages answer where they run; one that is not running is named under ``unavailable``.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka.admin import AdminClient

from streams import config, registry
from streams.broker.bootstrap import kafka_config
from streams.broker.kafka_release import cache_root
from streams.errors import RecordRejected, StreamsError
from streams.ops.owners import Owner, OwnersCache, describe
from streams.runtime.admin import KafkaConfig
from streams.runtime.api import partition_for
from streams.spec import StageSpec
from streams.topics import Topics

URL_STAGE = "url-dedup"
OWNERS_CACHE = "status-owners.json"
RETRY_S = 0.05
_WHERE = frozenset({"stage", "shard", "worker", "address"})  # where an answer came from
HTTP_TIMEOUT_S = 5.0
# A new client's first request goes to the group's coordinator, a broker the client has only just
# learned of, and librdkafka waits reconnect.backoff.ms (100 ms, jittered) before connecting to it:
# half of a question's time. 10 ms measured 56 -> 17 ms for a new client's first DescribeGroups
# (median of 25 on a loaded machine). Settings passed through win.
QUICK_RETRIES = {"reconnect.backoff.ms": 10, "retry.backoff.ms": 10}


class NoAnswer(StreamsError):
    """A stage's owner of a URL's shard could not be found, or did not answer, in time."""


class StatusClient:
    """Asks the stages about URLs; keeps what it learned of their groups between questions."""

    def __init__(self, kafka: KafkaConfig, topics: Topics, app_id: str,
                 settings: Mapping[str, Any] | Callable[[str], Any],
                 timeout_s: float = 10.0, cache: Path | None = None) -> None:
        """``settings``: each stage's own (its ``[section]``), by stage name, as its workers have them
        (a stage not named: its defaults), or what loads them by name when first needed (a stage's
        settings class may import its whole stage: a stage not running never needs it);
        ``cache``: where owners are kept between commands (:class:`~streams.ops.owners.OwnersCache`;
        None: described afresh)."""
        self._topics, self._app_id = topics, app_id
        self._kafka = kafka
        self._admin: AdminClient | None = None  # made when the cluster is first asked
        self._timeout_s = timeout_s
        self._specs = {spec.name: spec for spec in registry.STAGES if spec.cli.status_key is not None}
        self._load = settings if callable(settings) else (
            lambda name: settings[name] if name in settings else _defaults(self._specs[name]))
        self._settings: dict[str, Any] = {}
        self._cache = OwnersCache(cache, kafka.bootstrap_servers)
        self._groups = {name: topics.group(app_id, name) for name in self._specs}
        cached = self._cache.load(self._groups.values())
        self._owners = {name: cached[group] for name, group in self._groups.items() if group in cached}
        self._described: set[str] = set()  # the stages whose groups this client described

    def ask(self, url: str, crawl: str = "") -> dict[str, Any]:
        """What the stages say of ``url`` (of crawl ``crawl``): the URL stage's answer, with the other
        stages' under their names; ``error`` instead when the URL stage cannot answer."""
        missing = [name for name in self._specs if name not in self._owners]
        if missing:
            self._describe(missing)  # in one request
        try:
            key, canonical_url = self._key(URL_STAGE, url, crawl)
        except RecordRejected as rejected:
            return {"url": url, "crawl": crawl, "error": f"{rejected.reason}: {rejected.detail}"}
        found: dict[str, Any] = {"url": url, "crawl": crawl, "canonical": canonical_url,
                                 "fingerprint": key.hex()}
        try:
            found.update(self._answer(URL_STAGE, key))
        except NoAnswer as missing:
            return {**found, "error": str(missing)}
        unavailable: dict[str, str] = {}
        for name in self._specs:
            if name != URL_STAGE:
                found[_field(name)] = self._other(name, url, crawl, unavailable)
        if unavailable:
            found["unavailable"] = unavailable
        return found

    def _other(self, name: str, url: str, crawl: str, unavailable: dict[str, str]) -> Any:
        """Another stage's answer (its own fields, without where it came from), None when it keeps
        nothing of the URL or cannot be asked (then ``unavailable`` says why)."""
        try:
            if name in self._owners and not self._owners[name].members:  # not running: no key needed
                raise NoAnswer(self._owners[name].describe_missing(0, name))
            key, _ = self._key(name, url, crawl)
            answer = self._answer(name, key)
        except RecordRejected:
            return None
        except NoAnswer as missing:
            unavailable[name] = str(missing)
            return None
        found = {field: value for field, value in answer.items() if field not in _WHERE}
        return next(iter(found.values())) if len(found) == 1 else found

    def _key(self, name: str, url: str, crawl: str) -> tuple[bytes, str]:
        status_key = self._specs[name].cli.status_key
        assert status_key is not None
        return status_key(partial(self._settings_of, name), url, crawl)

    def _settings_of(self, name: str) -> Any:
        if name not in self._settings:
            self._settings[name] = self._load(name)
        return self._settings[name]

    def _describe(self, names: list[str]) -> None:
        topics, app = self._topics, self._app_id
        if self._admin is None:
            self._admin = AdminClient({**QUICK_RETRIES, **self._kafka.admin()})
        groups = {self._groups[name]: partial(topics.is_internal, app_id=app, stage=name,
                                              name=self._specs[name].internal[0].name)
                  for name in names}
        described = describe(self._admin, groups, self._timeout_s)
        for name in names:
            self._owners[name] = described[self._groups[name]]
        self._described.update(names)
        self._cache.save(described.values())

    def _answer(self, name: str, key: bytes) -> dict[str, Any]:
        """The stage's answer for ``key`` from the owner of its shard, asking the group again while
        the owner is moving or recovering, until the timeout."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            if name not in self._owners:
                self._describe([name])
            owners = self._owners[name]
            count = owners.shard_count
            if not owners.members and (name in self._described or name != URL_STAGE):
                raise NoAnswer(owners.describe_missing(0, name))  # (the URL stage's, from the cache: ask)
            if not owners.members:
                why = owners.describe_missing(0, name)
            elif count is None:
                why = (f"the group of the {name} stage ({owners.group}, {owners.state.lower()}) has not "
                       "settled: no worker owns every shard yet")
            else:
                shard = partition_for(key, count)
                owner = owners.shards[shard]
                code, found, why = _get(owner, key, shard, name)
                if code == 200 and found.get("group") == owners.group:
                    found.pop("stage", None)
                    found.pop("group", None)
                    return {**found, "worker": owner.worker, "address": owner.address}
                if code == 200:  # another worker answers there now (a port taken again): not ours
                    why = f"{owner.address} is no longer a worker of the {name} stage of group {owners.group}"
            if time.monotonic() + RETRY_S > deadline:
                raise NoAnswer(why)
            del self._owners[name]  # ask the group again: it moved, or is moving
            time.sleep(RETRY_S)


def _defaults(spec: StageSpec) -> Any:
    settings_type = spec.settings_type()
    return settings_type() if settings_type is not None else None


def _get(owner: Owner, key: bytes, shard: int, stage: str) -> tuple[int, dict[str, Any], str]:
    """Ask ``owner`` for ``key``: (HTTP status, answer, why it is not an answer)."""
    if owner.address is None:
        return 0, {}, (f"the owner of shard {shard} of the {stage} stage, worker {owner.worker}, tells no "
                       "address: its metrics endpoint is off ([metrics] enabled = false), or it runs an "
                       "earlier version")
    host, _, port = owner.address.rpartition(":")
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=HTTP_TIMEOUT_S)
    try:
        connection.request("GET", f"/status?key={key.hex()}")
        response = connection.getresponse()
        code, body = response.status, response.read()
    except OSError as error:
        return 0, {}, (f"the owner of shard {shard} of the {stage} stage, worker {owner.worker}, does not "
                       f"answer at {owner.address} ({error}): it stopped or crashed, and the group keeps "
                       "its shards until its session times out (a static member: [runtime] worker_id)")
    finally:
        connection.close()
    found: dict[str, Any] = orjson.loads(body) if body.startswith(b"{") else {}
    if code == 421 and found.get("recovering"):
        return code, found, f"worker {owner.worker} is still recovering shard {shard} of the {stage} stage"
    if code == 421:
        return code, found, f"worker {owner.worker} no longer owns shard {shard} of the {stage} stage"
    return code, found, f"worker {owner.worker} answered {code}: {found.get('error') or body[:200]!r}"


def _field(stage: str) -> str:
    return {"content-seen": "content"}.get(stage, stage)


# -- the command ------------------------------------------------------------------------------------

def add_parser(commands: Any) -> None:
    command = commands.add_parser(
        "status", help="what the running stages say of URLs",
        description="Ask the running stages about URLs, from the state of the worker owning each "
                    "one's shard: the URL stage (canonical form, fingerprint, shard, owner, seen and "
                    "since when), the revisit stage (last and next fetch, interval, last change) and "
                    "the page stage (last verdict, duplicate_of). Exit 1 when the URL stage cannot "
                    "answer for a URL (docs/url-status-and-forget.md).")
    command.add_argument("urls", nargs="+", metavar="URL")
    command.add_argument("--json", action="store_true", help="one JSON object per URL, one per line")
    command.add_argument("--crawl", default="", metavar="NAME",
                         help="the crawl the URL belongs to (a frontier record's crawl; default: the unnamed "
                              "crawl)")
    command.add_argument("--app-id", default=None)
    command.add_argument("--topic-prefix", default=None)
    command.add_argument("--profile", choices=["safe", "aggressive"], default=None,
                         help="the URL stage's canonicalization profile (default: its settings')")
    command.add_argument("--no-cache", action="store_true",
                         help="describe the stages' groups afresh, ignoring the owners found last time "
                              f"(kept in the user's cache directory, {OWNERS_CACHE})")
    command.add_argument("--timeout-s", type=float, default=10.0,
                         help="how long to wait for a shard's owner (a rebalance, a recovery; default 10)")
    command.set_defaults(handler=run)


def stage_settings(args: argparse.Namespace) -> Callable[[str], Any]:
    """What loads a stage's own settings as its workers read them (the URL stage's profile from
    ``--profile``), when the stage is first asked."""
    def load(name: str) -> Any:
        own = registry.spec(name).settings
        if own is None:
            return None
        overrides = {"profile": args.profile} if name == URL_STAGE else {}
        return config.load(own.type(), own.section, args.config, **overrides)

    return load


def run(args: argparse.Namespace) -> int:
    runtime = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id)
    topics = Topics(config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix)
    client = StatusClient(kafka_config(args.config), topics, runtime.app_id, stage_settings(args),
                          args.timeout_s, cache=None if args.no_cache else cache_root() / OWNERS_CACHE)
    failed = False
    for url in args.urls:
        found = client.ask(url, args.crawl)
        failed = failed or "error" in found
        sys.stdout.write(orjson.dumps(found).decode() + "\n" if args.json else render(found))
        sys.stdout.flush()
    return 1 if failed else 0


def render(found: dict[str, Any]) -> str:
    """One URL's answer for a person."""
    lines = [found["url"]]
    if "canonical" in found:
        where = f"fingerprint {found['fingerprint']}"
        if "shard" in found:
            where += f", shard {found['shard']}, worker {found['worker']}"
        lines.append(f"  canonical  {found['canonical']} ({where})")
    if "error" in found:
        lines.append(f"  error      {found['error']}")
        return "\n".join(lines) + "\n"
    lines.append(f"  seen       {_seen(found)}")
    history = (found.get("revisit") or {}) if isinstance(found.get("revisit"), dict) else {}
    if history:
        changed = history.get("last_changed_at") or "no change seen"
        lines.append(f"  revisit    next fetch {history['next_fetch_at']} (every {history['interval_s']:g} "
                     f"s; last fetch {history['last_fetch_at']}, last change {changed})")
    verdict = found.get("content")
    if isinstance(verdict, dict):
        said = verdict["verdict"] + (f" ({verdict['kind']}) of {verdict['duplicate_of']}"
                                     if verdict.get("duplicate_of") else "")
        lines.append(f"  content    {said}, fetched {verdict['fetched_at']}")
    for stage, why in (found.get("unavailable") or {}).items():
        lines.append(f"  {stage:<10} unavailable: {why}")
    return "\n".join(lines) + "\n"


def _seen(found: dict[str, Any]) -> str:
    if found.get("forgetting"):
        return "no (a forget under way lets it go)"
    if found.get("expired"):
        return f"no (expired: seen {found['first_seen_at']}, new again since {found['new_again_at']})"
    if not found.get("seen"):
        return "no"
    since = f", since {found['first_seen_at']}" if found.get("first_seen_at") else ""
    again = f"; new again at {found['new_again_at']}" if found.get("new_again_at") else ""
    return f"yes{since}{again}"
