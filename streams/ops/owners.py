"""Which worker owns each shard of a stage now, and where it answers ``/status``: read from the
stage's consumer group.

The group's description (Kafka's DescribeGroups) names each member's assignment, its client id and
the host it connects from. A worker's client id tells where its HTTP port answers
(:func:`advertised_client_id`), so any number of workers are found with one
request, and nothing else has to be kept up to date. An assignment is a worker's active shards: a
shard is owned by the member whose assignment holds its partition of the shard topic.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """A stage's group as described once: the owner of each shard, how many members it has, its state."""

    group: str
    shards: dict[int, Owner]
    members: int
    state: str

    def describe_missing(self, shard: int, stage: str) -> str:
        """Why no owner answers for ``shard``, in a sentence."""
        if not self.members:
            return f"no worker of the {stage} stage is running (group {self.group} has no members)"
        return (f"no worker of the {stage} stage owns shard {shard} now (group {self.group}: "
                f"{self.members} members, {self.state.lower()}): a rebalance, or more shards than workers "
                "can take")


def shard_owners(admin: AdminClient, group: str, shard_topic: str, timeout_s: float = 10.0) -> Owners:
    """The owners of ``shard_topic``'s partitions in ``group`` now."""
    described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout_s)
    owners: dict[int, Owner] = {}
    for member in described.members:
        worker = member.group_instance_id or member.member_id
        address = advertised_address(member.client_id or "", member.host or "")
        assignment = member.assignment.topic_partitions if member.assignment is not None else []
        for tp in assignment:
            if tp.topic == shard_topic:
                owners[tp.partition] = Owner(worker, address)
    state = described.state.name if isinstance(described.state, ConsumerGroupState) else str(described.state)
    return Owners(group, owners, len(described.members), state)
