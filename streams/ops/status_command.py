"""``crawl-dedup status URL...``: what the running stages say of each URL, from their owners' state.

For each URL and each stage that keeps state by URL (``StageSpec.status_key``: the URL stage, the
revisit stage, the page stage), the command computes the URL's state key as the stage does, the
shard of that key, finds the worker owning that shard in the stage's consumer group
(:mod:`streams.ops.owners`) and asks it over HTTP (``/status``, :mod:`streams.ops.status`). The URL
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka.admin import AdminClient

from streams import config, registry
from streams.cluster import kafka_config
from streams.errors import RecordRejected, StreamsError
from streams.ops.owners import Owner, Owners, shard_owners
from streams.runtime.generations import current_topics
from streams.runtime.kafka_io import KafkaConfig
from streams.runtime.partitioner import partition_for
from streams.spec import StageSpec
from streams.topics import Topics

URL_STAGE = "url-dedup"
RETRY_S = 0.05
_WHERE = frozenset({"stage", "shard", "worker", "address"})  # where an answer came from
HTTP_TIMEOUT_S = 5.0


class NoAnswer(StreamsError):
    """A stage's owner of a URL's shard could not be found, or did not answer, in time."""


@dataclass(frozen=True)
class _Stage:
    spec: StageSpec
    settings: Any
    shard_topic: str
    shards: int  # 0: the stage never ran here (no shard topic)


class StatusClient:
    """Asks the stages about URLs; keeps what it learned of their groups between questions."""

    def __init__(self, kafka: KafkaConfig, topics: Topics, app_id: str, settings: dict[str, Any],
                 timeout_s: float = 10.0) -> None:
        """``settings``: each stage's own (its ``[section]``), by stage name, as its workers have them."""
        self._kafka, self._topics, self._app_id = kafka, topics, app_id
        self._admin = AdminClient(kafka.admin())
        self._timeout_s = timeout_s
        self._settings = settings
        self._stages: dict[str, _Stage] = {}
        self._owners: dict[str, Owners] = {}

    def ask(self, url: str, crawl: str = "") -> dict[str, Any]:
        """What the stages say of ``url`` (of crawl ``crawl``): the URL stage's answer, with the other
        stages' under their names; ``error`` instead when the URL stage cannot answer."""
        stage = self._stage(registry.spec(URL_STAGE))
        try:
            key, canonical_url = self._key(stage, url, crawl)
        except RecordRejected as rejected:
            return {"url": url, "crawl": crawl, "error": f"{rejected.reason}: {rejected.detail}"}
        found: dict[str, Any] = {"url": url, "crawl": crawl, "canonical": canonical_url,
                                 "fingerprint": key.hex()}
        try:
            found.update(self._answer(stage, key))
        except NoAnswer as missing:
            return {**found, "error": str(missing)}
        unavailable: dict[str, str] = {}
        for spec in registry.STAGES:
            if spec.status_key is None or spec.name == URL_STAGE:
                continue
            found[_field(spec.name)] = self._other(self._stage(spec), url, crawl, unavailable)
        if unavailable:
            found["unavailable"] = unavailable
        return found

    def _other(self, stage: _Stage, url: str, crawl: str, unavailable: dict[str, str]) -> Any:
        """Another stage's answer (its own fields, without where it came from), None when it keeps
        nothing of the URL or cannot be asked (then ``unavailable`` says why)."""
        try:
            key, _ = self._key(stage, url, crawl)
            answer = self._answer(stage, key)
        except RecordRejected:
            return None
        except NoAnswer as missing:
            unavailable[stage.spec.name] = str(missing)
            return None
        found = {name: value for name, value in answer.items() if name not in _WHERE}
        return next(iter(found.values())) if len(found) == 1 else found

    def _key(self, stage: _Stage, url: str, crawl: str) -> tuple[bytes, str]:
        assert stage.spec.status_key is not None
        return stage.spec.status_key(self._settings.get(stage.spec.name), url, crawl)

    def _stage(self, spec: StageSpec) -> _Stage:
        found = self._stages.get(spec.name)
        if found is None:
            current = current_topics(self._kafka, self._topics, self._app_id, spec.name)
            topic = current.internal(self._app_id, spec.name, spec.internal[0].name)
            metadata = self._admin.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
            shards = 0 if metadata is None or metadata.error is not None else len(metadata.partitions)
            found = self._stages[spec.name] = _Stage(spec, self._settings.get(spec.name), topic, shards)
        return found

    def _answer(self, stage: _Stage, key: bytes) -> dict[str, Any]:
        """The stage's answer for ``key`` from the owner of its shard, asking the group again while
        the owner is moving or recovering, until the timeout."""
        name = stage.spec.name
        if not stage.shards:
            raise NoAnswer(f"the {name} stage has not run with this app id and topic prefix "
                           f"(no topic {stage.shard_topic})")
        shard = partition_for(key, stage.shards)
        deadline = time.monotonic() + self._timeout_s
        why = ""
        while True:
            owners = self._owners.get(name)
            if owners is None:
                owners = self._owners[name] = shard_owners(
                    self._admin, self._topics.group(self._app_id, name), stage.shard_topic, self._timeout_s)
            owner = owners.shards.get(shard)
            if owner is None:
                why = owners.describe_missing(shard, name)
                if not owners.members:
                    raise NoAnswer(why)
            else:
                code, found, why = _get(owner, key, shard, name)
                if code == 200:
                    found.pop("stage", None)
                    return {**found, "shard": shard, "worker": owner.worker, "address": owner.address}
            if time.monotonic() + RETRY_S > deadline:
                raise NoAnswer(why)
            self._owners.pop(name, None)  # ask the group again: it moved, or is moving
            time.sleep(RETRY_S)


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
        "status", help="what the running stages say of URLs: seen since when, next fetch, last verdict",
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
    command.add_argument("--timeout-s", type=float, default=10.0,
                         help="how long to wait for a shard's owner (a rebalance, a recovery; default 10)")
    command.set_defaults(handler=run)


def stage_settings(args: argparse.Namespace, specs: Sequence[StageSpec] = registry.STAGES) -> dict[str, Any]:
    """Each stage's own settings, as its workers read them (the URL stage's profile from ``--profile``)."""
    found = {}
    for spec in specs:
        settings_type = spec.settings_type()
        if spec.status_key is not None and settings_type is not None:
            overrides = {"profile": args.profile} if spec.name == URL_STAGE else {}
            found[spec.name] = config.load(settings_type, spec.settings_section or "", args.config,
                                           **overrides)
    return found


def run(args: argparse.Namespace) -> int:
    runtime = config.load(config.RuntimeSettings, "runtime", args.config, app_id=args.app_id)
    topics = Topics(config.load(config.TopicSettings, "topics", args.config, prefix=args.topic_prefix).prefix)
    client = StatusClient(kafka_config(args.config), topics, runtime.app_id, stage_settings(args),
                          args.timeout_s)
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
