"""Which worker owns each shard of a stage now, and where it answers ``/status``: read from the
stage's consumer group.

The group's description (Kafka's DescribeGroups) names each member's assignment, its client id and
the host it connects from. A worker's client id tells where its HTTP port answers
(:func:`advertised_client_id`), so any number of workers are found with one
request, and nothing else has to be kept up to date. An assignment is a worker's active shards: a
shard is owned by the member whose assignment holds its partition of the shard topic.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient


def advertised_client_id(base: str, address: str) -> str:
    """A worker's Kafka ``client.id`` telling where it answers ``/status``: ``<base>@<host>:<port>``.
    The group's description names each member's client id beside its assignment, so ``crawl-dedup
    status`` finds the worker that owns a shard, and where to ask it, with any number of workers."""
    return f"{base}@{address}"


def advertised_address(client_id: str, member_host: str) -> str | None:
    """Where a member answers ``/status``, from its client id and the host the group saw it connect
    from (``/10.0.0.5``: used when it listens on every address); None when it tells none."""
    base, at, address = client_id.rpartition("@")
    host, colon, port = address.rpartition(":")
    if not at or not base or not colon or not port.isdigit():
        return None
    if not host:
        host = member_host.lstrip("/")
        if ":" in host:
            host = f"[{host}]"
    return f"{host}:{port}"


@dataclass(frozen=True)
class Owner:
    """A member of a stage's group: its worker id (its static membership id, else its member id)
    and where it answers ``/status`` (None: its metrics endpoint is off)."""

    worker: str
    address: str | None


@dataclass(frozen=True)
class Owners:
    """A stage's group as described once: its shard topic (the one its members are assigned: the
    current generation's), the owner of each shard, how many members it has, its state."""

    group: str
    shard_topic: str | None
    shards: dict[int, Owner]
    members: int
    state: str

    @property
    def shard_count(self) -> int | None:
        """The shard topic's partition count, as the assignment shows it: every partition is assigned
        to a member of a group that has settled (the range assignor leaves none out); None while
        that is not so (no member, or a rebalance under way)."""
        if not self.shards or set(self.shards) != set(range(max(self.shards) + 1)):
            return None
        return max(self.shards) + 1

    def describe_missing(self, shard: int, stage: str) -> str:
        """Why no owner answers for ``shard``, in a sentence."""
        if not self.members:
            return f"no worker of the {stage} stage is running (group {self.group} has no members)"
        return (f"no worker of the {stage} stage owns shard {shard} now (group {self.group}: "
                f"{self.members} members, {self.state.lower()}): a rebalance, or more shards than workers "
                "can take")


def describe(admin: AdminClient, groups: Mapping[str, Callable[[str], bool]],
             timeout_s: float = 10.0) -> dict[str, Owners]:
    """Each group's :class:`Owners`, all described in one request; a group's shard topic is the
    topic of its members' assignments that ``groups[group]`` accepts."""
    futures = admin.describe_consumer_groups(list(groups), request_timeout=timeout_s)
    return {group: _owners(group, future.result(timeout_s), groups[group])
            for group, future in futures.items()}


def shard_owners(admin: AdminClient, group: str, shard_topic: str, timeout_s: float = 10.0) -> Owners:
    """The owners of ``shard_topic``'s partitions in ``group`` now."""
    return describe(admin, {group: lambda topic: topic == shard_topic}, timeout_s)[group]


def _owners(group: str, described: Any, is_shard_topic: Callable[[str], bool]) -> Owners:
    owners: dict[int, Owner] = {}
    shard_topic = None
    for member in described.members:
        worker = member.group_instance_id or member.member_id
        address = advertised_address(member.client_id or "", member.host or "")
        assignment = member.assignment.topic_partitions if member.assignment is not None else []
        for tp in assignment:
            if is_shard_topic(tp.topic):
                shard_topic = tp.topic
                owners[tp.partition] = Owner(worker, address)
    state = described.state.name if isinstance(described.state, ConsumerGroupState) else str(described.state)
    return Owners(group, shard_topic, owners, len(described.members), state)


class OwnersCache:
    """Where each stage's shards were owned when last described, kept between commands in a file of
    the user's cache directory (``status-owners.json``), by cluster and group, as kubectl keeps its
    discovery: a ``status`` command then asks the owners it knows at once, with no request to the
    cluster. An entry that is wrong costs one description: a worker answers only for the shards it
    owns now (421 for the others) and names its group, which the command checks, so an owner that
    moved, or a port taken by another worker since, is found out by its answer. Entries older than
    :data:`MAX_AGE_S` are not used, and that a stage ran no worker, :data:`IDLE_AGE_S`. A file that
    cannot be read or written is no cache, not an error."""

    MAX_AGE_S = 86_400.0
    IDLE_AGE_S = 60.0

    def __init__(self, path: Path | None, cluster: str) -> None:
        """``path``: None for no cache; ``cluster``: the bootstrap servers, part of every key."""
        self._path, self._cluster = path, cluster

    def load(self, groups: Iterable[str]) -> dict[str, Owners]:
        found: dict[str, Owners] = {}
        entries = self._entries()
        for group in groups:
            entry = entries.get(f"{self._cluster} {group}")
            if entry is None:
                continue
            age_s = time.time() - float(entry.get("at", 0))
            if age_s > (self.MAX_AGE_S if entry.get("members") else self.IDLE_AGE_S):
                continue
            try:
                shards = {int(shard): Owner(str(worker), address) for shard, (worker, address)
                          in entry["shards"].items()}
                found[group] = Owners(group, entry["shard_topic"], shards, int(entry["members"]),
                                      entry["state"])
            except (KeyError, TypeError, ValueError):
                continue
        return found

    def save(self, described: Iterable[Owners]) -> None:
        if self._path is None:
            return
        entries = self._entries()
        for owners in described:
            key = f"{self._cluster} {owners.group}"
            if owners.members and owners.shard_count is None:  # a rebalance under way: nothing to keep
                entries.pop(key, None)
                continue
            entries[key] = {"at": time.time(), "shard_topic": owners.shard_topic, "members": owners.members,
                            "state": owners.state,
                            "shards": {str(shard): [owner.worker, owner.address]
                                       for shard, owner in owners.shards.items()}}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            staging = self._path.with_name(f"{self._path.name}.{os.getpid()}")
            staging.write_bytes(orjson.dumps(entries))
            os.replace(staging, self._path)
        except OSError:
            pass

    def _entries(self) -> dict[str, Any]:
        if self._path is None:
            return {}
        try:
            found = orjson.loads(self._path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return found if isinstance(found, dict) else {}
